"""The merge of `data prepare`: once every shard has its receipt, each source's shards are merged in plan order into
`out/NAME.bin/.idx` (indexed_writer's add_index: the bytes of Megatron's IndexedDatasetBuilder.add_index, without
importing torch or Megatron-Core), renamed into place, then its manifest is written, last; and the check that a
plan's outputs are already there, complete and written by it."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Iterable, Optional

from nemo_recipes._version import __version__
from nemo_recipes.data import shard_plan
from nemo_recipes.data.indexed_writer import IndexedWriter
from nemo_recipes.data.manifest import (
    Manifest,
    fsync_directory,
    index_summary,
    manifest_path,
    read_manifest,
    write_manifest,
)
from nemo_recipes.data.shard_plan import ShardPlan
from nemo_recipes.data.shard_work import pending
from nemo_recipes.data.sources import bad
from nemo_recipes.errors import InvalidInputError


def _source_manifest(plan: ShardPlan, source: dict, receipts: list[dict]) -> Manifest:
    return Manifest(
        prefix=source["name"],
        documents=sum(r["documents"] for r in receipts),
        tokens=sum(r["tokens"] for r in receipts),
        text_bytes=sum(r["text_bytes"] for r in receipts),
        dtype=plan.dtype,
        max_token_id=max((r["max_token_id"] for r in receipts), default=0),
        tokenizer=plan.tokenizer,
        inputs=tuple(source["inputs"]),
        arguments=plan.arguments,
        created_by=f"nemo-recipes {__version__}",
        skipped_lines=sum(r["skipped"] for r in receipts),
    )


class Merging:
    """Each source's shards appended to its merged `.bin` in plan order as they finish, on a thread of this process
    (the kernel copies: copy_file_range), and synced shard by shard: the merge of a corpus overlaps its tokenizing
    instead of following it, and `finalize` is left with the indexes, the last sync and the renames. `done(index)`
    says a shard has its receipt; `stop()` ends the thread (within one shard's copy) and closes the files."""

    def __init__(self, plan: ShardPlan, finished: Iterable[int] = ()):
        self._plan = plan
        self._ready = set(finished)
        self._stopped = False
        self._error: Optional[BaseException] = None
        self._writers: dict[str, IndexedWriter] = {}
        self._condition = threading.Condition()
        (plan.work / "merge").mkdir(parents=True, exist_ok=True)
        # Started by the first `done`: after the pool has forked its workers, which then copy no running thread.
        self._thread = threading.Thread(target=self._run, name="merge", daemon=True)

    def done(self, index: int) -> None:
        with self._condition:
            self._ready.add(index)
            self._condition.notify()
            if self._thread.ident is None and not self._stopped:
                self._thread.start()

    def _run(self) -> None:
        try:
            for shard in self._plan.shards:
                with self._condition:
                    while shard.index not in self._ready and not self._stopped:
                        self._condition.wait()
                    if self._stopped:
                        return
                writer = self._writers.get(shard.source)
                if writer is None:
                    temporary = self._plan.work / "merge" / f"{shard.source}.bin"
                    writer = self._writers[shard.source] = IndexedWriter(temporary, self._plan.dtype)
                writer.add_index(self._plan.shard_prefix(shard.index))
                writer.sync()
        except BaseException as error:  # noqa: BLE001  handed to the caller of `merged` (a full disk, a lost file)
            self._error = error

    def merged(self) -> dict[str, IndexedWriter]:
        """Each source's writer once every shard is appended; raises what the thread raised. Called once every shard
        has its receipt (`finalize` checked): all are marked done, so the thread ends once it has copied the rest."""
        for shard in self._plan.shards:
            self.done(shard.index)
        self._thread.join()
        if self._error is not None:
            self.stop()
            raise self._error
        return self._writers

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify()
        if self._thread.ident is not None:
            self._thread.join()
        for writer in self._writers.values():
            writer.close()


def finalize(plan_path: str | Path, merging: Optional[Merging] = None) -> list[Manifest]:
    """Merge each source's shards in plan order into `out/NAME.bin/.idx` and write its manifest (last). `merging`:
    the shards were appended while they were tokenized; only the rest is done here."""
    plan = shard_plan.read_plan(plan_path)
    if plan is None:
        raise bad("plan", str(plan_path), "no shard plan there.", "run `nemo-recipes data prepare` to write one.")
    missing = pending(plan)
    if missing:
        raise bad(
            "plan",
            str(plan_path),
            f"{len(missing)} shard(s) are not finished (first: {missing[:5]}).",
            "run the shards (run_shards for every rank, or `nemo-recipes data prepare` again), then finalize.",
        )
    out = Path(plan.out)
    merge = plan.work / "merge"
    merge.mkdir(exist_ok=True)
    merged = merging.merged() if merging is not None else {}
    manifests = []
    for source in plan.sources:
        shards = [s for s in plan.shards if s.source == source["name"]]
        receipts = [shard_plan.read_receipt(plan, s.index) or {} for s in shards]
        manifest = _source_manifest(plan, source, receipts)
        if manifest.documents == 0:
            examples = [e for r in receipts for e in r["skipped_examples"]][:3]
            raise bad(
                "inputs",
                source["name"],
                f"no document was read from it ({manifest.skipped_lines} line(s) skipped"
                + (f"; first: {examples[0]}" if examples else "")
                + ").",
                "check --key and the files; with --skip-bad-lines every bad line is skipped.",
            )
        temporary = merge / source["name"]
        writer = merged.get(source["name"]) or IndexedWriter(f"{temporary}.bin", plan.dtype)
        try:
            if source["name"] not in merged:
                for shard in shards:
                    writer.add_index(plan.shard_prefix(shard.index))
            writer.finalize(f"{temporary}.idx")
        finally:
            writer.close()
        final = out / source["name"]
        # The old manifest goes first: from here until the new one is written the prefix reads as unfinished.
        manifest_path(final).unlink(missing_ok=True)
        for suffix in (".bin", ".idx"):
            with open(f"{temporary}{suffix}", "rb+") as stream:
                os.fsync(stream.fileno())
            os.replace(f"{temporary}{suffix}", f"{final}{suffix}")
        fsync_directory(out)
        write_manifest(final, manifest)
        manifests.append(manifest)
    # The shards' data now lives in the outputs; the receipts stay (an unchanged re-run finds the manifests).
    shutil.rmtree(plan.work / "shards", ignore_errors=True)
    shutil.rmtree(merge, ignore_errors=True)
    return manifests


def up_to_date(plan: ShardPlan) -> Optional[list[Manifest]]:
    """The manifests of the plan's outputs when every one is there, complete and written by this plan."""
    manifests = []
    for source in plan.sources:
        prefix = Path(plan.out) / source["name"]
        try:
            manifest = read_manifest(prefix)
            summary = index_summary(prefix)
        except InvalidInputError:
            return None
        same = (
            list(manifest.inputs) == list(source["inputs"])
            and manifest.arguments == plan.arguments
            and manifest.tokenizer == plan.tokenizer
            and (summary.documents, summary.tokens, summary.dtype)
            == (manifest.documents, manifest.tokens, manifest.dtype)
        )
        if not same:
            return None
        manifests.append(manifest)
    return manifests
