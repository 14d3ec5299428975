"""The frozen shard plan of a `data prepare` run, and the receipts of finished shards.

A shard is a byte range of one input file's (decompressed) content that starts at a document's first line: a line
of a JSON Lines file, a paragraph of a text file. Documents never straddle shards, so the output, the shards'
documents concatenated in plan order, is the same whatever the shard size, the number of workers or ranks, or the
order shards finish in. The plan is written once (`DIR/.nemo-recipes-work/plan.json`); a run with the same inputs
and arguments reuses it and every shard whose receipt is there.

The standard library, and NumPy to count a plain file's lines (imported by the function that counts).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.data.manifest import TokenizerInfo, write_atomic
from nemo_recipes.data.sources import Compression, DataFormat, InputFile, ReadOptions, damaged, open_binary

WORK_DIR = ".nemo-recipes-work"
PLAN_FORMAT = "nemo-recipes-shard-plan/1"
#: Shards are at most this large: a receipt is at most this much work lost to a crash.
MAX_SHARD_BYTES = 64 << 20
#: ... and at least this large, unless asked otherwise: smaller shards cost more in per-shard files than they gain.
MIN_SHARD_BYTES = 1 << 20
#: Target shards per worker, so that workers finish together although shards differ in speed.
SHARDS_PER_WORKER = 8
# A line longer than this is read in pieces when planning, so that one gigantic line does not fill the memory.
_READ_LIMIT = 16 << 20
#: Blocks of a plain file read at once to count its lines, and to find a line's end near a cut.
_BLOCK = 8 << 20
_FIND_BLOCK = 64 << 10
#: What bytes.strip() keeps: a line with one of these is not blank.
_NOT_WHITESPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")


@dataclass(frozen=True)
class Shard:
    index: int
    source: str  # the source's name
    path: str
    format: DataFormat
    compression: Optional[Compression]
    start: int  # byte offsets in the decompressed content
    end: int
    line: int  # 1-based number of the line at `start`

    @property
    def file(self) -> InputFile:
        return InputFile(self.path, self.format, self.compression)


def _shard(data: dict[str, Any]) -> Shard:
    """A shard as the plan's JSON holds it, its format and compression read back as the enums they were."""
    compression = data["compression"]
    return Shard(
        **{
            **data,
            "format": DataFormat(data["format"]),
            "compression": None if compression is None else Compression(compression),
        }
    )


@dataclass(frozen=True)
class ShardPlan:
    id: str  # sha256 over the inputs' hashes, the arguments and the tokenizer: what decides the output
    out: str
    dtype: str
    tokenizer: TokenizerInfo
    arguments: dict
    sources: tuple[dict, ...]  # {"name", "inputs": [{"path", "bytes", "sha256"}]}
    shards: tuple[Shard, ...]
    # The encoder `data prepare` chose for the tokenizer (fast_encoder.choose): "tiktoken" or the tokenizer's kind.
    # Not part of `id`: every encoder it may choose gives the same ids.
    encoder: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["format"] = PLAN_FORMAT
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ShardPlan":
        if data.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a shard plan of format {PLAN_FORMAT}")
        return cls(
            id=data["id"],
            out=data["out"],
            dtype=data["dtype"],
            tokenizer=TokenizerInfo(**data["tokenizer"]),
            arguments=data["arguments"],
            sources=tuple(data["sources"]),
            shards=tuple(_shard(s) for s in data["shards"]),
            encoder=data.get("encoder") or data["tokenizer"]["kind"],
        )

    @property
    def work(self) -> Path:
        return Path(self.out) / WORK_DIR

    def shard_prefix(self, index: int) -> Path:
        return self.work / "shards" / f"{index:06d}"

    def receipt_path(self, index: int) -> Path:
        return self.work / "receipts" / f"{index:06d}.json"

    def read_options(self) -> ReadOptions:
        return ReadOptions(
            key=self.arguments["key"],
            max_document_chars=self.arguments["max_document_chars"],
            skip_bad_lines=self.arguments["skip_bad_lines"],
        )


class Stopped(Exception):
    """A digest given up because its caller stopped (an error elsewhere, Ctrl-C)."""


