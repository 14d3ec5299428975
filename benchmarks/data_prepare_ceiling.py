"""The scaling ceiling of data prepare's own work on this machine, for `benchmarks/data_prepare.py`: the shards of a
finished plan tokenized again by N processes that share nothing (no pool, no progress queue, no merge, no plan to
make; each takes every N-th shard, each pinned to a core of its own), timed from the first fork to the last exit.

    python benchmarks/data_prepare_ceiling.py OUT PROCESSES      # OUT: a `data prepare --out` directory

On a machine whose cores slow each other down (a shared cache, memory bandwidth, a virtual machine's neighbours), this
work itself scales less than N-fold: its speed-up from 1 to 2 processes is the most a 2-worker `data prepare` could
show there. Prints {"processes", "shards", "wall_s"} as JSON. The shards' files are written in a directory of their
own, then removed: OUT and its plan are left as they were."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time

from nemo_recipes.data import fast_encoder, shard_plan
from nemo_recipes.data.shard_work import one_thread_per_worker, process_shard


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="a data prepare output directory (its plan is read)")
    parser.add_argument("processes", type=int)
    args = parser.parse_args()
    plan = shard_plan.read_plan(args.out)
    if plan is None:
        parser.error(f"{args.out}: no shard plan there")
    cores = sorted(os.sched_getaffinity(0))
    if args.processes > len(cores):
        parser.error(f"{args.processes} processes: only {len(cores)} core(s) usable here")
    encoder = fast_encoder.load(plan.tokenizer.path, plan.encoder, plan.tokenizer.fingerprint)
    scratch = tempfile.mkdtemp(prefix="ceiling-", dir=args.out)
    try:
        # A copy of the plan whose shards and receipts go to the scratch directory (ShardPlan.work follows `out`).
        plan = dataclasses.replace(plan, out=scratch)
        with one_thread_per_worker():
            process_shard(plan, plan.shards[-1], encoder, lambda *_: None)  # the first call's imports, once
            start = time.perf_counter()
            children = []
            for rank in range(args.processes):
                pid = os.fork()
                if pid == 0:
                    os.sched_setaffinity(0, {cores[rank]})
                    for shard in plan.shards[rank :: args.processes]:
                        process_shard(plan, shard, encoder, lambda *_: None)
                    os._exit(0)
                children.append(pid)
            failed = [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
            wall = time.perf_counter() - start
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        print(f"{len(failed)} process(es) failed", file=sys.stderr)
        return 1
    print(json.dumps({"processes": args.processes, "shards": len(plan.shards), "wall_s": wall}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
