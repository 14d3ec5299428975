"""nemo-recipes: GPT pretraining recipes for NVIDIA NeMo 2 / Megatron, executor presets, and a planner.

`import nemo_recipes` is light: the catalog and the planner are plain Python. The NeMo-facing names (model configs
and recipe factories) are imported on first use, so listing and planning never pay NeMo's import time.
"""

from __future__ import annotations

from typing import Any

from nemo_recipes._version import __version__ as __version__  # re-exported: nemo_recipes.__version__
from nemo_recipes.catalog import RECIPES, RecipeSpec, closest_recipe, config_class_name, get_recipe, recipe_names
from nemo_recipes.errors import (
    InputError,
    InvalidConfigError,
    InvalidInputError,
    InvalidRecipeError,
    NemoRecipesError,
    Problem,
    RecipeError,
    RunFailedError,
)

# name -> module that defines it; imported lazily by __getattr__ (they import NeMo / NeMo-Run).
_LAZY = {
    **{config_class_name(spec): "nemo_recipes.training.model" for spec in RECIPES.values()},
    "model_config": "nemo_recipes.training.model",
    **{name: "nemo_recipes.training.factories" for name in RECIPES},
    "build_recipe": "nemo_recipes.training.factories",
    "smoke": "nemo_recipes.smoke_training.runner",
}

__all__ = [
    "RECIPES",
    "RecipeSpec",
    "closest_recipe",
    "config_class_name",
    "get_recipe",
    "recipe_names",
    "NemoRecipesError",
    "InputError",
    "InvalidInputError",
    "InvalidConfigError",
    "RunFailedError",
    "Problem",
    "InvalidRecipeError",  # deprecated alias of InvalidInputError
    "RecipeError",  # deprecated alias of InputError
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nemo_recipes' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
