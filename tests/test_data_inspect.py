"""`nemo-recipes data inspect`: counts, manifest and a decoded sample of a prepared dataset, and exit code 2 when a
token id is not below the tokenizer's vocabulary."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from nemo_recipes.cli.main import main
from nemo_recipes.data import tokenizers
from nemo_recipes.data.prepare import prepare

pytestmark = pytest.mark.nemo

TEXTS = [f"Paragraph {i}. The river ran past the old mill, and the miller sang." for i in range(200)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inspect")
    (root / "story.txt").write_text("\n\n".join(TEXTS) + "\n")
    prepare([str(root / "story.txt")], root / "out", train_tokenizer=True, vocab_size=300, progress="none",
            stream=io.StringIO())  # fmt: skip
    return root / "out" / "story"


def inspect(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["data", "inspect", *args])
    return code, out.getvalue(), err.getvalue()


def test_inspect_shows_counts_manifest_and_a_decoded_sample(prepared):
    code, out, err = inspect(str(prepared))
    assert code == 0, err
    assert f"{prepared}: 200 documents" in out and "(uint16)" in out
    assert "sample: 'Paragraph 0. The river ran past the old mill, and the miller sang.<|endoftext|>'" in out
    code, out, _ = inspect(str(prepared), "--json", "--sample-tokens", "3")
    [data] = json.loads(out)
    assert data["documents"] == 200 == data["manifest"]["documents"] and data["problems"] == []
    assert data["tokens"] == data["manifest"]["tokens"] and data["sample"].startswith("Par")


def test_a_token_id_beyond_the_vocabulary_is_an_error(prepared, tmp_path):
    damaged = tmp_path / "story"
    for suffix in (".bin", ".idx", ".manifest.json"):
        shutil.copy(f"{prepared}{suffix}", f"{damaged}{suffix}")
    with open(f"{damaged}.bin", "r+b") as stream:
        stream.seek(10)
        stream.write((65000).to_bytes(2, "little"))
    code, _, err = inspect(str(damaged))
    assert code == 2
    assert f"data_paths='{damaged}'" in err and "token id 65000 is not below the tokenizer's vocabulary" in err
    assert "Fix: prepare the data again" in err


def test_another_tokenizer_is_named_and_its_smaller_vocabulary_refused(prepared, tmp_path):
    small = tokenizers.train(TEXTS, tmp_path, vocab_size=260)
    code, _, err = inspect(str(prepared), "--tokenizer", str(small))
    assert code == 2
    assert "tokenizer_path=" in err and "not the tokenizer the dataset was written with" in err
    assert "not below the tokenizer's vocabulary of 260" in err


@pytest.mark.parametrize("suffix, why", [("", "missing"), (".bin", "drop the suffix")])
def test_a_prefix_that_is_not_a_dataset(tmp_path, suffix, why):
    code, _, err = inspect(str(tmp_path / f"nothing{suffix}"))
    assert code == 2 and why in err and "data_paths=" in err


@pytest.mark.parametrize("change", ["tokenizer removed", "tokenizer replaced", "manifest names another"])
def test_a_manifests_tokenizer_that_is_gone_or_changed_is_an_error(prepared, tmp_path, change):
    """Issue 33 (red team): inspect exited 0 and dropped the sample without a word when the tokenizer the manifest
    names was removed, replaced on disk, or the manifest edited to name another directory."""
    copy = tmp_path / "copy"
    shutil.copytree(prepared.parent, copy)
    manifest_file = copy / "story.manifest.json"
    manifest = json.loads(manifest_file.read_text())
    tokenizer_dir = copy / "tokenizer"
    manifest["tokenizer"]["path"] = str(tokenizer_dir)
    manifest_file.write_text(json.dumps(manifest))
    code, out, err = inspect(str(copy / "story"))
    assert code == 0 and "sample: 'Paragraph 0." in out, err  # the copy, its manifest pointed at it: intact
    if change == "tokenizer removed":
        shutil.rmtree(tokenizer_dir)
    elif change == "tokenizer replaced":
        shutil.rmtree(tokenizer_dir)
        assert tokenizers.train(TEXTS[:50], copy, vocab_size=270) == tokenizer_dir
    else:
        other = tokenizers.train(TEXTS[:50], tmp_path / "other", vocab_size=270)
        manifest["tokenizer"]["path"] = str(other)
        manifest_file.write_text(json.dumps(manifest))
    code, out, err = inspect(str(copy / "story"))
    assert code == 2, (out, err)
    assert "tokenizer=" in err and "the ids are not checked against it" in err and "give --tokenizer" in err
    assert "sample:" not in out
