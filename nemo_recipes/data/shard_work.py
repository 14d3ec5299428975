"""One shard of `data prepare`: its bytes read (compressed streams kept open between a worker's shards), its
documents tokenized in batches into its own small indexed dataset, written under a temporary name and renamed, then
its receipt; `run_shards` runs a rank's share of a plan's shards (the entry point of a multi-node prepare).
NumPy is imported inside the functions that need it; the files are Megatron's, written by indexed_writer.py (no
torch or Megatron-Core in a worker)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from nemo_recipes.data import fast_encoder, shard_plan, sources, tokenizers
from nemo_recipes.data.indexed_writer import IndexedWriter
from nemo_recipes.data.manifest import write_atomic
from nemo_recipes.data.shard_plan import Shard, ShardPlan
from nemo_recipes.data.sources import bad

# Documents are tokenized in batches of about this many characters (encode_batch amortises the call, and the
# writer writes large chunks), at most BATCH_DOCUMENTS documents.
BATCH_CHARS = 1 << 20
BATCH_DOCUMENTS = 2048


# Streams of compressed inputs kept open between the shards of one worker, so that reading shard k of a .gz file
# does not decompress shards 0..k-1 again each time: {path: (stream, offset)}.
_OPEN: dict[str, tuple[Any, int]] = {}


def _read(shard: Shard, limit: Optional[int] = None) -> bytes:
    """The shard's bytes (the first `limit`, then to the end of that line, when given)."""
    size = shard.end - shard.start if limit is None else min(limit, shard.end - shard.start)
    if shard.compression is None:
        with open(shard.path, "rb") as plain:
            stream: Any = plain
            stream.seek(shard.start)
            data = stream.read(size)
            if size < shard.end - shard.start:
                data += stream.readline()
            return data
    stream, offset = _OPEN.pop(shard.path, (None, 0))
    if stream is None or offset > shard.start:
        if stream is not None:
            stream.close()
        stream, offset = sources.open_binary(shard.file), 0
    while offset < shard.start:
        offset += len(stream.read(min(shard.start - offset, 8 << 20)))
    data = stream.read(size)
    if size < shard.end - shard.start:
        data += stream.readline()
    _OPEN[shard.path] = (stream, offset + len(data))
    return data


def shard_documents(
    shard: Shard, options: sources.ReadOptions, skipped: sources.Skipped, *, limit: Optional[int] = None
) -> Iterator[str]:
    data = _read(shard, limit)
    if shard.format == sources.DataFormat.JSONL:
        return sources.jsonl_documents(data, shard.file, shard.line, options, skipped)
    return sources.text_documents(data, shard.file, shard.line, options, skipped, at_start=shard.start == 0)


def _batches(documents: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = 0
    for text in documents:
        batch.append(text)
        chars += len(text)
        if chars >= BATCH_CHARS or len(batch) >= BATCH_DOCUMENTS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


Report = Callable[[int, int, int], None]


def _encoded(encoder: tokenizers.Encoder, batch: list[str], eod: int, dtype: Any) -> tuple[Any, Any]:
    """The batch's ids with the end-of-document id after each document, as one array of `dtype`, and each
    document's length (its end-of-document id included)."""
    import numpy as np

    encode_flat = getattr(encoder, "encode_flat", None)
    if encode_flat is not None:  # gigatoken: one flat array and offsets, no Python list per document
        ids, offsets = encode_flat(batch)
        tokens = np.insert(ids, offsets[1:], eod).astype(dtype, copy=False)
        return tokens, np.diff(offsets) + 1
    encoded = encoder.encode_batch(batch)
    for ids in encoded:
        ids.append(eod)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int64, count=int(lengths.sum()))
    return flat.astype(dtype), lengths


def _utf8_size(text: str) -> int:
    # An ASCII str knows it is one (str.isascii reads a flag): its size needs no encoded copy.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def process_shard(plan: ShardPlan, shard: Shard, encoder: tokenizers.Encoder, report: Report) -> dict:
    """Tokenize one shard into its own indexed dataset (temporary names, then renamed) and write its receipt."""
    import numpy as np

    dtype = np.dtype(plan.dtype)
    eod = encoder.eod_id
    final = plan.shard_prefix(shard.index)
    temporary = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    for directory in (final.parent, plan.receipt_path(shard.index).parent):
        directory.mkdir(parents=True, exist_ok=True)
    skipped = sources.Skipped()
    counts = {"documents": 0, "tokens": 0, "text_bytes": 0, "max_token_id": 0}
    documents = shard_documents(shard, plan.read_options(), skipped)
    reported = 0
    writer = None
    try:
        writer = IndexedWriter(f"{temporary}.bin", dtype)
        for batch in _batches(documents):
            tokens, lengths = _encoded(encoder, batch, eod, dtype)
            writer.add_documents(tokens, lengths)
            text_bytes = sum(_utf8_size(text) for text in batch)
            counts["documents"] += len(batch)
            counts["tokens"] += len(tokens)
            counts["text_bytes"] += text_bytes
            counts["max_token_id"] = max(counts["max_token_id"], int(tokens.max()))
            # Progress in input bytes: the text's as it goes, the shard's exact size once it is done.
            step = min(text_bytes, shard.end - shard.start - reported)
            reported += step
            report(len(batch), step, len(tokens))
        writer.finalize(f"{temporary}.idx")
        for suffix in (".bin", ".idx"):
            with open(f"{temporary}{suffix}", "rb+") as stream:
                os.fsync(stream.fileno())
        os.replace(f"{temporary}.bin", f"{final}.bin")
        os.replace(f"{temporary}.idx", f"{final}.idx")
    except BaseException:
        if writer is not None:
            writer.close()
        for suffix in (".bin", ".idx"):
            Path(f"{temporary}{suffix}").unlink(missing_ok=True)
        raise
    report(0, shard.end - shard.start - reported, 0)
    receipt = {
        "plan": plan.id,
        "shard": shard.index,
        **counts,
        "skipped": skipped.count,
        "skipped_examples": skipped.examples,
        "bin_bytes": Path(f"{final}.bin").stat().st_size,
    }
    write_atomic(plan.receipt_path(shard.index), json.dumps(receipt).encode())
    return receipt


def pending(plan: ShardPlan) -> list[int]:
    """Shards without a valid receipt (or whose files are gone)."""
    result = []
    for shard in plan.shards:
        receipt = shard_plan.read_receipt(plan, shard.index)
        if receipt is None or not shard_plan.shard_files_present(plan, shard.index, receipt):
            result.append(shard.index)
    return result


@contextlib.contextmanager
def one_thread_per_worker() -> Iterator[None]:
    # The worker processes are the parallelism: each tokenizes on one core, so --workers N uses N cores (and a
    # process forked after the tokenizer's thread pool started does not warn about it).
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous


def run_shards(plan_path: str | Path, rank: int = 0, world: int = 1, *, report: Optional[Report] = None) -> int:
    """Process the shards `i % world == rank` of the plan that have no receipt yet, one after the other; return
    how many were processed. Idempotent: run again, it skips what is receipted."""
    plan = shard_plan.read_plan(plan_path)
    if plan is None:
        raise bad("plan", str(plan_path), "no shard plan there.", "run `nemo-recipes data prepare` to write one.")
    todo = [i for i in pending(plan) if i % world == rank]
    if not todo:
        return 0
    encoder = fast_encoder.load(plan.tokenizer.path, plan.encoder)
    with one_thread_per_worker():
        for index in todo:
            process_shard(plan, plan.shards[index], encoder, report or (lambda *_: None))
    return len(todo)
