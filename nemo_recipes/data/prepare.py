"""`data prepare`: input files -> one Megatron indexed dataset per source, with its manifest.

make_plan (resolve the inputs, hash them, find or train the tokenizer, cut the shards: plan.json) -> run_shards
(each shard tokenized into its own small indexed dataset, then a receipt) -> finalize (the shards of each source
merged in plan order, renamed into place, then the manifest; the files are Megatron's, written by indexed_writer.py
without Megatron-Core). Every file is written under a temporary name and renamed when complete; the manifest comes
last, so a prefix with a manifest is complete. NumPy and the tokenizer libraries are imported inside the functions
that need them.
Here: the plan and the tokenizer's training, and `prepare` itself; one shard and `run_shards` are in shard_work.py,
the local pool of workers in pool.py, the merge in merge.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TextIO

from nemo_recipes.data import check_sample, fast_encoder, process_memory, shard_plan, sources, tokenizers
from nemo_recipes.data.manifest import (
    MANIFEST_SUFFIX,
    Manifest,
    write_atomic,
)
from nemo_recipes.data.merge import Merging, finalize, up_to_date
from nemo_recipes.data.pool import run_local
from nemo_recipes.data.progress import Progress
from nemo_recipes.data.shard_plan import Shard, ShardPlan
from nemo_recipes.data.shard_work import (  # noqa: F401  (run_shards: the entry point data_executor names here)
    one_thread_per_worker,
    pending,
    run_shards,
)
from nemo_recipes.data.sources import InvalidDataError, bad
from nemo_recipes.errors import NO_ROOM_ERRNOS, InvalidInputError, Problem
from nemo_recipes.user_paths import exclusive, output_problems

#: Megatron-Core's DType.optimal_dtype: uint16 below this many vocabulary entries, else int32 (checked in tests).
UINT16_VOCAB_LIMIT = 65500
#: Default length guard: 10 million characters (about 10 MB, 2-3 million tokens) is far beyond any book, and far
#: below what makes a worker run out of memory; a document that long is nearly always a mistake (a whole dump in one
#: record, a file without paragraph breaks).
DEFAULT_MAX_DOCUMENT_CHARS = 10_000_000
#: Text sampled from the inputs to train a tokenizer: enough for a stable 32K BPE vocabulary, trained in minutes.
DEFAULT_TOKENIZER_SAMPLE_BYTES = 100_000_000
#: The tokenizer's sample is the first documents of every window of this many bytes of the inputs.
SAMPLE_WINDOW = 4 << 20

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Options:
    key: str = "text"
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    skip_bad_lines: bool = False
    tokenizer_path: Optional[str] = None
    train_tokenizer: bool = False
    vocab_size: Optional[int] = None
    tokenizer_kind: str = tokenizers.HUGGINGFACE
    tokenizer_sample_bytes: int = DEFAULT_TOKENIZER_SAMPLE_BYTES

    def arguments(self) -> dict[str, Any]:
        """What decides the output (recorded in the manifest and the plan's identity)."""
        data: dict[str, Any] = {
            "key": self.key,
            "max_document_chars": self.max_document_chars,
            "skip_bad_lines": self.skip_bad_lines,
        }
        if self.train_tokenizer:
            data["train_tokenizer"] = {
                "kind": self.tokenizer_kind,
                "vocab_size": tokenizers.DEFAULT_VOCAB_SIZE if self.vocab_size is None else self.vocab_size,
                "sample_bytes": self.tokenizer_sample_bytes,
            }
        else:
            data["tokenizer_path"] = str(Path(str(self.tokenizer_path)).absolute())
        return data

    def read_options(self) -> sources.ReadOptions:
        return sources.ReadOptions(self.key, self.max_document_chars, self.skip_bad_lines)

    def check(self) -> None:
        problems = []
        if self.train_tokenizer == (self.tokenizer_path is not None):
            problems.append(
                Problem(
                    "tokenizer_path",
                    self.tokenizer_path,
                    "give a tokenizer or ask for one to be trained (one of the two).",
                    "pass --tokenizer PATH (a local Hugging Face directory, tokenizer.json or SentencePiece .model) "
                    "or --train-tokenizer.",
                )
            )
        if self.vocab_size is not None and not self.train_tokenizer:
            problems.append(
                Problem(
                    "vocab_size",
                    self.vocab_size,
                    "only a trained tokenizer takes a vocabulary size.",
                    "drop --vocab-size, or use --train-tokenizer.",
                )  # fmt: skip
            )
        low, high = tokenizers.MIN_VOCAB_SIZE, tokenizers.MAX_VOCAB_SIZE
        if self.train_tokenizer and self.vocab_size is not None and not low <= self.vocab_size <= high:
            problems.append(
                Problem(
                    "vocab_size",
                    self.vocab_size,
                    f"a trained vocabulary holds {low:,} to {high:,} entries.",
                    f"give e.g. --vocab-size {tokenizers.DEFAULT_VOCAB_SIZE}, or leave it out for that default.",
                )
            )
        for name in ("max_document_chars", "tokenizer_sample_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(Problem(name, value, "must be a positive whole number.", "give e.g. 10000000."))
        if not self.key or any(not part for part in self.key.split(".")):
            problems.append(
                Problem("key", self.key, "not a field name or dotted path.", "give e.g. text or meta.text.")
            )
        if problems:
            raise InvalidDataError(problems, context="data prepare")


# ---- the plan ----


def _writable(out: Path) -> None:
    """Create `out` and prove a file can be written and renamed there, before any work."""
    fix = "choose an --out directory you can write to (on a disk with room for the tokens)."
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as error:
        raise bad("out", str(out), f"the output directory cannot be written: {error.strerror or error}.", fix) from None


def _ours(path: Path, out: Path) -> bool:
    """A file this command writes in `out`: its work directory (plan, receipts), a manifest, a trained tokenizer."""
    if not path.is_relative_to(out):
        return False
    inside = path.relative_to(out).parts
    return inside[0] in (shard_plan.WORK_DIR, "tokenizer", "tokenizer.model") or (
        len(inside) == 1 and path.name.endswith(MANIFEST_SUFFIX)
    )


def _prepared_dir(path: Path) -> Optional[Path]:
    """The output directory of an earlier `data prepare` (one that holds a manifest or a work directory) of which
    `path` is one of the files it wrote, or None."""
    for directory in path.parents:
        if _ours(path, directory) and (
            (directory / shard_plan.WORK_DIR).is_dir() or any(directory.glob(f"*{MANIFEST_SUFFIX}"))
        ):
            return directory
    return None


def _without_outputs(srcs: list[sources.Source], out: Path, log: Log) -> list[sources.Source]:
    """The sources less what a prepare wrote: this one's in `out` (an --out inside an input directory: read as
    input, the plan, receipts and manifests change the plan at every run, which then never ends), and another's
    among the inputs (its manifests and trained tokenizer are JSON, not text to train on)."""
    result = []
    problems = []
    for source in srcs:
        files = []
        left: dict[Path, int] = {}
        for file in source.files:
            path = Path(file.path)
            written = out if _ours(path, out) else _prepared_dir(path)
            if written is None:
                files.append(file)
            else:
                left[written] = left.get(written, 0) + 1
        for directory, count in left.items():
            whose = "" if directory == out else " (another prepare's output: its manifests and tokenizer)"
            log(f"note: {source.argument}: {count} file(s) that data prepare wrote in {directory} left out{whose}")
        if not files:
            places = ", ".join(str(d) for d in left)
            problems.append(
                Problem(
                    "inputs",
                    source.argument,
                    f"holds only what data prepare wrote in {places}.",
                    "give the input files, or an --out outside the inputs.",
                )
            )
        result.append(dataclasses.replace(source, files=tuple(files)))
    if problems:
        raise InvalidDataError(problems, context="data prepare")
    return result


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One prepare at a time per --out: a second one would tokenize everything again and fail at its merge."""
    work = out / shard_plan.WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    refusal = functools.partial(
        bad,
        "out",
        str(out),
        "another `data prepare` is writing there now.",
        "wait for it to finish (then run again: it resumes or finds nothing to do), or choose another --out.",
    )
    with exclusive(work / "lock", refusal):
        yield


def _sizes(srcs: list[sources.Source]) -> list[tuple[str, int]]:
    """(path, bytes as stored) of every input file, in plan order; an empty one is refused (all of them at once)."""
    sizes = [(file.path, os.stat(file.path).st_size) for source in srcs for file in source.files]
    problems = [
        Problem("inputs", path, "the file is empty.", "remove it from the inputs.") for path, size in sizes if not size
    ]
    if problems:
        raise InvalidDataError(problems, context="data prepare")
    return sizes


class _Hashing:
    """The inputs' sha256 computed on threads (hashlib and file reads release the GIL: the files hash on other cores
    while this thread cuts the shards and checks the encoder, and many files hash side by side); `result()` gives
    each source's {"name", "inputs"} in input order."""

    def __init__(self, srcs: list[sources.Source], threads: int):
        from concurrent.futures import ThreadPoolExecutor

        self._names = [source.name for source in srcs]
        paths = [[file.path for file in source.files] for source in srcs]
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max(1, min(threads, sum(map(len, paths)))), thread_name_prefix="hash")
        self._futures = [
            [self._pool.submit(shard_plan.file_digest, path, self._stop) for path in files] for files in paths
        ]

    def result(self) -> list[dict]:
        try:
            return [
                {"name": name, "inputs": [future.result() for future in futures]}
                for name, futures in zip(self._names, self._futures, strict=True)
            ]
        finally:
            self.stop()

    def stop(self) -> None:
        """No more hashing: a file being read is given up at its next block (within milliseconds)."""
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