def file_digest(path: str, stop: Optional[threading.Event] = None) -> dict[str, Any]:
    """{"path", "bytes", "sha256"} of an input file (its bytes as stored, compressed or not); given up between two
    blocks once `stop` is set. One buffer is read into again and again: a new 8 MB block per read, on a thread of
    its own, left the freed blocks in that thread's malloc arena (peak RSS grew with the corpus: +40 MB at 200 MB)."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(8 << 20)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as stream:
        while read := stream.readinto(buffer):
            if stop is not None and stop.is_set():
                raise Stopped(path)
            digest.update(view[:read])
            size += read
    return {"path": path, "bytes": size, "sha256": digest.hexdigest()}


def plan_id(inputs: list[dict], arguments: dict, tokenizer_fingerprint: str) -> str:
    identity = {"inputs": inputs, "arguments": arguments, "tokenizer": tokenizer_fingerprint}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def split_file(file: InputFile, shard_bytes: int) -> tuple[list[tuple[int, int, int]], int, bool]:
    """(start, end, first line) ranges of about `shard_bytes` each, cut at document starts; the content's size;
    whether it holds any non-blank line. A compressed file that cannot be decompressed is refused here, before
    any shard, with its name (sources.damaged)."""
    try:
        return _split(file, shard_bytes)
    except Exception as error:
        answer = damaged(file, error)
        if answer is None:
            raise
        raise answer from None


def _split(file: InputFile, shard_bytes: int) -> tuple[list[tuple[int, int, int]], int, bool]:
    if file.compression is None:
        with open(file.path, "rb", buffering=0) as stream:
            return _split_plain(_Positional(stream.fileno()), file.format == DataFormat.JSONL, shard_bytes)
    return _split_read(file, shard_bytes)


class _Positional:
    """A plain file read where asked (pread), without the GIL-held copy of every line that reading it line by line
    costs: a fifth of the plan's time on one core. Read, not mapped: a file cut short under a mapping kills the
    process (SIGBUS)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.size = os.fstat(fd).st_size
        # No larger than the file: an input of thousands of small files zeroed 8 MB for each of them.
        self._buffer = bytearray(max(1, min(_BLOCK, self.size)))
        self._newlines: Any = None  # scan's array of "is a newline", one per byte of the buffer

    def read(self, start: int, end: int) -> bytes:
        return os.pread(self.fd, max(0, end - start), start)

    def line_end(self, at: int) -> int:
        """The end of the line at `at` (after its newline, or the file's end)."""
        while at < self.size:
            block = self.read(at, at + _FIND_BLOCK)
            if not block:
                break
            newline = block.find(b"\n")
            if newline >= 0:
                return at + newline + 1
            at += len(block)
        return self.size

    def line_start(self, at: int) -> int:
        """The start of the line that ends at `at` (`at` just after its newline)."""
        end = at - 1
        while end > 0:
            begin = max(0, end - _FIND_BLOCK)
            newline = self.read(begin, end).rfind(b"\n")
            if newline >= 0:
                return begin + newline + 1
            end = begin
        return 0

    def blank(self, start: int, end: int) -> bool:
        """Whether the line [start, end) is blank as _split_read sees it: whitespace ending in a newline, read in one
        piece."""
        if end - start > _READ_LIMIT:
            return False
        line = self.read(start, end)
        return line.endswith(b"\n") and not line.strip()

    def scan(self, start: int, end: int) -> tuple[int, bool]:
        """The newlines in [start, end), and whether a byte there is not whitespace."""
        import numpy

        view = memoryview(self._buffer)
        if self._newlines is None:
            self._newlines = numpy.empty(len(view), dtype=bool)
        newlines, text = 0, False
        while start < end:
            read = os.preadv(self.fd, [view[: min(len(view), end - start)]], start)
            if not read:
                break
            # NumPy's comparison runs without the GIL, and with the count takes about a quarter of the time of
            # bytearray.count (0.09 against 0.33 CPU-s per GB here), which holds it: the cut runs beside the check.
            found = self._newlines[:read]
            numpy.equal(numpy.frombuffer(self._buffer, numpy.uint8, read), 10, out=found)
            newlines += int(numpy.count_nonzero(found))
            text = text or _NOT_WHITESPACE.search(self._buffer, 0, read) is not None
            start += read
        return newlines, text


