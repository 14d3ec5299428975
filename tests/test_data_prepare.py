"""`data prepare` end to end: every input kind into Megatron indexed datasets, read back with Megatron-Core's own
IndexedDataset and decoded with the tokenizer; byte-identical whatever the workers and shards; resumable after a real
`kill -9`; an unchanged re-run does nothing."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _cli import ENV, SCRIPT

from nemo_recipes.data import shard_plan, tokenizers
from nemo_recipes.data.manifest import index_summary, read_manifest
from nemo_recipes.data.prepare import UINT16_VOCAB_LIMIT, prepare

pytestmark = pytest.mark.nemo  # Megatron-Core writes and reads the datasets

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will my more who what up out about time "
    "king queen sword river night morning letter garden winter summer naïve café 東京 🙂"
).split()


def paragraph(rng: random.Random, words: int) -> str:
    lines = []
    while words > 0:
        n = min(words, rng.randint(4, 12))
        lines.append(" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + rng.choice([".", ",", ";", "!"]))
        words -= n
    return "\n".join(lines)


def documents(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [paragraph(rng, rng.randint(3, 120)) for _ in range(count)]


def write_jsonl(path: Path, texts: list[str], key: str = "text") -> Path:
    lines = []
    for i, text in enumerate(texts):
        record: dict = {"id": i}
        node = record
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = text
        lines.append(json.dumps(record, ensure_ascii=i % 2 == 0))
    data = ("\n".join(lines) + "\n").encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data, mtime=0))
    elif path.suffix == ".zst":
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return tokenizers.train(documents(0, 300), tmp_path_factory.mktemp("tok"), vocab_size=600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Inputs of every kind, and the documents each source must hold, in order."""
    root = tmp_path_factory.mktemp("inputs")
    expected = {}
    expected["plain"] = documents(1, 400)
    write_jsonl(root / "plain.jsonl", expected["plain"])
    expected["nested"] = documents(2, 300)
    write_jsonl(root / "nested.jsonl.gz", expected["nested"], key="meta.body")
    expected["zstd"] = documents(3, 200)
    write_jsonl(root / "zstd.jsonl.zst", expected["zstd"])
    (root / "shelf").mkdir()
    books = [documents(4, 150), documents(5, 150)]
    for i, book in enumerate(books):
        # Paragraphs separated by one or more blank lines (some with spaces), CRLF in the second book.
        separators = ["\n\n", "\n  \n\n", "\n\t\n"]
        text = "".join(p + separators[j % 3] for j, p in enumerate(book))
        if i == 1:
            text = text.replace("\n", "\r\n")
        (root / "shelf" / f"book{i}.txt").write_text("\ufeff" + text if i == 0 else text, encoding="utf-8")
    (root / "shelf" / "README").write_text("not an input: no known suffix")
    expected["shelf"] = books[0] + books[1]
    return {"root": root, "expected": expected}


def _arguments(corpus: dict) -> tuple[list[str], list[str]]:
    root = corpus["root"]
    plain_keyed = [str(root / "plain.jsonl"), str(root / "zstd.jsonl.zst"), str(root / "shelf")]
    nested = [f"nested={root}/nested.jsonl.*"]
    return plain_keyed, nested


def _prepare(corpus, tokenizer, out, **kwargs):
    plain_keyed, nested = _arguments(corpus)
    stream = io.StringIO()
    manifests = prepare(plain_keyed, out, tokenizer_path=tokenizer, progress="lines", stream=stream, **kwargs)
    manifests += prepare(nested, out, tokenizer_path=tokenizer, key="meta.body", progress="none", **kwargs)
    return manifests, stream.getvalue()


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".bin", ".idx")}