def _cut(srcs: list[sources.Source], size: int) -> list[Shard]:
    """The shards of every file, in plan order; a file with no document in it is refused."""
    problems = []
    cuts = []
    for source in srcs:
        for file in source.files:
            ranges, _total, any_text = shard_plan.split_file(file, size)
            if not any_text:
                problems.append(
                    Problem(
                        "inputs", file.path, "the file holds no text (only blank lines).", "remove it from the inputs."
                    )
                )
            cuts += [(source.name, file, r) for r in ranges]
    if problems:
        raise InvalidDataError(problems, context="data prepare")
    return [
        Shard(i, name, file.path, file.format, file.compression, start, end, line)
        for i, (name, file, (start, end, line)) in enumerate(cuts)
    ]


def _cut_and_check(
    srcs: list[sources.Source],
    sizes: list[tuple[str, int]],
    size: int,
    options: Options,
    tokenizer_path: Path,
    cores: int,
) -> tuple[tuple[Shard, ...], fast_encoder.Choice]:
    """The shards, and the encoder chosen before the first of them: the faster one only where it gives the same ids
    on these inputs, the reference encoding on a thread per core (the library's own thread pool stays off: the
    workers fork after). Plain inputs are cut while the reference encodes the sample (check_sample.py)."""
    read = options.read_options()
    files = [file for source in srcs for file in source.files]
    if any(file.compression is not None for file in files):
        shards = tuple(_cut(srcs, size))
        with one_thread_per_worker():
            return shards, fast_encoder.choose(tokenizer_path, check_sample.from_shards(shards, read), threads=cores)
    cut: list[Shard] = []
    sample = check_sample.at_points([(file, stored) for file, (_, stored) in zip(files, sizes, strict=True)], read)
    with one_thread_per_worker():
        choice = fast_encoder.choose(
            tokenizer_path, sample, threads=cores, meanwhile=lambda: cut.extend(_cut(srcs, size))
        )
    return tuple(cut), choice


