"""A CPU stand-in for training: every rank joins torch.distributed (gloo), all-reduces its rank, and prints one
`DIST_CHECK {json}` line. Used by examples/pretrain_gpt.py --check and the Slurm integration tests, because NeMo's
training loop needs CUDA.

    torchrun --nproc-per-node 2 examples/dist_check.py --echo MY_VAR --digest WANDB_API_KEY

--echo NAME     print the value of NAME as the rank received it (to prove quoting);
--digest NAME   print only the SHA-256 of NAME's value (to prove a secret arrived without logging it);
--fail          exit with status 3 after the check (a failing job);
--sleep S       sleep S seconds after the check (a job to cancel).
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--echo", action="append", default=[])
    parser.add_argument("--digest", action="append", default=[])
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(total)
    report = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": int(os.environ.get("LOCAL_RANK", -1)),
        "host": socket.gethostname(),
        "node_rank": int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", -1))),
        "rank_sum": int(total.item()),
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", 0) or 0),
        "echo": {name: os.environ.get(name) for name in args.echo},
        "sha256": {name: hashlib.sha256(os.environ[name].encode()).hexdigest() if name in os.environ else None
                   for name in args.digest},
    }
    print("DIST_CHECK " + json.dumps(report, sort_keys=True), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if args.sleep:
        time.sleep(args.sleep)
    return 3 if args.fail else 0


if __name__ == "__main__":
    sys.exit(main())
