"""The planner: validate a recipe against a cluster, estimate memory and throughput, fit it to hardware.

Pure Python (standard library only): no nemo, torch, megatron or nemo_run import, so the CLI answers at once.

    from nemo_recipes.plan import Cluster, validate, fit
    report = validate(get_recipe("gpt_7b"), Cluster.of(1, 8, "h100"))
    report.valid, report.memory.total, report.to_dict()
    fit(get_recipe("gpt_70b"), Cluster.of(2, 8, "h200")).changes
    best(get_recipe("gpt_7b"), Cluster.of(1, 8, "b200")).explanation
"""

from nemo_recipes.catalog import closest_recipe
from nemo_recipes.plan.assess import assess, with_estimates
from nemo_recipes.plan.fit import FitResult, advise, best, fit, fit_closest, smallest_cluster
from nemo_recipes.plan.hardware import GPU, GPUS, Cluster, get_gpu
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.memory import (
    ActivationBreakdown,
    MemoryBreakdown,
    activation_memory,
    estimate_memory,
    layer_activation_bytes,
    state_bytes_per_param,
)
from nemo_recipes.plan.report import Advice, Change, PlanReport
from nemo_recipes.plan.stack import STACK_CHOICES, Program, program_for, resolve_stack
from nemo_recipes.plan.validate import RULES, validate

__all__ = [
    "ActivationBreakdown",
    "Advice",
    "Change",
    "Cluster",
    "FitResult",
    "GPU",
    "GPUS",
    "Layout",
    "MemoryBreakdown",
    "PlanReport",
    "Program",
    "RULES",
    "STACK_CHOICES",
    "activation_memory",
    "advise",
    "assess",
    "best",
    "closest_recipe",
    "estimate_memory",
    "fit",
    "fit_closest",
    "get_gpu",
    "layer_activation_bytes",
    "program_for",
    "resolve_stack",
    "smallest_cluster",
    "state_bytes_per_param",
    "validate",
    "with_estimates",
]