def test_every_input_kind_is_read_back_by_megatron_as_its_documents(corpus, tokenizer, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    manifests, log = _prepare(corpus, tokenizer, tmp_path / "out", workers=1)
    encoder = tokenizers.load(tokenizer)
    assert [m.prefix for m in manifests] == ["plain", "zstd", "shelf", "nested"]
    for manifest in manifests:
        expected = corpus["expected"][manifest.prefix]
        prefix = tmp_path / "out" / manifest.prefix
        dataset = IndexedDataset(str(prefix))
        assert len(dataset) == manifest.documents == len(expected)
        assert dataset.index.dtype.__name__ == manifest.dtype == "uint16"
        for i in (0, 1, len(expected) // 2, len(expected) - 1):
            ids = dataset[i].tolist()
            assert ids[-1] == encoder.eod_id and encoder.eod_id not in ids[:-1]
            assert encoder.decode(ids[:-1]) == expected[i].replace("\r", "")
        assert manifest.tokens == int(dataset.sequence_lengths.sum()) == index_summary(prefix).tokens
        assert manifest.text_bytes == sum(len(t.replace("\r", "").encode()) for t in expected)
        assert manifest.max_token_id == max(int(dataset[i].max()) for i in range(len(dataset)))
        assert read_manifest(prefix) == manifest
        assert manifest.tokenizer == tokenizers.describe(tokenizer)
        for record in manifest.inputs:
            assert record["bytes"] == Path(record["path"]).stat().st_size and len(record["sha256"]) == 64
    assert [Path(i["path"]).name for i in manifests[2].inputs] == ["book0.txt", "book1.txt"]
    assert manifests[3].arguments["key"] == "meta.body"
    assert "wrote " in log and "tokens/s" in log


def test_the_output_is_byte_identical_whatever_the_workers_and_shards(corpus, tokenizer, tmp_path):
    _prepare(corpus, tokenizer, tmp_path / "one", workers=1)
    _prepare(corpus, tokenizer, tmp_path / "two", workers=2, shard_bytes=20_000)
    plan = shard_plan.read_plan(tmp_path / "two")
    assert plan is not None and len({s.path for s in plan.shards}) < len(plan.shards)  # files were split
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert one.keys() == two.keys() and len(one) == 8
    assert all(one[name] == two[name] for name in one)


def test_an_unchanged_rerun_does_nothing_and_says_so(corpus, tokenizer, tmp_path):
    out = tmp_path / "out"
    _prepare(corpus, tokenizer, out, workers=1)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    stream = io.StringIO()
    plain_keyed, _ = _arguments(corpus)
    manifests = prepare(plain_keyed, out, tokenizer_path=tokenizer, stream=stream, progress="none")
    assert "nothing to do" in stream.getvalue() and len(manifests) == 3
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    # A changed argument is a new plan: the outputs are written again.
    stream = io.StringIO()
    prepare(plain_keyed, out, tokenizer_path=tokenizer, stream=stream, progress="none", max_document_chars=10**6)
    assert "nothing to do" not in stream.getvalue() and "wrote " in stream.getvalue()


def test_a_trained_tokenizer_is_written_beside_the_data_and_reused(corpus, tmp_path):
    out = tmp_path / "out"
    plain_keyed, _ = _arguments(corpus)
    stream = io.StringIO()
    [manifest, *_] = prepare(plain_keyed, out, train_tokenizer=True, vocab_size=500, stream=stream, progress="none")
    # A small corpus has fewer pairs to merge than the vocabulary asked for: said, and used as it is.
    assert manifest.tokenizer.path == str(out / "tokenizer") and manifest.tokenizer.vocab_size < 500
    assert f"the sample gave {manifest.tokenizer.vocab_size} entries" in stream.getvalue()
    assert manifest.arguments["train_tokenizer"] == {"kind": "huggingface", "vocab_size": 500, "sample_bytes": 10**8}
    assert "training a huggingface BPE" in stream.getvalue()
    stream = io.StringIO()
    prepare(plain_keyed, out, train_tokenizer=True, vocab_size=500, stream=stream, progress="none", workers=2)
    assert "reusing" in stream.getvalue() and "nothing to do" in stream.getvalue()


def test_a_trained_sentencepiece_tokenizer_writes_a_model_file_beside_the_data(corpus, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    out = tmp_path / "out"
    [manifest] = prepare([str(corpus["root"] / "plain.jsonl")], out, train_tokenizer=True, vocab_size=400,
                         tokenizer_kind="sentencepiece", progress="none", stream=io.StringIO())  # fmt: skip
    assert manifest.tokenizer.kind == "sentencepiece" and manifest.tokenizer.path == str(out / "tokenizer.model")
    encoder = tokenizers.load(out / "tokenizer.model")
    dataset = IndexedDataset(str(out / "plain"))  # held: its memory map closes with it
    ids = dataset[3].tolist()
    assert ids[-1] == encoder.eod_id == manifest.tokenizer.eod_id
    assert encoder.decode(ids[:-1]) == corpus["expected"]["plain"][3]


def test_a_vocabulary_too_large_for_uint16_is_stored_as_int32_and_said(corpus, tokenizer, tmp_path):
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset
    from tokenizers import Tokenizer

    big = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    big.add_tokens([f"<extra_{i}>" for i in range(UINT16_VOCAB_LIMIT)])
    (tmp_path / "big").mkdir()
    big.save(str(tmp_path / "big" / "tokenizer.json"))
    (tmp_path / "big" / "tokenizer_config.json").write_text((tokenizer / "tokenizer_config.json").read_text())
    assert DType.optimal_dtype(big.get_vocab_size()).__name__ == "int32"
    assert DType.optimal_dtype(UINT16_VOCAB_LIMIT - 1).__name__ == "uint16"  # our threshold is Megatron's
    stream = io.StringIO()
    [manifest] = prepare([str(corpus["root"] / "plain.jsonl")], tmp_path / "out", tokenizer_path=tmp_path / "big",
                         stream=stream, progress="none")  # fmt: skip
    assert (
        manifest.dtype == "int32"
        and manifest.tokenizer.vocab_size == tokenizers.describe(tokenizer).vocab_size + UINT16_VOCAB_LIMIT
    )
    assert "does not fit uint16" in stream.getvalue() and "int32" in stream.getvalue()
    assert IndexedDataset(str(tmp_path / "out" / "plain")).index.dtype.__name__ == "int32"


@pytest.mark.slow
def test_kill_9_mid_way_then_a_rerun_finishes_byte_identical_without_redoing_receipted_shards(tmp_path, tokenizer):
    # Enough text for about 40 shards of 64 KB, each taking a visible fraction of a second.
    texts = documents(7, 12000)
    source = write_jsonl(tmp_path / "big.jsonl", texts)
    command = [SCRIPT, "data", "prepare", str(source), "--tokenizer", str(tokenizer), "--shard-size", "64K"]
    reference = subprocess.run([*command, "--out", str(tmp_path / "ref"), "--workers", "1"], env=ENV,
                               capture_output=True, text=True, timeout=600)  # fmt: skip
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "out"
    process = subprocess.Popen([*command, "--out", str(out), "--workers", "2"], env=ENV, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    receipts = out / shard_plan.WORK_DIR / "receipts"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        # Finished receipts only, as counted below: one being written (a dot file) is not one yet.
        if receipts.is_dir() and len(list(receipts.glob("[!.]*.json"))) >= 3:
            break
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the whole process group: the prepare and its workers, as a crash
    process.wait()
    plan = shard_plan.read_plan(out)
    # A receipt is NAME.json; the kill may also leave one being written (write_atomic's .NAME.XXXX.tmp).
    done = {p.name: p.stat().st_mtime_ns for p in receipts.glob("[!.]*.json")}
    assert 3 <= len(done) < len(plan.shards), "the kill did not land mid-way"
    assert not list(out.glob("big*")), "nothing carries a final name before the run completes"
    # What a kill between a temporary's creation and its rename leaves (whether or not this kill landed there).
    (receipts / ".000999.json.k1ll3d.tmp").write_text("{")
    (out / shard_plan.WORK_DIR / "shards" / "000999.tmp-4242.bin").write_bytes(b"\0")

    again = subprocess.run([*command, "--out", str(out), "--workers", "2"], env=ENV, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"{len(done)} of {len(plan.shards)} shards already done" in again.stderr
    assert {n: t for n, t in ((p.name, p.stat().st_mtime_ns) for p in receipts.iterdir()) if n in done} == done
    assert _files(out) == _files(tmp_path / "ref")
    assert read_manifest(out / "big").documents == len(texts)
    work = out / shard_plan.WORK_DIR
    leftovers = [p.name for p in work.rglob("*") if ".tmp" in p.name]
    assert not leftovers, "a killed run's temporaries are removed by the run that resumes it"

    unchanged = subprocess.run([*command, "--out", str(out)], env=ENV, capture_output=True, text=True, timeout=600)
    assert unchanged.returncode == 0 and "nothing to do" in unchanged.stderr


def test_the_cli_prints_the_manifests_with_json(corpus, tokenizer, tmp_path):
    from nemo_recipes.cli.main import main

    out = tmp_path / "out"
    stdout = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        code = main(["data", "prepare", str(corpus["root"] / "plain.jsonl"), "--out", str(out), "--tokenizer",
                     str(tokenizer), "--json", "--workers", "1"])  # fmt: skip
    assert code == 0
    [data] = json.loads(stdout.getvalue())
    assert data == read_manifest(out / "plain").to_json() and data["format"] == "nemo-recipes-dataset/1"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
