"""How long `nemo-recipes ls`, `show gpt_70b` and `plan gpt_70b` take, side by side with NeMo's own CLI.

    python benchmarks/cli_latency.py                 # 7 runs of each fast verb, 3 of the NeMo dry run
    python benchmarks/cli_latency.py --runs 11 --baseline-runs 5 --json

Targets (issue 5): each fast verb <= 0.5 s wall (median), and at least 30x faster than
`nemo llm pretrain --factory gpt_70b --dryrun --yes` measured in the same run on the same machine. Until our
factories are registered with NeMo-Run, the baseline falls back to NeMo's own `gpt3_175b` factory and says so.
Exit status: 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
FAST = (("ls",), ("show", "gpt_70b"), ("plan", "gpt_70b"))
FAST_LIMIT_S = 0.5
MIN_RATIO = 30.0


def _exe(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else (shutil.which(name) or name)


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - start, result


def measure(command: list[str], runs: int) -> dict:
    times = []
    for _ in range(runs):
        seconds, result = timed(command)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
        times.append(seconds)
    return {
        "command": " ".join(Path(command[0]).name if i == 0 else c for i, c in enumerate(command)),
        "runs": runs,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
    }


def baseline_command() -> tuple[list[str], str]:
    """NeMo's dry run of gpt_70b if our factory is registered, else of its own gpt3_175b (one probing run)."""
    nemo = _exe("nemo")
    ours = [nemo, "llm", "pretrain", "--factory", "gpt_70b", "--dryrun", "--yes"]
    _, probe = timed(ours)
    if probe.returncode == 0 and "No matching factory" not in probe.stdout + probe.stderr:
        return ours, "gpt_70b"
    return [
        nemo,
        "llm",
        "pretrain",
        "--factory",
        "gpt3_175b",
        "--dryrun",
        "--yes",
    ], "gpt3_175b (gpt_70b is not registered with NeMo-Run yet)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each fast verb (median reported)")
    parser.add_argument("--baseline-runs", type=int, default=3, help="runs of the NeMo dry run (about 15-20 s each)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    cli = _exe("nemo-recipes")
    subprocess.run([cli, "ls"], capture_output=True)  # warm the file cache so the first timed run is not an outlier
    fast = [measure([cli, *verb], args.runs) for verb in FAST]
    command, factory = baseline_command()
    base = measure(command, args.baseline_runs)
    for row in fast:
        row["ratio"] = base["median_s"] / row["median_s"]
        row["ok"] = row["median_s"] <= FAST_LIMIT_S and row["ratio"] >= MIN_RATIO
    ok = all(row["ok"] for row in fast)

    if args.json:
        print(json.dumps({"baseline": {**base, "factory": factory}, "fast": fast, "targets_met": ok}, indent=2))
        return 0 if ok else 1
    print(f"baseline: {base['command']}  (factory {factory})")
    print(
        f"  median {base['median_s']:.2f} s over {base['runs']} runs (min {base['min_s']:.2f}, "
        f"max {base['max_s']:.2f})\n"
    )
    print(
        f"{'command':<32} {'median s':>9} {'min s':>7} {'max s':>7} {'x faster':>9}  target (<= {FAST_LIMIT_S} s, "
        f">= {MIN_RATIO:.0f}x)"
    )
    for row in fast:
        print(
            f"{row['command']:<32} {row['median_s']:>9.3f} {row['min_s']:>7.3f} {row['max_s']:>7.3f} "
            f"{row['ratio']:>8.0f}x  {'met' if row['ok'] else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
