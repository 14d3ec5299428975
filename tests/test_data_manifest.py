"""The manifest beside a prepared dataset, and the counts read from a Megatron `.idx` without NumPy: checked
against datasets written and read by Megatron-Core's own IndexedDatasetBuilder / IndexedDataset."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from nemo_recipes.data.manifest import (
    FORMAT,
    MANIFEST_SUFFIX,
    Manifest,
    TokenizerInfo,
    index_summary,
    read_manifest,
    write_manifest,
)
from nemo_recipes.errors import InvalidConfigError

TOKENIZER = TokenizerInfo(path="/t/tokenizer", kind="huggingface", fingerprint="sha256:ab", vocab_size=8192, eod_id=0)
MANIFEST = Manifest(
    prefix="corpus",
    documents=3,
    tokens=12,
    text_bytes=40,
    dtype="uint16",
    max_token_id=8000,
    tokenizer=TOKENIZER,
    inputs=({"path": "/in/a.jsonl", "bytes": 40, "sha256": "cd"},),
    arguments={"key": "text"},
    created_by="nemo-recipes 0.1.0",
)


def _write_dataset(prefix, documents, dtype):
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for document in documents:
        builder.add_document(torch.tensor(document, dtype=torch.int64), [len(document)])
    builder.finalize(f"{prefix}.idx")


def _problem(error):
    [problem] = error.value.problems
    return problem


def test_the_manifest_survives_json_and_the_disk(tmp_path):
    data = MANIFEST.to_json()
    assert data["format"] == FORMAT and data["tokenizer"]["vocab_size"] == 8192
    assert Manifest.from_json(json.loads(json.dumps(data))) == MANIFEST
    for suffix in (".bin", ".idx"):
        (tmp_path / f"corpus{suffix}").write_bytes(b"")
    path = write_manifest(tmp_path / "corpus", MANIFEST)
    assert path.name == "corpus" + MANIFEST_SUFFIX
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.bin", "corpus.idx", "corpus.manifest.json"]
    assert read_manifest(tmp_path / "corpus") == MANIFEST


@pytest.mark.parametrize(
    "change, wrong",
    [
        ({"format": "something/2"}, "format"),
        ({"tokens": -1}, "tokens"),
        ({"documents": "3"}, "documents"),
        ({"tokenizer": {"path": "/t"}}, "missing"),
    ],
)
def test_a_malformed_manifest_is_refused_with_the_fix(tmp_path, change, wrong):
    for suffix in (".bin", ".idx"):
        (tmp_path / f"corpus{suffix}").write_bytes(b"")
    (tmp_path / f"corpus{MANIFEST_SUFFIX}").write_text(json.dumps({**MANIFEST.to_json(), **change}))
    with pytest.raises(InvalidConfigError) as error:
        read_manifest(tmp_path / "corpus")
    problem = _problem(error)
    assert problem.field == "data_paths" and wrong in problem.message and "data prepare" in problem.fix


def test_a_missing_dataset_or_manifest_is_named(tmp_path):
    with pytest.raises(InvalidConfigError) as error:
        read_manifest(tmp_path / "nothing")
    assert "nothing.bin, nothing.idx missing" in _problem(error).message
    for suffix in (".bin", ".idx"):
        (tmp_path / f"corpus{suffix}").write_bytes(b"")
    with pytest.raises(InvalidConfigError) as error:
        read_manifest(tmp_path / "corpus")
    assert "corpus.manifest.json is missing" in _problem(error).message


@pytest.mark.parametrize("suffix", [".bin", ".idx", MANIFEST_SUFFIX])
def test_a_prefix_with_a_suffix_is_refused(tmp_path, suffix):
    for function in (read_manifest, index_summary):
        with pytest.raises(InvalidConfigError) as error:
            function(f"{tmp_path}/corpus{suffix}")
        assert _problem(error).fix == f"drop the suffix: {tmp_path}/corpus"


def test_writing_leaves_no_temporary_file_and_replaces_the_old_manifest(tmp_path):
    write_manifest(tmp_path / "corpus", MANIFEST)
    write_manifest(tmp_path / "corpus", replace(MANIFEST, documents=4))
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.manifest.json"]
    assert json.loads((tmp_path / "corpus.manifest.json").read_text())["documents"] == 4


@pytest.mark.nemo
@pytest.mark.parametrize("dtype_name", ["uint16", "int32"])
def test_index_summary_counts_what_megatron_reads(tmp_path, dtype_name):
    import numpy as np
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    documents = [[1, 2, 3, 0], [7, 0], list(range(1, 300)) + [0]]
    prefix = str(tmp_path / "d")
    _write_dataset(prefix, documents, getattr(np, dtype_name))
    summary = index_summary(prefix)
    dataset = IndexedDataset(prefix)
    assert summary.dtype == dtype_name == dataset.index.dtype.__name__
    assert summary.sequences == len(dataset) == 3
    assert summary.documents == len(dataset.document_indices) - 1 == 3
    assert summary.tokens == int(dataset.sequence_lengths.sum()) == sum(map(len, documents))

    # A .bin cut short (a full disk, a killed copy) no longer matches its index.
    with open(f"{prefix}.bin", "r+b") as stream:
        stream.truncate(10)
    with pytest.raises(InvalidConfigError) as error:
        index_summary(prefix)
    assert "truncated or half-written" in _problem(error).message


def test_index_summary_refuses_what_is_not_an_index(tmp_path):
    (tmp_path / "d.idx").write_bytes(b"not an index at all, really not")
    (tmp_path / "d.bin").write_bytes(b"")
    with pytest.raises(InvalidConfigError) as error:
        index_summary(tmp_path / "d")
    assert "not a Megatron index" in _problem(error).message
    with pytest.raises(InvalidConfigError) as error:
        index_summary(tmp_path / "none")
    assert "none.idx is missing" in _problem(error).message


@pytest.mark.nemo
@pytest.mark.parametrize("damage", ["2^40 sequences", "2^62 sequences", "cut short", "negative length"])
def test_a_damaged_index_is_refused_before_its_counts_are_trusted(tmp_path, damage):
    import struct

    import numpy as np

    prefix = tmp_path / "d"
    _write_dataset(str(prefix), [[1, 2, 3, 0], [7, 0]], np.uint16)
    idx = tmp_path / "d.idx"
    data = bytearray(idx.read_bytes())
    head = struct.Struct("<9sQBQQ")
    magic, version, code, sequences, documents = head.unpack_from(data)
    if damage.startswith("2^"):  # the header claims more than the file holds: MemoryError, OverflowError before
        head.pack_into(data, 0, magic, version, code, 1 << int(damage[2:4]), documents)
    elif damage == "cut short":
        del data[-5:]
    else:  # the first length negative, the second larger, the total unchanged: only the sign shows the damage
        struct.pack_into("<ii", data, head.size, -1, 6)
    idx.write_bytes(bytes(data))
    with pytest.raises(InvalidConfigError) as error:
        index_summary(prefix)
    assert "damaged" in _problem(error).message, _problem(error).message


def test_the_light_modules_import_only_the_standard_library():
    # The planner reads manifests and fingerprints tokenizers on the fast path.
    probe = (
        "import sys, json\n"
        "import nemo_recipes.data.manifest, nemo_recipes.data.tokenizers\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout))
    heavy = {"numpy", "torch", "megatron", "tokenizers", "sentencepiece", "transformers", "nemo"}
    assert loaded & heavy == set() and "nemo_recipes" in loaded
