"""How close the planner's step-time model comes to published training measurements.

    python benchmarks/planner_accuracy.py                      # ../shared/perf/calibration.csv
    python benchmarks/planner_accuracy.py --csv my_rows.csv    # any CSV with the same columns
    python benchmarks/planner_accuracy.py --recipes            # predicted FP8 speed-up over BF16, five recipes, H100

One line per row: the predicted and the published value (step time for `iteration_time_s` rows, tokens/s per GPU
otherwise) and the error in %, then the mean and maximum absolute error overall, per source, and on the rows whose id
starts with `--subset` (default "K22-", Korthikanti et al. 2022). TFLOP/s targets are compared as tokens/s: through
the `derived_tokens_per_gpu` or `derived_step_s` columns when present, otherwise converted with the FLOP formula that
the row's `flops_convention` names. Nothing here depends on a particular file or row.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from nemo_recipes.catalog import RECIPES, RecipeSpec  # noqa: E402
from nemo_recipes.errors import InvalidRecipeError  # noqa: E402
from nemo_recipes.plan import flops  # noqa: E402
from nemo_recipes.plan.hardware import Cluster  # noqa: E402
from nemo_recipes.plan.shapes import is_missing, plan_from_row, stack_from_row  # noqa: E402
from nemo_recipes.plan.throughput import estimate_throughput  # noqa: E402

DEFAULT_CSV = REPO.parent / "shared" / "perf" / "calibration.csv"


def _number(value: Any) -> Optional[float]:
    if is_missing(value):
        return None
    try:
        return float(str(value).replace(",", "").split(" ")[0])
    except ValueError:
        return None


def convention_flops_per_token(spec: RecipeSpec, convention: str) -> float:
    """FLOPs per token under the convention a publisher names (perf-model.md section 0)."""
    text = (convention or "").lower()
    if text.startswith("96") or "incl. recompute" in text or "hardware flops" in text:
        vocab = spec.padded_vocab_size
        return flops.narayanan_hardware_flops_per_token(spec.num_layers, spec.hidden_size, spec.seq_length, vocab)
    per_token = flops.forward_flops_per_token(spec)
    if "causal" in text and "no causal" not in text:
        return 3.0 * (per_token.dense + 0.5 * per_token.attention + per_token.logits)
    return per_token.model


def compare(row: dict[str, Any]) -> dict[str, Any]:
    """Predicted and published value of one row, or the reason it cannot be compared."""
    spec, cluster, assumptions = plan_from_row(row)
    stack, why = stack_from_row(row)
    result = estimate_throughput(spec, cluster, stack=stack)
    target = str(row.get("target") or "").strip().lower()
    value = _number(row.get("target_value"))
    if target.startswith("iteration_time") or target.startswith("step_time"):
        metric, published, predicted = "step_s", value, result.step_time_s
    elif target.startswith("tokens"):
        metric, published, predicted = "tok/s/gpu", value, result.tokens_per_s_per_gpu
    elif target.startswith("tflops"):
        tokens = _number(row.get("derived_tokens_per_gpu"))
        step = _number(row.get("derived_step_s"))
        if tokens is not None:
            metric, published, predicted = "tok/s/gpu", tokens, result.tokens_per_s_per_gpu
        elif step is not None:
            metric, published, predicted = "step_s", step, result.step_time_s
        elif value is not None:
            per_token = convention_flops_per_token(spec, str(row.get("flops_convention") or ""))
            metric, published = "tok/s/gpu", value * 1e12 / per_token
            predicted = result.tokens_per_s_per_gpu
            assumptions = assumptions + [f"TFLOP/s converted with {per_token:.4g} FLOP/token "
                                         f"({row.get('flops_convention') or 'Megatron 72-formula'})"]
        else:
            raise ValueError("no published value")
    else:
        raise ValueError(f"unknown target {row.get('target')!r}")
    if published is None or not published > 0:
        raise ValueError(f"no usable published value ({row.get('target_value')!r})")
    return {"metric": metric, "published": published, "predicted": predicted,
            "error_pct": 100.0 * (predicted - published) / published, "mfu": result.mfu,
            "assumptions": assumptions + why, "result": result}


def _summary(label: str, errors: list[float]) -> str:
    if not errors:
        return f"{label}: no rows"
    absolute = [abs(e) for e in errors]
    return (f"{label}: n={len(errors)} mean |error| {sum(absolute) / len(absolute):.2f} % "
            f"max |error| {max(absolute):.2f} %")


def run_csv(path: Path, subset: str, verbose: bool, out=sys.stdout) -> int:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    errors: list[float] = []
    by_source: dict[str, list[float]] = {}
    chosen: list[float] = []
    skipped = 0
    print(f"{'id':44s} {'metric':9s} {'predicted':>11s} {'published':>11s} {'error':>8s}  mfu", file=out)
    for number, row in enumerate(rows, start=1):
        row_id = str(row.get("id") or f"row {number}")
        try:
            c = compare(row)
        except (InvalidRecipeError, ValueError) as error:
            skipped += 1
            reason = str(error).replace("\n", " ")
            print(f"{row_id:44s} skipped: {reason}", file=out)
            continue
        errors.append(c["error_pct"])
        source = str(row.get("source") or "unknown").split("(")[0].split(",")[0].strip()
        by_source.setdefault(source, []).append(c["error_pct"])
        if subset and row_id.startswith(subset):
            chosen.append(c["error_pct"])
        print(f"{row_id[:44]:44s} {c['metric']:9s} {c['predicted']:11.4g} {c['published']:11.4g} "
              f"{c['error_pct']:+7.1f}%  {c['mfu']:.3f}", file=out)
        if verbose:
            for line in c["assumptions"]:
                print(f"    assumed: {line}", file=out)
            steps = c["result"].breakdown_s
            total = c["result"].step_time_s
            parts = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in steps.items() if v > 0)
            print(f"    step: {parts}", file=out)
    print("-" * 90, file=out)
    for source, errs in by_source.items():
        print(_summary(f"  {source}", errs), file=out)
    if subset:
        print(_summary(f"rows starting with {subset!r}", chosen), file=out)
    print(_summary("all rows", errors) + (f" ({skipped} skipped)" if skipped else ""), file=out)
    return 0 if errors else 1


def fp8_speedups(out=sys.stdout) -> dict[str, float]:
    """Predicted FP8/BF16 tokens/s for every recipe on its default cluster of H100s."""
    speedups = {}
    print(f"{'recipe':10s} {'GPUs':>5s} {'bf16 tok/s/gpu':>15s} {'fp8 tok/s/gpu':>14s} {'speed-up':>9s}", file=out)
    for name, spec in RECIPES.items():
        cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, "h100-80gb")
        bf16 = estimate_throughput(spec.replace(precision="bf16"), cluster)
        fp8 = estimate_throughput(spec.replace(precision="fp8"), cluster)
        speedups[name] = fp8.tokens_per_s_per_gpu / bf16.tokens_per_s_per_gpu
        print(f"{name:10s} {cluster.world_size:5d} {bf16.tokens_per_s_per_gpu:15.0f} "
              f"{fp8.tokens_per_s_per_gpu:14.0f} {speedups[name]:8.2f}x", file=out)
    return speedups


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV,
                        help=f"measurements with the columns of calibration.csv (default: {DEFAULT_CSV})")
    parser.add_argument("--subset", default="K22-", help="also summarise rows whose id starts with this (default K22-)")
    parser.add_argument("--verbose", "-v", action="store_true", help="print each row's assumptions and step breakdown")
    parser.add_argument("--recipes", action="store_true",
                        help="print the predicted FP8 speed-up over BF16 for the five recipes on H100 instead")
    args = parser.parse_args(argv)
    if args.recipes:
        fp8_speedups()
        return 0
    if not args.csv.is_file():
        parser.error(f"--csv {args.csv}: no such file")
    return run_csv(args.csv, args.subset, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
