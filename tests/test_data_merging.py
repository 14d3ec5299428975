"""The merge of `data prepare` while the shards are tokenized (merge.Merging): shards appended in plan order as they
finish, in whatever order they finish; the same bytes as the merge after all shards (the path of a multi-node
prepare); a stop that ends at once; a lost shard that is an error, not a short dataset; the copy without
copy_file_range where a file system lacks it."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from nemo_recipes.data import indexed_writer, shard_plan, tokenizers
from nemo_recipes.data.merge import Merging, finalize
from nemo_recipes.data.prepare import Options, make_plan, prepare
from nemo_recipes.data.shard_work import run_shards

TEXTS = [f"Document {i}: " + " ".join(f"word{(i * j) % 89} naïve {j}" for j in range(40 + i % 50)) for i in range(600)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return tokenizers.train(TEXTS[:200], tmp_path_factory.mktemp("tok"), vocab_size=500)


@pytest.fixture
def inputs(tmp_path) -> list[str]:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:400]))
    second.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[400:]))
    return [str(first), str(second)]


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".bin", ".idx")}


def _shards_done(inputs: list[str], tokenizer: Path, out: Path) -> shard_plan.ShardPlan:
    """A plan of many shards over two sources, every shard tokenized (run_shards), nothing merged yet."""
    plan = make_plan(inputs, out, Options(tokenizer_path=str(tokenizer)), shard_bytes=8_000, log=lambda _: None)
    assert len(plan.shards) > 8 and len({s.source for s in plan.shards}) == 2
    run_shards(plan.work / "plan.json")
    return plan


def _wait(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_shards_are_appended_in_plan_order_as_they_finish_and_give_the_bytes_of_the_merge_after(
    inputs, tokenizer, tmp_path
):
    plan = _shards_done(inputs, tokenizer, tmp_path / "during")
    first = [s for s in plan.shards if s.source == plan.shards[0].source]
    shard_bytes = [Path(f"{plan.shard_prefix(s.index)}.bin").stat().st_size for s in first]
    merged_bin = plan.work / "merge" / f"{first[0].source}.bin"
    merging = Merging(plan)
    try:
        # Shards 1 and 2 finish before shard 0: nothing can be appended until shard 0 is there.
        merging.done(2)
        merging.done(1)
        time.sleep(0.3)
        assert not merged_bin.exists() or merged_bin.stat().st_size == 0
        merging.done(0)
        # Then 0, 1 and 2 are appended while the other shards are still "tokenizing" (not done), and no more.
        assert _wait(lambda: merged_bin.exists() and merged_bin.stat().st_size == sum(shard_bytes[:3]))
        time.sleep(0.3)
        assert merged_bin.stat().st_size == sum(shard_bytes[:3])
        for shard in reversed(plan.shards[3:]):
            merging.done(shard.index)
        during = finalize(plan.work / "plan.json", merging)
    finally:
        merging.stop()

    after_plan = _shards_done(inputs, tokenizer, tmp_path / "after")
    after = finalize(after_plan.work / "plan.json")
    assert [m.tokens for m in during] == [m.tokens for m in after] and during[0].tokens > 0
    assert _files(tmp_path / "during") == _files(tmp_path / "after")
    assert len(_files(tmp_path / "after")) == 4


def test_a_local_prepare_gives_the_bytes_of_a_prepare_whose_shards_ran_elsewhere(inputs, tokenizer, tmp_path):
    # prepare's own pool merges while tokenizing; a shard_runner (data prepare --executor) merges after.
    prepare(inputs, tmp_path / "pool", tokenizer_path=tokenizer, workers=2, shard_bytes=8_000, progress="none")
    prepare(
        inputs,
        tmp_path / "ranks",
        tokenizer_path=tokenizer,
        shard_bytes=8_000,
        progress="none",
        shard_runner=lambda plan_path: [run_shards(plan_path, rank, 2) for rank in range(2)] and None,
    )
    assert _files(tmp_path / "pool") == _files(tmp_path / "ranks")


def test_stop_ends_the_merge_at_once_with_shards_still_missing(inputs, tokenizer, tmp_path):
    plan = _shards_done(inputs, tokenizer, tmp_path / "out")
    merging = Merging(plan)
    merging.done(0)  # the thread starts, appends shard 0 and waits for shard 1
    assert merging._thread.is_alive()
    started = time.monotonic()
    merging.stop()
    assert time.monotonic() - started < 5
    assert not merging._thread.is_alive()


def test_a_shard_lost_before_its_merge_is_an_error_not_a_short_dataset(inputs, tokenizer, tmp_path):
    plan = _shards_done(inputs, tokenizer, tmp_path / "out")
    Path(f"{plan.shard_prefix(1)}.bin").unlink()
    merging = Merging(plan)
    try:
        with pytest.raises(FileNotFoundError):
            merging.merged()
    finally:
        merging.stop()


def test_without_copy_file_range_the_merge_copies_the_same_bytes(inputs, tokenizer, tmp_path, monkeypatch):
    plan = _shards_done(inputs, tokenizer, tmp_path / "kernel")
    finalize(plan.work / "plan.json")

    def cross_device(*_args, **_kwargs):  # what copy_file_range says between two file systems on older kernels
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(indexed_writer.os, "copy_file_range", cross_device)
    plan = _shards_done(inputs, tokenizer, tmp_path / "reads")
    finalize(plan.work / "plan.json")
    assert _files(tmp_path / "kernel") == _files(tmp_path / "reads")
