"""The planner: validate a recipe against a cluster, estimate memory and throughput, fit it to hardware.

Pure Python (standard library only): no nemo, torch, megatron or nemo_run import, so the CLI answers at once.

    from nemo_recipes.plan import Cluster, validate, fit
    report = validate(get_recipe("gpt_7b"), Cluster.of(1, 8, "h100"))
    report.valid, report.memory.total, report.to_dict()
    fit(get_recipe("gpt_70b"), Cluster.of(2, 8, "h200")).changes
"""

from nemo_recipes.catalog import closest_recipe
from nemo_recipes.plan.assess import assess, with_estimates
from nemo_recipes.plan.fit import FitResult, fit, fit_closest, layout_cost, smallest_cluster
from nemo_recipes.plan.hardware import GPU, GPUS, Cluster, get_gpu
from nemo_recipes.plan.memory import (
    ActivationBreakdown,
    MemoryBreakdown,
    activation_memory,
    estimate_memory,
    layer_activation_bytes,
    state_bytes_per_param,
)
from nemo_recipes.plan.report import Change, PlanReport
from nemo_recipes.plan.validate import RULES, validate

__all__ = [
    "ActivationBreakdown", "Change", "assess", "with_estimates", "Cluster", "FitResult", "GPU", "GPUS", "MemoryBreakdown", "PlanReport", "RULES",
    "activation_memory", "closest_recipe", "estimate_memory", "fit", "fit_closest", "get_gpu", "layer_activation_bytes",
    "layout_cost", "smallest_cluster", "state_bytes_per_param", "validate",
]
