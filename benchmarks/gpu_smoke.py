"""A full-size recipe trained for a few dozen steps on this machine's GPUs by NeMo's own loop (through
`nemo_recipes.smoke`: train, stop, resume), measured beside the planner's prediction for the same plan:
tokens/s, MFU and peak memory per GPU.

    python benchmarks/gpu_smoke.py                           # gpt_1_3b, full size, every GPU here, 30 steps
    python benchmarks/gpu_smoke.py --recipe gpt_1_3b --gpu h200 --global-batch 32 --json out.json
    python benchmarks/gpu_smoke.py --scaled-down             # the same report on a CPU (checks the script only)

Measured: the median step time of the steady steps (the first step of each phase is warm-up), tokens/s =
global batch x sequence / step time, MFU = model FLOPs per token (the planner's Megatron formula) x tokens/s /
(GPUs x the GPU's dense BF16 peak), peak memory = torch.cuda.max_memory_allocated on rank 0 (the first pipeline
stage). The global batch defaults to 32 sequences (8 micro-batches of 4 on one GPU) so a step takes about a second
and a checkpoint with optimizer state (16 GiB for 1.3B parameters) is written only at the stop and at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nemo_recipes.catalog import get_recipe  # noqa: E402
from nemo_recipes.plan import Cluster, assess, get_gpu  # noqa: E402
from nemo_recipes.plan.flops import model_flops_per_token  # noqa: E402


def measured(report, gpus: int, gpu_name: str | None) -> dict:
    """Tokens/s, MFU and peak memory from the smoke run's record (steady steps of both phases)."""
    from nemo_recipes.smoke_training import record

    spec = report.plan.spec
    records = record.read(Path(report.directory) / "metrics.jsonl")
    steps = [r for r in records if r.get("event") == "step"]
    firsts = {min(r["step"] for r in steps if r["phase"] == phase) for phase in {r["phase"] for r in steps}}
    steady = [r["seconds"] for r in steps if r["step"] not in firsts]
    step_s = statistics.median(steady) if steady else float("nan")
    tokens_per_s = spec.global_batch_size * spec.seq_length / step_s
    result = {"step_time_s": step_s, "tokens_per_s": tokens_per_s, "steady_steps": len(steady)}
    if gpu_name:
        peak = get_gpu(gpu_name).bf16_tflops * 1e12
        result["mfu"] = model_flops_per_token(spec) * tokens_per_s / (gpus * peak)
    ends = [r for r in records if r.get("event") == "end" and "peak_allocated_bytes" in r]
    if ends:
        result["peak_allocated_gib"] = max(r["peak_allocated_bytes"] for r in ends) / 2**30
        result["peak_reserved_gib"] = max(r["peak_reserved_bytes"] for r in ends) / 2**30
        result["device"] = ends[-1]["gpu"]
    return result


def predicted(spec, gpus: int, gpu_name: str | None) -> dict:
    if not gpu_name:
        return {}
    report = assess(spec, Cluster.of(1, gpus, gpu_name)).to_dict()
    throughput = report.get("throughput") or {}
    return {"valid": report["valid"], "memory_gib": (report.get("memory_gib") or {}).get("total"),
            "step_time_s": throughput.get("step_time_s"), "tokens_per_s": throughput.get("tokens_per_s"),
            "mfu": throughput.get("mfu")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="gpt_1_3b")
    parser.add_argument("--gpu", default=None, help="planner GPU name (default: from the device name)")
    parser.add_argument("--processes", type=int, default=None, help="default: every visible GPU (1 on a CPU)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--scaled-down", action="store_true", help="keep the smoke run's tiny shape (CPU check)")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)

    import torch

    from nemo_recipes.smoke_training import smoke

    cuda = torch.cuda.is_available()
    gpus = args.processes or (torch.cuda.device_count() if cuda else 1)
    gpu_name = args.gpu or (_planner_gpu(torch.cuda.get_device_name()) if cuda else None)
    overrides = {"global_batch_size": args.global_batch, "checkpoint_every_steps": None}
    if args.scaled_down:
        overrides = {}
    report = smoke(args.recipe, overrides, processes=gpus, steps=args.steps, full_size=not args.scaled_down,
                   dir=args.dir or tempfile.mkdtemp(prefix="gpu-smoke-"), progress=sys.stderr)
    print(report.format())
    figures = {"recipe": args.recipe, "full_size": not args.scaled_down, "gpus": gpus, "gpu": gpu_name,
               "passed": report.passed, "layout": report.plan.layout,
               "global_batch_size": report.plan.spec.global_batch_size, "seq_length": report.plan.spec.seq_length,
               "measured": measured(report, gpus, gpu_name), "predicted": predicted(report.plan.spec, gpus, gpu_name)}
    _print_side_by_side(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if report.passed else 1


def _planner_gpu(device_name: str) -> str | None:
    name = device_name.lower()
    for key, planner in (("h200", "h200"), ("h100", "h100-80gb"), ("gb200", "gb200"), ("b200", "b200"),
                         ("a100-sxm4-40gb", "a100-40gb"), ("a100", "a100-80gb")):
        if key in name:
            return planner
    return None


def _print_side_by_side(figures: dict) -> None:
    m, p = figures["measured"], figures["predicted"]
    print(f"\n{figures['recipe']} ({'full size' if figures['full_size'] else 'scaled down'}) on {figures['gpus']} x "
          f"{figures['gpu'] or 'CPU'}, {figures['layout']}, global batch {figures['global_batch_size']} x "
          f"{figures['seq_length']} tokens")
    print(f"{'':22}{'measured':>14}{'planner':>14}{'ratio':>8}")
    for label, key, scale in (("step time (s)", "step_time_s", 1), ("tokens/s", "tokens_per_s", 1),
                              ("MFU (%)", "mfu", 100)):
        a, b = m.get(key), p.get(key)
        ratio = f"{a / b:8.2f}" if a and b else ""
        print(f"{label:22}{_fmt(a, scale):>14}{_fmt(b, scale):>14}{ratio}")
    a, b = m.get("peak_allocated_gib"), p.get("memory_gib")
    print(f"{'peak memory (GiB)':22}{_fmt(a, 1):>14}{_fmt(b, 1):>14}"
          + (f"{a / b:8.2f}" if a and b else "") + "   (measured: allocated on rank 0; planner: total with allowance)")


def _fmt(value, scale) -> str:
    return "-" if value is None else f"{value * scale:,.3g}"


if __name__ == "__main__":
    sys.exit(main())
