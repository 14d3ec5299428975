"""Executor presets (local, Slurm, Kubernetes), cluster profiles and the recipe plugin.

The only package that imports NeMo-Run executors. Names are imported on first use, so that reading cluster
profiles (`nemo_recipes.executors.profiles`) stays cheap.

    from nemo_recipes.executors import slurm, RecipePlugin
    executor = slurm(account="my_account", partition="batch", nodes=4, gpu="h100")
"""

from __future__ import annotations

import importlib
from typing import Any

from nemo_recipes.executors.registry import PRESETS

_LAZY = {
    **PRESETS,  # each preset's function, `slurm(...)`, from its module
    "RecipePlugin": "nemo_recipes.executors.plugin",
    "plan_env": "nemo_recipes.executors.plugin",
    "ClusterProfile": "nemo_recipes.executors.profiles",
    "load_profiles": "nemo_recipes.executors.profiles",
    "get_profile": "nemo_recipes.executors.profiles",
    "executor_for": "nemo_recipes.executors.profiles",
    "profiles_path": "nemo_recipes.executors.profiles",
    "DEFAULT_IMAGE": "nemo_recipes.executors._common",
    "DEFAULT_SECRETS": "nemo_recipes.executors.secrets",
    "render": "nemo_recipes.executors.render",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nemo_recipes.executors' has no attribute {name!r}")
    value = importlib.import_module(module) if name == "render" else getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