def _train(srcs: list[sources.Source], described: list[dict], out: Path, options: Options, log: Log) -> Path:
    """The trained tokenizer in `out`: reused when trained before on the same inputs and arguments, else trained
    on the first documents of every SAMPLE_WINDOW of the inputs, up to the sample size (windows of a fixed size, so
    that the tokenizer, like the data, does not depend on the number of workers)."""
    work = out / shard_plan.WORK_DIR
    receipt = work / "tokenizer.json"
    identity = shard_plan.plan_id(described, options.arguments(), "trained")
    with contextlib.suppress(OSError, ValueError, KeyError, InvalidInputError):
        recorded = json.loads(receipt.read_text())
        if recorded["identity"] == identity and tokenizers.fingerprint(recorded["path"]) == recorded["fingerprint"]:
            log(f"tokenizer: reusing {recorded['path']} (trained before on the same inputs)")
            return Path(recorded["path"])
    trained = out / ("tokenizer.model" if options.tokenizer_kind == tokenizers.SENTENCEPIECE else "tokenizer")
    if trained.exists():
        # Other prefixes in `out` may have been written with it: replacing it would silently change their meaning.
        raise bad(
            "out",
            str(out),
            f"{trained} exists and was not trained on these inputs and arguments; datasets in {out} may use it.",
            f"tokenize with it (--tokenizer {trained} instead of --train-tokenizer), choose another --out, or "
            f"delete {trained} to train a new one.",
        )
    shards = _cut(srcs, SAMPLE_WINDOW)
    per_shard = max(options.tokenizer_sample_bytes // len(shards), 1 << 16)
    read = options.read_options()
    sample = (text for shard in shards for text in check_sample.first_documents(shard, read, per_shard))
    vocab = tokenizers.DEFAULT_VOCAB_SIZE if options.vocab_size is None else options.vocab_size
    log(f"tokenizer: training a {options.tokenizer_kind} BPE of {vocab:,} entries on a sample of the inputs")
    path = tokenizers.train(sample, out, vocab_size=vocab, kind=options.tokenizer_kind)
    got = tokenizers.load(path).vocab_size
    if got < vocab:
        log(f"note: vocab_size={vocab:,}: the sample gave {got:,} entries (no more pairs to merge); it is used as is.")
    work.mkdir(parents=True, exist_ok=True)
    record = {"identity": identity, "path": str(path.absolute()), "fingerprint": tokenizers.fingerprint(path)}
    write_atomic(receipt, json.dumps(record).encode())
    return path


def make_plan(
    inputs: list[str],
    out: str | Path,
    options: Options,
    *,
    workers: int = 1,
    shard_bytes: Optional[int] = None,
    log: Log = _stderr,
) -> ShardPlan:
    """Resolve and check the inputs, find or train the tokenizer, and return the plan: the one in
    `out/.nemo-recipes-work/plan.json` when inputs and arguments are unchanged, else a new one written there."""
    options.check()
    if shard_bytes is not None and shard_bytes < 1:
        raise bad("shard_size", shard_bytes, "must be a positive size.", "give e.g. --shard-size 64M, or leave it out.")
    srcs = sources.resolve(list(inputs))
    out = Path(out).absolute()
    _writable(out)
    srcs = _without_outputs(srcs, out, log)
    sizes = _sizes(srcs)
    # The shard size follows the inputs' stored size (compressed files get larger shards; that is all).
    size = shard_bytes or shard_plan.shard_size(sum(b for _, b in sizes), workers)
    cores = min(workers, len(os.sched_getaffinity(0)))
    hashing = _Hashing(srcs, cores)
    try:
        existing = shard_plan.read_plan(out)
        # A plan of these very files (paths and sizes) may be reused: it is compared by the inputs' hashes before any
        # other work. Otherwise no plan can be reused, and the files hash while the shards are cut and checked.
        may_resume = (
            existing is not None
            and existing.out == str(out)
            and [(i["path"], i["bytes"]) for s in existing.sources for i in s["inputs"]] == sizes
        )
        described = hashing.result() if options.train_tokenizer or may_resume else None
        if options.train_tokenizer:
            tokenizer_path = _train(srcs, described or [], out, options, log)
        else:
            tokenizer_path = Path(str(options.tokenizer_path))
        info = tokenizers.describe(tokenizer_path)
        arguments = options.arguments()
        if described is not None:
            identity = shard_plan.plan_id(described, arguments, info.fingerprint)
            if existing is not None and existing.id == identity and existing.out == str(out):
                return existing
        dtype = "uint16" if info.vocab_size < UINT16_VOCAB_LIMIT else "int32"
        if dtype == "int32":
            log(
                f"note: tokenizer_path={info.path}: its vocabulary of {info.vocab_size:,} entries does not fit "
                f"uint16 (< {UINT16_VOCAB_LIMIT:,}): tokens are stored as int32, 4 bytes each, twice the disk of "
                "uint16."
            )
        shards, choice = _cut_and_check(srcs, sizes, size, options, tokenizer_path, cores)
        log(f"tokenizer: {choice.why}")
        if described is None:
            described = hashing.result()
            identity = shard_plan.plan_id(described, arguments, info.fingerprint)
    finally:
        hashing.stop()
    plan = ShardPlan(
        id=identity,
        out=str(out),
        dtype=dtype,
        tokenizer=info,
        arguments=arguments,
        sources=tuple(described),
        shards=shards,
        encoder=choice.encoder,
    )
    if up_to_date(plan) is None:  # outputs written by this plan before (then another ran here) need no new one
        shard_plan.start_fresh(plan.work)
        shard_plan.write_plan(plan)
    return plan


# ---- all of it ----


def _import_libraries(encoder: str) -> None:
    """NumPy, the index writer's one library, and awkward, the array library gigatoken's flat encoding returns,
    imported once before the workers fork (they inherit them; awkward alone took 0.18 s in every worker).
    Megatron-Core's own writer is not used: its module imports torch, seconds in every process."""
    import numpy  # noqa: F401

    if encoder == fast_encoder.GIGATOKEN:
        import awkward  # noqa: F401


def _disk_full(error: OSError, out: Path) -> InvalidDataError:
    return bad(
        "out",
        str(out),
        f"the disk is full ({error.strerror or error}); nothing unfinished carries a final name.",
        "free space or choose an --out on a larger disk (the tokens need about 2 bytes each, twice when merging), "
        "then run again: finished shards are kept.",
    )


def prepare(
    inputs: list[str],
    out: str | Path,
    *,
    tokenizer_path: Optional[str | Path] = None,
    train_tokenizer: bool = False,
    vocab_size: Optional[int] = None,
    tokenizer_kind: str = tokenizers.HUGGINGFACE,
    tokenizer_sample_bytes: int = DEFAULT_TOKENIZER_SAMPLE_BYTES,
    key: str = "text",
    workers: Optional[int] = None,
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    skip_bad_lines: bool = False,
    shard_bytes: Optional[int] = None,
    progress: str = "auto",
    stream: Optional[TextIO] = None,
    shard_runner: Optional[Callable[[Path], None]] = None,
) -> list[Manifest]:
    """Prepare `inputs` into `out` (the Python API of `nemo-recipes data prepare`): one indexed dataset and manifest
    per source; resumes from receipts; does nothing when the outputs are up to date. Messages go to `stream`
    (stderr), `progress` is "auto" (a bar on a terminal, lines otherwise), "bar", "lines" or "none".
    `shard_runner`, when given, runs the pending shards instead of the local pool: it is called with the plan's path
    and returns once every shard has its receipt, or raises (the ranks of a NeMo-Run job on several nodes that
    share `out`: `nemo-recipes data prepare --executor`); `workers` then only sizes the shards."""
    err = stream or sys.stderr

    def log(message: str) -> None:
        print(message, file=err, flush=True)

    options = Options(
        key=key,
        max_document_chars=max_document_chars,
        skip_bad_lines=skip_bad_lines,
        tokenizer_path=None if tokenizer_path is None else str(tokenizer_path),
        train_tokenizer=train_tokenizer,
        vocab_size=vocab_size,
        tokenizer_kind=tokenizer_kind,
        tokenizer_sample_bytes=tokenizer_sample_bytes,
    )
    cores = len(os.sched_getaffinity(0))
    if workers is not None and workers > cores and shard_runner is None:
        # A process per worker beyond the cores only adds memory and switching; the pool is also cut to the shards.
        log(f"note: --workers {workers:,}: {cores} core(s) here; {cores} worker(s) used.")
        workers = cores
    workers = max(1, workers or cores)
    out = Path(out).absolute()
    # The arguments and inputs are checked before the lock creates `out`: a refused command leaves nothing behind.
    options.check()
    sources.resolve(list(inputs))
    # Only the kind of --out: prepare adds its own named files there and removes nothing else, and an --out inside
    # an input directory is supported (its outputs are never read back as inputs: `_without_outputs`).
    wrong = output_problems(out, [], "out", directory=True)
    if wrong:
        raise InvalidDataError(wrong, context="data prepare")
    _writable(out)
    try:
        with _locked(out):
            return _prepare_locked(inputs, out, options, workers, shard_bytes, progress, err, log, shard_runner)
    except OSError as error:
        if error.errno in NO_ROOM_ERRNOS:
            raise _disk_full(error, out) from None
        raise


def _prepare_locked(
    inputs: list[str],
    out: Path,
    options: Options,
    workers: int,
    shard_bytes: Optional[int],
    progress: str,
    err: TextIO,
    log: Log,
    shard_runner: Optional[Callable[[Path], None]],
) -> list[Manifest]:
    plan = make_plan(inputs, out, options, workers=workers, shard_bytes=shard_bytes, log=log)
    done = up_to_date(plan)
    if done is not None:
        log(
            f"nothing to do: {', '.join(str(out / m.prefix) for m in done)} already up to date "
            "(same inputs and arguments)"
        )
        return done
    todo = pending(plan)
    shard_plan.remove_leftovers(plan)
    if len(todo) < len(plan.shards):
        log(f"resuming: {len(plan.shards) - len(todo)} of {len(plan.shards)} shards already done (receipts kept)")
    total = sum(plan.shards[i].end - plan.shards[i].start for i in todo)
    if shard_runner is not None:
        shard_runner(plan.work / "plan.json")
        todo = []  # tokenized elsewhere: no local rates to report
        manifests = finalize(plan.work / "plan.json")
    else:
        _import_libraries(plan.encoder)
        # What the plan freed (hash buffers, the cut, the check's reference encoding, on threads with malloc arenas
        # of their own) goes back before the shards start and the workers fork: left there, it raised the peak RSS
        # with the corpus's size (+30 MB at 200 MB over 20 MB, measured; with this, the same).
        process_memory.give_back_freed_memory()
        bar = Progress(total, stream=err, mode=progress, label="tokenizing")
        merging = Merging(plan, finished=set(range(len(plan.shards))) - set(todo))
        try:
            try:
                run_local(plan, todo, workers, bar, merging.done)
            finally:
                bar.close()
            manifests = finalize(plan.work / "plan.json", merging)
        finally:
            merging.stop()
    if progress != "none" and todo:
        rates = bar.rates()
        log(
            f"tokenized {bar.documents:,} documents, {bar.tokens:,} tokens in {rates['seconds']:.1f} s with "
            f"{min(workers, len(todo))} worker(s): {rates['mb_per_s']:.2f} MB/s, {rates['tokens_per_s']:,.0f} tokens/s"
        )
    for manifest in manifests:
        skipped = f", {manifest.skipped_lines:,} bad line(s) skipped" if manifest.skipped_lines else ""
        log(
            f"wrote {out / manifest.prefix}: {manifest.documents:,} documents, {manifest.tokens:,} tokens "
            f"({manifest.dtype}){skipped}"
        )
    return manifests
