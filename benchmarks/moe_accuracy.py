"""How close the planner comes to published Mixture-of-Experts training throughput, on its own and held out.

    python benchmarks/moe_accuracy.py                  # benchmarks/data/moe_rows.csv
    python benchmarks/planner_accuracy.py              # prints this section after the dense rows

`moe_rows.csv` holds NVIDIA's published MoE pretraining rows (Megatron-Bridge 26.02 and 25.11, NeMo 25.04; each
row names its source URL), each on a catalog row's architecture (`recipe`) with the published layout, batch,
sequence, precision and GPU count; routing is force-balanced and dropless in every one of them, so the planner's
`moe_imbalance` stays 1.0. Rows whose recipe the catalog does not have yet are printed as skipped.

The dense constants are the shipped ones (fitted on the dense rows of calibration.csv). The three constants only
MoE rows move, `grouped_gemm`, `ep_overlap` and `moe_layer_latency` (`ModelConstants`), are refitted on the MoE rows
(`MOE_GRID`), in sample and leaving each source out: each source is scored with them fitted on the other sources'
rows.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.published_rows import moe_plan_from_row, stack_from_row  # noqa: E402
from nemo_recipes.errors import InvalidInputError  # noqa: E402
from nemo_recipes.plan.calibration import Case, held_out_errors, refit  # noqa: E402
from nemo_recipes.plan.throughput import CONSTANTS, ModelConstants  # noqa: E402

MOE_CSV = REPO / "benchmarks" / "data" / "moe_rows.csv"
#: The grid the MoE constants are refitted on (the dense ones stay as shipped).
MOE_GRID: dict[str, tuple[float, ...]] = {
    "grouped_gemm": tuple(round(0.30 + 0.02 * i, 2) for i in range(36)),  # 0.30 .. 1.00
    "ep_overlap": tuple(round(0.05 * i, 2) for i in range(21)),  # 0 .. 1
    "moe_layer_latency": tuple(round(0.0005 * i, 4) for i in range(25)),  # 0 .. 12 ms
}


def moe_case(row: dict[str, Any]) -> Case:
    """A row of moe_rows.csv as a Case (tokens/s per GPU), or InvalidInputError saying why it cannot be."""
    spec, cluster, assumptions = moe_plan_from_row(row)
    stack, why = stack_from_row(row)
    return Case(
        id=str(row.get("id") or ""),
        source=str(row.get("id") or "").split("-")[0],
        spec=spec,
        cluster=cluster,
        stack=stack,
        metric="tok/s/gpu",
        published=float(row["target_value"]),
        assumptions=tuple(assumptions + why),
    )


def _mean(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)


def _constants(constants: ModelConstants) -> str:
    return ", ".join(f"{name} {getattr(constants, name):g}" for name in MOE_GRID)


def run_moe(path: Path = MOE_CSV, out=sys.stdout, cross_validate: bool = True) -> dict[str, Any]:
    """Print the MoE rows against the planner (shipped constants), then the leave-one-source-out errors."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    cases: list[Case] = []
    print("", file=out)
    print("Mixture-of-Experts rows (tokens/s per GPU; shipped constants)", file=out)
    print(f"{'id':58s} {'predicted':>10s} {'published':>10s} {'error':>8s}  mfu", file=out)
    for row in rows:
        try:  # a recipe the catalog lacks, or a layout the planner cannot lay out (uneven stages it cannot state)
            c = moe_case(row)
            result = c.predict()
        except InvalidInputError as error:
            print(f"{row.get('id', '')[:58]:58s} skipped: {str(error).splitlines()[-1].strip()[:160]}", file=out)
            continue
        cases.append(c)
        error = 100.0 * (result.tokens_per_s_per_gpu - c.published) / c.published
        print(f"{c.id[:58]:58s} {result.tokens_per_s_per_gpu:10.0f} {c.published:10.0f} {error:+7.1f}%  "
              f"{result.mfu:.3f}", file=out)  # fmt: skip
    if not cases:
        return {}
    shipped = {c.id: c.error_pct(CONSTANTS) for c in cases}
    print(f"MoE rows, shipped constants: n={len(cases)} mean |error| {_mean(list(shipped.values())):.2f} %", file=out)
    if not cross_validate:
        return {"shipped": shipped}
    everything = refit(cases, start=CONSTANTS, grid=MOE_GRID, restarts=())
    held_out, folds = held_out_errors(cases, lambda c: c.source, start=everything, grid=MOE_GRID, restarts=())
    print("MoE leave-one-source-out (the MoE constants refitted without the source's rows):", file=out)
    print(f"  refitted on every MoE row: {_constants(everything)}", file=out)
    print(f"  {'source':12s} {'n':>3s} {'shipped':>8s} {'refit':>8s} {'held out':>9s}  constants without it", file=out)
    sources: dict[str, tuple[float, float, float]] = {}
    for source, fold in folds.items():
        ids = [c.id for c in cases if c.source == source]
        sources[source] = (
            _mean([shipped[i] for i in ids]),
            _mean([cases_error for c in cases if c.id in ids for cases_error in [c.error_pct(everything)]]),
            _mean([held_out[i] for i in ids]),
        )
        row = sources[source]
        print(f"  {source:12s} {len(ids):3d} {row[0]:8.2f} {row[1]:8.2f} {row[2]:9.2f}  {_constants(fold)}", file=out)
    total = _mean(list(held_out.values()))
    print(f"MoE rows held out (leave-one-source-out): n={len(cases)} mean |error| {total:.2f} %, max "
          f"{max(abs(e) for e in held_out.values()):.2f} %", file=out)  # fmt: skip
    return {"shipped": shipped, "held_out": held_out, "refit": everything, "sources": sources}


def main(argv: Optional[list[str]] = None) -> int:
    path = Path(argv[0]) if argv else MOE_CSV
    return 0 if run_moe(path) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
