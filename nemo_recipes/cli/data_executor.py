"""`nemo-recipes data prepare ... --executor local|slurm|PROFILE`: the shards tokenized by the ranks of a NeMo-Run
job instead of by processes on this machine, for a corpus one machine is too small for.

Three steps, the middle one anywhere: the shard plan is made here (frozen in the output directory); one job of the
executor's nodes x processes-per-node ranks runs `run_shards(plan, rank, world)` on every rank
(`executors/ranks.py`), each writing its shards and their receipts into the output directory, which every node must
see (a shared file system); then the shards are merged here (`finalize`: the bytes of Megatron's `add_index`). The
result is byte-identical to a run on one machine. A job that does not finish (a node lost, a time limit) leaves the
finished shards with their receipts: the same command again does only the rest.

The same from Python:

    from nemo_recipes.data.prepare import prepare
    from nemo_recipes.executors import slurm
    from nemo_recipes.executors.ranks import run_ranked

    executor = slurm(account="a", nodes=4, gpus_per_node=0, processes_per_node=8, container_image=None)
    prepare(["corpus.jsonl"], "/shared/data", tokenizer_path="/shared/tok", workers=32,
            shard_runner=lambda plan: run_ranked(executor, SHARDS, name="data-prepare", plan_path=str(plan)))
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from nemo_recipes.cli._executor_options import add_executor_arguments
from nemo_recipes.cli._output import CLIError

#: What each rank runs (named, so that the job's configuration is plain data).
SHARDS = "nemo_recipes.data.prepare:run_shards"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("on several nodes (NeMo-Run executors)")
    group.add_argument(
        "--executor",
        metavar="PROFILE",
        default=None,
        help="tokenize the shards on the ranks of one NeMo-Run job (nodes x processes per node) instead of local "
        "workers: a preset (local, slurm) or a cluster profile; its nodes must share --out",
    )
    add_executor_arguments(group, example="nodes=4")


def shard_runner(args: argparse.Namespace) -> tuple[Optional[Callable[[Path], None]], Optional[int]]:
    """(prepare's shard_runner, the executor's world size) for --executor, (None, None) without it."""
    if not args.executor:
        return None, None
    from nemo_recipes.cli._executor_options import executor_args
    from nemo_recipes.executors.profiles import executor_for
    from nemo_recipes.executors.ranks import world_of

    executor, _gpu = executor_for(args.executor, args.clusters, **executor_args(args.executor_arg))
    return (lambda plan: run_plan(executor, plan)), world_of(executor)


def run_plan(executor: Any, plan: Path, log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> None:
    """The plan's pending shards on `executor`'s ranks; raises CLIError (exit 1) unless the job completed."""
    from nemo_recipes.executors.ranks import run_ranked, world_of

    log(f"data prepare: the shards of {plan} on {world_of(executor)} rank(s) ({type(executor).__name__})")
    for problem in unmounted_plan_paths(executor, plan):
        log(f"data prepare: {problem}")
    # NeMo-Run prints its progress on stdout, which belongs to the result (--json).
    with contextlib.redirect_stdout(sys.stderr):
        outcome = run_ranked(executor, SHARDS, name="data-prepare", report=log, plan_path=str(plan))
    if not outcome.succeeded:
        raise CLIError(
            f"the shard job ended {outcome.state} {outcome.detail}".strip()
            + f" (logs: {outcome.job_dir}). Finished shards keep their receipts: run the same command again "
            "to do only the rest."
        )


def unmounted_plan_paths(executor: Any, plan: Path) -> list[Any]:
    """A warning (field, value, the mount to add) for each path the ranks read or write that the executor's
    container does not mount: the inputs, the tokenizer and --out (see executors/slurm_executor/mounts.py)."""
    from nemo_recipes.data.shard_plan import read_plan
    from nemo_recipes.executors.slurm_executor.mounts import unmounted

    planned = read_plan(plan)
    if planned is None:
        return []
    paths = [("inputs", str(i["path"])) for source in planned.sources for i in source["inputs"]]
    paths += [("tokenizer_path", planned.tokenizer.path), ("out", planned.out)]
    return unmounted(executor, paths)
