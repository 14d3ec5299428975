"""The run's figures beside the planner's prediction for the same recipe on the GPU it ran on, with the deviation,
and the plan's largest step terms when the gap is large (the terms that could explain it). Fast path only."""

from __future__ import annotations

from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.throughput import estimate_throughput
from nemo_recipes.watching.figures import Figures

#: A measured step time this far from the plan's (either way) is worth a warning.
WARN_DEVIATION = 0.15
#: Plan terms named in the warning: those above this share of the planned step.
TERM_SHARE = 0.10


def against_plan(result: Figures, spec: RecipeSpec, gpu: str, stack: Optional[str] = None) -> dict[str, Any]:
    """{gpu, figures: {name: {measured, planned, deviation}}, warnings}, the plan timed for the program `stack` makes
    of the recipe (default: the NeMo container). Raises InvalidInputError for a GPU the planner does not know or a
    plan it refuses (field, value, fix)."""
    plan = estimate_throughput(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node, gpu), stack=stack)
    measured = {
        "step_time_s": result.step_time_s,
        "tokens_per_s_per_gpu": result.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": result.model_tflops_per_gpu,
        "mfu": result.model_tflops_per_gpu / (plan.model_tflops_per_gpu / plan.mfu)
        if result.model_tflops_per_gpu is not None
        else None,
    }
    planned = {
        "step_time_s": plan.step_time_s,
        "tokens_per_s_per_gpu": plan.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": plan.model_tflops_per_gpu,
        "mfu": plan.mfu,
    }
    figures = {
        name: {"measured": value, "planned": planned[name], "deviation": _deviation(value, planned[name])}
        for name, value in measured.items()
    }
    warnings = []
    deviation = figures["step_time_s"]["deviation"]
    if deviation is not None and abs(deviation) > WARN_DEVIATION:
        terms = [
            f"{term} is {seconds / plan.step_time_s:.0%} of the planned step"
            for term, seconds in plan.terms_s.items()
            if seconds / plan.step_time_s >= TERM_SHARE
        ]
        warnings.append(
            f"step time {deviation:+.0%} against the plan on {plan.gpu}; the plan's largest terms: " + "; ".join(terms)
        )
    return {"gpu": plan.gpu, "figures": figures, "warnings": warnings}


def _deviation(measured: "float | None", planned: float) -> "float | None":
    return None if measured is None else measured / planned - 1
