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
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers (at run time __getattr__ imports them)
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

#: module -> the public names it defines.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "nemo_recipes.catalog": ("closest_recipe",),
    "nemo_recipes.plan.assess": ("assess", "with_estimates"),
    "nemo_recipes.plan.fit": ("FitResult", "advise", "best", "fit", "fit_closest", "smallest_cluster"),
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
    "nemo_recipes.plan.validate": ("RULES", "validate"),
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


class _Planner(types.ModuleType):
    """This package, keeping its public functions `assess`, `fit` and `validate` when their submodules load.

    Importing a submodule binds it to the package attribute of the same name, which would make
    `from nemo_recipes.plan import validate` the module `plan/validate.py` once anything had imported it; the function
    was the public name when this package imported everything at once, and stays it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _MODULE_OF and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Planner
