"""The planner: validate a recipe against a cluster, estimate memory and throughput, fit it to hardware.

Pure Python (standard library only): no nemo, torch, megatron or nemo_run import, so the CLI answers at once.

    from nemo_recipes.plan import Cluster, validate, fit
    report = validate(get_recipe("gpt_7b"), Cluster.of(1, 8, "h100"))
    report.valid, report.memory.total, report.to_dict()
    fit(get_recipe("gpt_70b"), Cluster.of(2, 8, "h200")).changes
    best(get_recipe("gpt_7b"), Cluster.of(1, 8, "b200")).explanation

The names below are imported on first use: `import nemo_recipes.plan.layout` (what `nemo-recipes show` needs) loads
the layout and the GPU table, not the throughput model and the search.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the public names, re-exported for type checkers)

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers (at run time __getattr__ imports them)
    from nemo_recipes.catalog import closest_recipe
    from nemo_recipes.plan.assessment import assess, with_estimates
    from nemo_recipes.plan.fitting import FitResult, advise, best, fit, fit_closest, smallest_cluster
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
    from nemo_recipes.plan.rules import RULES
    from nemo_recipes.plan.stack import STACK_CHOICES, Program, program_for, resolve_stack
    from nemo_recipes.plan.validation import validate

#: module -> the public names it defines.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "nemo_recipes.catalog": ("closest_recipe",),
    "nemo_recipes.plan.assessment": ("assess", "with_estimates"),
    "nemo_recipes.plan.fitting": ("FitResult", "advise", "best", "fit", "fit_closest", "smallest_cluster"),
    "nemo_recipes.plan.hardware": ("GPU", "GPUS", "Cluster", "get_gpu"),
    "nemo_recipes.plan.layout": ("Layout",),
    "nemo_recipes.plan.memory": (
        "ActivationBreakdown",
        "MemoryBreakdown",
        "activation_memory",
        "estimate_memory",
        "layer_activation_bytes",
        "state_bytes_per_param",
    ),
    "nemo_recipes.plan.report": ("Advice", "Change", "PlanReport"),
    "nemo_recipes.plan.stack": ("STACK_CHOICES", "Program", "program_for", "resolve_stack"),
    "nemo_recipes.plan.rules": ("RULES",),
    "nemo_recipes.plan.validation": ("validate",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
