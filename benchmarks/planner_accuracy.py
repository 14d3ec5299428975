"""How close the planner's step-time model comes to published training measurements, in sample and cross-validated.

    python benchmarks/planner_accuracy.py                      # benchmarks/data/calibration.csv
    python benchmarks/planner_accuracy.py --csv my_rows.csv    # any CSV with the same columns
    python benchmarks/planner_accuracy.py --no-cv              # the per-row table only (no refitting)
    python benchmarks/planner_accuracy.py --recipes            # predicted FP8 speed-up over BF16, five recipes, H100

One line per row: the predicted and the published value (step time for `iteration_time_s` rows, tokens/s per GPU
otherwise) and the error in %, with the constants the planner ships (`throughput.CONSTANTS`); then the mean and
maximum absolute error overall, per source, on the rows whose id starts with `--subset`, and by sequence length,
model size and GPU generation (the cross-validation prints the same groups held out).

Mixture-of-Experts rows (`--moe-csv`, default benchmarks/data/moe_rows.csv) are reported on their own after the
dense ones, with their own leave-one-source-out error (`benchmarks/moe_accuracy.py`).

Then the honest figure: leave-one-source-out cross-validation. The model's global efficiencies
(`throughput.ModelConstants`) are refitted by coordinate descent on a grid (`plan.calibration.refit`, the fit
`nemo-recipes plan --calibrate` runs on a user's own runs), minimising the mean absolute error,
(a) on every row (in sample) and (b) once per source on the rows of all the other sources, and each source is scored
with the constants fitted without it. A source is a publication (the id prefix: K22, N21, MLM, NeMo24.07, ...): its
rows share software, hardware and measurement habits, so leaving out single rows would flatter the model.
`power_exponent` is derived (power ~ clock^3), not fitted. The error surface is flat in places (the fixed per-step
cost trades against the efficiencies), so the descent also restarts from a few values of it
(`calibration.RESTARTS`), and the folds start from the fit on every row; figures move by a few tenths of a percent
with the starting point.

TFLOP/s targets are compared as tokens/s: through the `derived_tokens_per_gpu` or `derived_step_s` columns when
present, otherwise converted with the FLOP formula that the row's `flops_convention` names.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.moe_accuracy import MOE_CSV, run_moe  # noqa: E402
from benchmarks.published_rows import is_missing, plan_from_row, stack_from_row  # noqa: E402
from nemo_recipes.catalog import RECIPES, RecipeSpec  # noqa: E402
from nemo_recipes.errors import InvalidRecipeError  # noqa: E402
from nemo_recipes.plan import flops  # noqa: E402
from nemo_recipes.plan.calibration import Case, held_out_errors, refit  # noqa: E402
from nemo_recipes.plan.hardware import Cluster  # noqa: E402
from nemo_recipes.plan.throughput import CONSTANTS, ModelConstants, estimate_throughput  # noqa: E402

DEFAULT_CSV = REPO / "benchmarks" / "data" / "calibration.csv"


def _number(value: Any) -> Optional[float]:
    if is_missing(value):
        return None
    try:
        return float(str(value).replace(",", "").split(" ")[0])
    except ValueError:
        return None


def narayanan_hardware_flops_per_token(layers: int, hidden: int, seq: int, vocab: int) -> float:
    """Narayanan et al. 2021 Eq. 3 (full recomputation counted): `96·l·h²·(1 + s/(6h) + V/(16·l·h))`, the
    convention of the publishers that count hardware FLOPs; `plan.flops.hardware_flops_per_token` generalises it."""
    return 96.0 * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def korthikanti_model_flops_per_token(layers: int, hidden: int, seq: int, vocab: int) -> float:
    """Korthikanti et al. 2022 Eq. 7: `72·l·h²·(1 + s/(6h) + V/(12·l·h))`, the published form of
    `plan.flops.model_flops_per_token` for a standard GPT (the tests check one against the other)."""
    return 72.0 * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def convention_flops_per_token(spec: RecipeSpec, convention: str) -> float:
    """FLOPs per token under the convention a publisher names (perf-model.md section 0)."""
    text = (convention or "").lower()
    if text.startswith("96") or "incl. recompute" in text or "hardware flops" in text:
        vocab = spec.padded_vocab_size
        return narayanan_hardware_flops_per_token(spec.num_layers, spec.hidden_size, spec.seq_length, vocab)
    per_token = flops.forward_flops_per_token(spec)
    if "causal" in text and "no causal" not in text:
        return 3.0 * (per_token.dense + 0.5 * per_token.attention + per_token.logits)
    return per_token.model


def source_of(row: dict[str, Any]) -> str:
    """The publication a row comes from: its id prefix (K22, N21, MLM, NeMo24.07, Bridge25.09, ...)."""
    return str(row.get("id") or "").split("-")[0] or str(row.get("source") or "unknown")


def case(row: dict[str, Any]) -> Case:
    """The row as a Case, or ValueError/InvalidRecipeError saying why it cannot be compared."""
    spec, cluster, assumptions = plan_from_row(row)
    stack, why = stack_from_row(row)
    target = str(row.get("target") or "").strip().lower()
    value = _number(row.get("target_value"))
    if target.startswith("iteration_time") or target.startswith("step_time"):
        metric, published = "step_s", value
    elif target.startswith("tokens"):
        metric, published = "tok/s/gpu", value
    elif target.startswith("tflops"):
        tokens = _number(row.get("derived_tokens_per_gpu"))
        step = _number(row.get("derived_step_s"))
        if tokens is not None:
            metric, published = "tok/s/gpu", tokens
        elif step is not None:
            metric, published = "step_s", step
        elif value is not None:
            per_token = convention_flops_per_token(spec, str(row.get("flops_convention") or ""))
            metric, published = "tok/s/gpu", value * 1e12 / per_token
            assumptions = assumptions + [
                f"TFLOP/s converted with {per_token:.4g} FLOP/token "
                f"({row.get('flops_convention') or 'Megatron 72-formula'})"
            ]
        else:
            raise ValueError("no published value")
    else:
        raise ValueError(f"unknown target {row.get('target')!r}")
    if published is None or not published > 0:
        raise ValueError(f"no usable published value ({row.get('target_value')!r})")
    return Case(
        id=str(row.get("id") or ""),
        source=source_of(row),
        spec=spec,
        cluster=cluster,
        stack=stack,
        metric=metric,
        published=published,
        assumptions=tuple(assumptions + why),
    )


def compare(row: dict[str, Any]) -> dict[str, Any]:
    """Predicted and published value of one row with the shipped constants, or the reason it cannot be compared."""
    c = case(row)
    result = c.predict()
    predicted = c.value(result)
    return {
        "metric": c.metric,
        "published": c.published,
        "predicted": predicted,
        "error_pct": 100.0 * (predicted - c.published) / c.published,
        "mfu": result.mfu,
        "assumptions": list(c.assumptions),
        "result": result,
        "case": c,
    }


# The groups the errors are also summarised by (issue 22): where a model of attention, GEMM shape or hardware
# would go wrong, it shows as one group off from the others.
SEQUENCE_BINS = ((2048, "seq <= 2k"), (4096, "seq 4k"), (8192, "seq 8k"), (float("inf"), "seq >= 16k"))
SIZE_BINS = ((10e9, "< 10B"), (100e9, "10-100B"), (300e9, "100-300B"), (float("inf"), ">= 300B"))
GENERATIONS = {8: "Ampere (A100)", 9: "Hopper (H100/H200)", 10: "Blackwell (B200/GB200)"}


def groups_of(c: "Case") -> dict[str, str]:
    """The sequence-length, model-size and GPU-generation group of a case."""
    seq = next(label for bound, label in SEQUENCE_BINS if c.spec.seq_length <= bound)
    size = next(label for bound, label in SIZE_BINS if c.spec.num_parameters < bound)
    gpu = c.cluster.gpu
    major = gpu.compute_capability[0] if gpu is not None and gpu.compute_capability else None
    return {
        "sequence length": seq,
        "model size": size,
        "GPU generation": GENERATIONS.get(major, "other") if major is not None else "unknown",
    }


def print_groups(errors: dict[str, float], cases: list["Case"], label: str, out=sys.stdout) -> None:
    """Mean and maximum |error| of `errors` (by case id) per sequence length, model size and GPU generation."""
    by: dict[tuple[str, str], list[float]] = {}
    for c in cases:
        if c.id in errors:
            for kind, group in groups_of(c).items():
                by.setdefault((kind, group), []).append(errors[c.id])
    order = {
        "sequence length": [label for _, label in SEQUENCE_BINS],
        "model size": [label for _, label in SIZE_BINS],
        "GPU generation": [*GENERATIONS.values(), "other", "unknown"],
    }
    for kind, groups in order.items():
        print(f"{label} by {kind}:", file=out)
        for group in groups:
            if (kind, group) in by:
                print(_summary(f"  {group}", by[(kind, group)]), file=out)


def _summary(label: str, errors: list[float]) -> str:
    if not errors:
        return f"{label}: no rows"
    absolute = [abs(e) for e in errors]
    return (
        f"{label}: n={len(errors)} mean |error| {sum(absolute) / len(absolute):.2f} % max |error| {max(absolute):.2f} %"
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def run_csv(path: Path, subset: str, verbose: bool, out=sys.stdout) -> int:
    rows = _rows(path)
    errors: list[float] = []
    by_id: dict[str, float] = {}
    cases: list[Case] = []
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
        by_id[row_id] = c["error_pct"]
        cases.append(c["case"])
        by_source.setdefault(source_of(row), []).append(c["error_pct"])
        if subset and row_id.startswith(subset):
            chosen.append(c["error_pct"])
        print(
            f"{row_id[:44]:44s} {c['metric']:9s} {c['predicted']:11.4g} {c['published']:11.4g} "
            f"{c['error_pct']:+7.1f}%  {c['mfu']:.3f}",
            file=out,
        )
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
    print_groups(by_id, cases, "shipped constants", out)
    return 0 if errors else 1


# ---- refitting and cross-validation ----


def _constants_text(constants: ModelConstants) -> str:
    return ", ".join(f"{f.name} {getattr(constants, f.name):g}" for f in fields(constants))


def _mean(values: list[float]) -> float:
    return sum(abs(v) for v in values) / len(values)


def cross_validate(path: Path, out=sys.stdout) -> dict[str, Any]:
    """In-sample (shipped constants, and refitted on every row) and leave-one-source-out errors, per source."""
    cases = []
    for row in _rows(path):
        try:
            cases.append(case(row))
        except (InvalidRecipeError, ValueError):
            continue
    sources = list(dict.fromkeys(c.source for c in cases))
    everything = refit(cases)
    shipped = {c.id: c.error_pct(CONSTANTS) for c in cases}
    in_sample = {c.id: c.error_pct(everything) for c in cases}
    held_out, folds = held_out_errors(cases, lambda c: c.source, start=everything)

    print("", file=out)
    print(
        "Leave-one-source-out cross-validation (mean |error| %; each source scored with constants refitted "
        "without its rows)",
        file=out,
    )
    print(f"shipped constants:        {_constants_text(CONSTANTS)}", file=out)
    print(f"refitted on every row:    {_constants_text(everything)}", file=out)
    print(
        f"{'source':12s} {'n':>3s} {'shipped':>8s} {'refit':>8s} {'held out':>9s} {'max held out':>13s}  "
        "constants refitted without the source",
        file=out,
    )
    table = {}
    for source in sources:
        ids = [c.id for c in cases if c.source == source]
        row = (
            _mean([shipped[i] for i in ids]),
            _mean([in_sample[i] for i in ids]),
            _mean([held_out[i] for i in ids]),
            max(abs(held_out[i]) for i in ids),
        )
        table[source] = row
        changed = {
            f.name: getattr(folds[source], f.name)
            for f in fields(ModelConstants)
            if getattr(folds[source], f.name) != getattr(everything, f.name)
        }
        print(
            f"{source:12s} {len(ids):3d} {row[0]:8.2f} {row[1]:8.2f} {row[2]:9.2f} {row[3]:13.2f}  "
            f"{', '.join(f'{k} {v:g}' for k, v in changed.items()) or 'as refitted on every row'}",
            file=out,
        )
    ids = [c.id for c in cases]
    totals = (
        _mean([shipped[i] for i in ids]),
        _mean([in_sample[i] for i in ids]),
        _mean([held_out[i] for i in ids]),
        max(abs(held_out[i]) for i in ids),
    )
    print(f"{'all':12s} {len(ids):3d} {totals[0]:8.2f} {totals[1]:8.2f} {totals[2]:9.2f} {totals[3]:13.2f}", file=out)
    print_groups(held_out, cases, "held out", out)
    for limit, errors in ((12.0, shipped), (12.0, held_out)):
        over = [i for i in ids if abs(errors[i]) > limit]
        which = "the shipped constants" if errors is shipped else "held out"
        listed = ", ".join(f"{i} {errors[i]:+.1f} %" for i in over) or "none"
        print(f"rows beyond {limit:g} % with {which}: {listed}", file=out)
    return {"sources": table, "all": totals, "refit": everything, "shipped": shipped, "held_out": held_out}


def fp8_speedups(out=sys.stdout) -> dict[str, float]:
    """Predicted FP8/BF16 tokens/s for every recipe on its default cluster of H100s."""
    speedups = {}
    print(f"{'recipe':10s} {'GPUs':>5s} {'bf16 tok/s/gpu':>15s} {'fp8 tok/s/gpu':>14s} {'speed-up':>9s}", file=out)
    for name, spec in RECIPES.items():
        cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, "h100-80gb")
        bf16 = estimate_throughput(spec.replace(precision="bf16"), cluster)
        fp8 = estimate_throughput(spec.replace(precision="fp8"), cluster)
        speedups[name] = fp8.tokens_per_s_per_gpu / bf16.tokens_per_s_per_gpu
        print(
            f"{name:10s} {cluster.world_size:5d} {bf16.tokens_per_s_per_gpu:15.0f} "
            f"{fp8.tokens_per_s_per_gpu:14.0f} {speedups[name]:8.2f}x",
            file=out,
        )
    return speedups


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--csv",
        type=Path,
        default=DEFAULT_CSV,
        help=f"measurements with the columns of calibration.csv (default: {DEFAULT_CSV})",
    )
    parser.add_argument("--subset", default="K22-", help="also summarise rows whose id starts with this (default K22-)")
    parser.add_argument("--verbose", "-v", action="store_true", help="print each row's assumptions and step breakdown")
    parser.add_argument("--no-cv", action="store_true", help="skip the refitting and the cross-validation")
    parser.add_argument(
        "--moe-csv",
        type=Path,
        default=MOE_CSV,
        help=f"Mixture-of-Experts rows, reported on their own after the dense ones (default: {MOE_CSV})",
    )
    parser.add_argument(
        "--recipes",
        action="store_true",
        help="print the predicted FP8 speed-up over BF16 for the five recipes on H100 instead",
    )
    args = parser.parse_args(argv)
    if args.recipes:
        fp8_speedups()
        return 0
    if not args.csv.is_file():
        parser.error(f"--csv {args.csv}: no such file")
    code = run_csv(args.csv, args.subset, args.verbose)
    if not args.no_cv and code == 0:
        cross_validate(args.csv)
    if args.moe_csv.is_file():
        run_moe(args.moe_csv, cross_validate=not args.no_cv)
    return code


if __name__ == "__main__":
    sys.exit(main())
