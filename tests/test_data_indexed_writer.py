"""indexed_writer.py writes the bytes of Megatron-Core's IndexedDatasetBuilder (one sequence per document, and
add_index's merge of whole datasets), Megatron's IndexedDataset reads them, and a `data prepare` worker imports
neither torch nor Megatron-Core to write them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from nemo_recipes.data.indexed_writer import IndexedWriter


def _documents(seed: int, count: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 300, size=count)
    sizes[:3] = (0, 1, 0)[: len(sizes[:3])]  # empty and one-token documents, one first
    return [rng.integers(0, vocab, size=int(n)) for n in sizes]


def _megatron(prefix, documents, dtype) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.dtype(dtype).type)
    for document in documents:
        builder.add_document(document, [len(document)])
    builder.finalize(f"{prefix}.idx")


def _ours(prefix, documents, dtype, batch: int = 7) -> None:
    writer = IndexedWriter(f"{prefix}.bin", dtype)
    for start in range(0, len(documents), batch):
        part = documents[start : start + batch]
        tokens = np.concatenate(part) if part else np.zeros(0, dtype=np.int64)
        writer.add_documents(tokens, [len(d) for d in part])
    writer.finalize(f"{prefix}.idx")


def _same_files(a, b) -> None:
    for suffix in (".bin", ".idx"):
        ours, theirs = open(f"{a}{suffix}", "rb").read(), open(f"{b}{suffix}", "rb").read()
        assert ours == theirs, f"{suffix} differs ({len(ours)} bytes against Megatron's {len(theirs)})"


@pytest.mark.parametrize("dtype, vocab", [("uint16", 8192), ("int32", 128_256), ("int32", 2**31 - 1)])
def test_the_bytes_are_megatrons_and_megatron_reads_them(tmp_path, dtype, vocab):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    documents = _documents(seed=vocab, count=1000, vocab=vocab)
    _megatron(tmp_path / "megatron", documents, dtype)
    _ours(tmp_path / "ours", documents, dtype)
    _same_files(tmp_path / "ours", tmp_path / "megatron")
    dataset = IndexedDataset(str(tmp_path / "ours"))
    assert len(dataset) == len(documents) and dataset.index.dtype == np.dtype(dtype).type
    for i in (0, 1, 2, 500, len(documents) - 1):
        assert dataset[i].tolist() == documents[i].tolist()
    assert dataset.document_indices.tolist() == list(range(len(documents) + 1))


def test_no_documents_at_all_is_megatrons_empty_dataset(tmp_path):
    _megatron(tmp_path / "megatron", [], "uint16")
    _ours(tmp_path / "ours", [], "uint16")
    _same_files(tmp_path / "ours", tmp_path / "megatron")


@pytest.mark.parametrize("dtype", ["uint16", "int32"])
def test_the_merge_of_shards_is_megatrons_add_index(tmp_path, dtype):
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    shards = [_documents(seed=s, count=n, vocab=60_000) for s, n in ((1, 40), (2, 3), (3, 1), (4, 250))]
    for index, documents in enumerate(shards):
        _megatron(tmp_path / f"shard{index}", documents, dtype)
    builder = IndexedDatasetBuilder(str(tmp_path / "megatron.bin"), dtype=np.dtype(dtype).type)
    writer = IndexedWriter(tmp_path / "ours.bin", dtype)
    for index in range(len(shards)):
        builder.add_index(str(tmp_path / f"shard{index}"))
        writer.add_index(tmp_path / f"shard{index}")
    builder.finalize(str(tmp_path / "megatron.idx"))
    writer.finalize(tmp_path / "ours.idx")
    _same_files(tmp_path / "ours", tmp_path / "megatron")
    # And the merge equals writing every document in one go.
    _ours(tmp_path / "whole", [d for documents in shards for d in documents], dtype)
    _same_files(tmp_path / "ours", tmp_path / "whole")


def test_a_shard_of_another_dtype_or_wrong_lengths_is_refused(tmp_path):
    _ours(tmp_path / "small", _documents(seed=5, count=4, vocab=100), "uint16")
    writer = IndexedWriter(tmp_path / "big.bin", "int32")
    with pytest.raises(ValueError, match="uint16 tokens"):
        writer.add_index(tmp_path / "small")
    with pytest.raises(ValueError, match="add up to 4"):
        writer.add_documents(np.arange(5), [1, 3])
    writer.close()
    with pytest.raises(ValueError, match="no dtype float16"):
        IndexedWriter(tmp_path / "half.bin", "float16")


def test_data_prepare_imports_neither_torch_nor_megatron(tmp_path):
    """A whole `data prepare` (plan, id check, a shard, the merge) in a fresh interpreter, one worker (in process:
    what it imports, a forked worker inherits): the modules it loaded."""
    import json

    from nemo_recipes.data import tokenizers

    texts = [f"Document {i}: the quick brown fox jumps over the lazy dog, {i * 7} times." for i in range(200)]
    tokenizer = tokenizers.train(texts, tmp_path / "tok", vocab_size=300)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    code = (
        "import sys; from nemo_recipes.data.prepare import prepare; "
        f"prepare([{str(corpus)!r}], {str(tmp_path / 'out')!r}, tokenizer_path={str(tokenizer)!r}, workers=1, "
        "progress='none'); print(' '.join(sorted({n.split('.')[0] for n in sys.modules})))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = run.stdout.split()
    assert "numpy" in loaded and (tmp_path / "out" / "corpus.idx").is_file(), run.stderr
    assert not {"torch", "megatron", "transformers", "nemo"} & set(loaded), loaded