def _split_plain(file: _Positional, jsonl: bool, shard_bytes: int) -> tuple[list[tuple[int, int, int]], int, bool]:
    """_split_read's ranges for an uncompressed file: the lines are walked only near each cut, and counted in blocks
    between."""
    ranges: list[tuple[int, int, int]] = []
    size = file.size
    start, start_line, any_text = 0, 1, False
    while (at := start + shard_bytes) < size:
        if file.read(at - 1, at) != b"\n":  # inside a line: the next line's start
            at = file.line_end(at)
        cut = None
        while at < size:
            end = file.line_end(at)
            # JSON Lines: any line starts a document; text: a line after a blank one (a paragraph's first).
            if not file.blank(at, end) and (jsonl or file.blank(file.line_start(at), at)):
                cut = at
                break
            at = end
        if cut is None:
            break
        newlines, text = file.scan(start, cut)
        ranges.append((start, cut, start_line))
        start, start_line, any_text = cut, start_line + newlines, any_text or text
    _, text = file.scan(start, size)
    if size > start or not ranges:
        ranges.append((start, size, start_line))
    return ranges, size, any_text or text


def _split_read(file: InputFile, shard_bytes: int) -> tuple[list[tuple[int, int, int]], int, bool]:
    ranges: list[tuple[int, int, int]] = []
    start, start_line = 0, 1
    offset, line, any_text = 0, 1, False
    at_line_start, previous_blank = True, True
    with open_binary(file) as stream:
        while piece := stream.readline(_READ_LIMIT):
            blank = at_line_start and not piece.strip() and piece.endswith(b"\n")
            # A cut goes before a line that starts a document: any line of JSON Lines, a paragraph's first line.
            if at_line_start and offset - start >= shard_bytes and not blank:
                if file.format == DataFormat.JSONL or previous_blank:
                    ranges.append((start, offset, start_line))
                    start, start_line = offset, line
            if at_line_start:
                previous_blank = blank
            any_text = any_text or not blank and bool(piece.strip())
            offset += len(piece)
            at_line_start = piece.endswith(b"\n")
            line += at_line_start
    if offset > start or not ranges:
        ranges.append((start, offset, start_line))
    return ranges, offset, any_text


def shard_size(total_bytes: int, workers: int) -> int:
    """Bytes per shard: enough shards to keep every worker busy to the end, none beyond MAX_SHARD_BYTES."""
    target = total_bytes // max(1, workers * SHARDS_PER_WORKER)
    return max(MIN_SHARD_BYTES, min(MAX_SHARD_BYTES, target))


def write_plan(plan: ShardPlan) -> Path:
    return write_atomic(plan.work / "plan.json", (json.dumps(plan.to_json(), indent=1) + "\n").encode())


def read_plan(path: str | Path) -> Optional[ShardPlan]:
    """The plan at `path` (a plan.json or the output directory), or None when there is none readable."""
    path = Path(path)
    if path.is_dir():
        path = path / WORK_DIR / "plan.json" if (path / WORK_DIR).is_dir() else path / "plan.json"
    try:
        return ShardPlan.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_fresh(work: Path) -> None:
    """Empty the work directory of another plan (its shards and receipts belong to other inputs or arguments); the
    trained tokenizer's record stays."""
    for sub in ("shards", "receipts", "merge"):
        shutil.rmtree(work / sub, ignore_errors=True)
    (work / "plan.json").unlink(missing_ok=True)
    for sub in ("shards", "receipts"):
        (work / sub).mkdir(parents=True, exist_ok=True)


def remove_leftovers(plan: ShardPlan) -> int:
    """Delete the temporaries a killed run left (a shard's `.tmp-PID` files, a receipt's `.NAME.XXXX.tmp`): nothing
    reads them, and a re-run would otherwise keep them for ever. Only before the shards run (no writer is alive);
    the count removed."""
    removed = 0
    for sub in ("shards", "receipts"):
        folder = plan.work / sub
        for path in folder.iterdir() if folder.is_dir() else ():
            if ".tmp" in path.name and path.is_file():
                path.unlink(missing_ok=True)
                removed += 1
    return removed


def read_receipt(plan: ShardPlan, index: int) -> Optional[dict]:
    """The receipt of shard `index`, when the shard is finished for this plan and its files are still there."""
    try:
        receipt = json.loads(plan.receipt_path(index).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if receipt.get("plan") != plan.id:
        return None
    return receipt


def shard_files_present(plan: ShardPlan, index: int, receipt: dict) -> bool:
    prefix = plan.shard_prefix(index)
    bin_, idx = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    return bin_.is_file() and idx.is_file() and bin_.stat().st_size == receipt["bin_bytes"]
