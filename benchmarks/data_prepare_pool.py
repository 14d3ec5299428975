"""Repetitions of `nemo-recipes data prepare` with 2 workers: each run must end (within --timeout) with exit 0, no
traceback on stderr and the same bytes as the first. Issue 33 asked for 50 runs without a hang or traceback; before
the workers reset the command's signal handler, about 1 run in 5 hung after its last shard.

    python benchmarks/data_prepare_pool.py --runs 50

Each run is the installed console script in a process of its own (start-up included, as a user runs it), on a small
generated JSONL file cut into shards of 8 KB, with a tokenizer trained once. Exit status: 0 when every run passed,
1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemo_recipes.data import tokenizers

SCRIPT = str(Path(sys.executable).with_name("nemo-recipes"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=120, help="seconds one run may take")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prepare-pool-") as root:
        texts = [f"Document {i}: " + " ".join(f"word{(i * j) % 97}" for j in range(60)) for i in range(400)]
        source = Path(root, "small.jsonl")
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        tokenizer = tokenizers.train(texts, Path(root, "tok"), vocab_size=400)
        first = None
        failures = []
        started = time.monotonic()
        for run in range(args.runs):
            out = Path(root, f"out{run}")
            command = [SCRIPT, "data", "prepare", str(source), "--tokenizer", str(tokenizer), "--out", str(out)]
            try:
                result = subprocess.run([*command, "--workers", "2", "--shard-size", "8K", "--progress", "none"],
                                        capture_output=True, text=True, timeout=args.timeout)  # fmt: skip
            except subprocess.TimeoutExpired:
                failures.append(f"run {run}: no end within {args.timeout:.0f} s (a hang)")
                continue
            data = (out / "small.bin").read_bytes() if (out / "small.bin").exists() else b""
            first = data if first is None else first
            if result.returncode != 0 or "Traceback" in result.stderr or data != first:
                failures.append(
                    f"run {run}: exit {result.returncode}, identical {data == first}: {result.stderr[-500:]}"
                )
        seconds = time.monotonic() - started
    print(
        f"{args.runs - len(failures)} of {args.runs} runs clean in {seconds:.0f} s ({seconds / args.runs:.1f} s each)"
    )
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
