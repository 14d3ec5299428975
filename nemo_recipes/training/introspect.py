"""Read a `RecipeSpec` back from a recipe `run.Partial`, after any overrides a user made on the Partial itself
(`recipe.trainer.num_nodes = 8`, `trainer.strategy.tensor_model_parallel_size=4` on the command line).

The executor plugin and the CLI use this to plan what will actually run, not what the catalog row said. Which
configuration path holds which field, and how a value converts, is the field table's (`recipe_fields`, read through
`nemo_fields.read_fields`): the same paths the recipe was built from.
"""

from __future__ import annotations

from typing import Any

from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.training.model import CONFIG_CLASSES
from nemo_recipes.training.nemo_fields import MISSING, lookup, read_fields, settled

_RECIPE_OF_CLASS: dict[Any, str] = {cls: name for name, cls in CONFIG_CLASSES.items()}


def spec_from_partial(partial: Any) -> RecipeSpec:
    """The spec that `partial` (a recipe of ours, possibly edited) describes."""
    model_config = lookup(partial, "model.config")
    if any(lookup(partial, path) in (None, MISSING) for path in ("model.config", "trainer.strategy")):
        raise InvalidInputError(
            [
                Problem(
                    "recipe",
                    type(partial).__name__,
                    "is not a pretraining recipe with model.config and trainer.strategy.",
                    "pass a recipe built by nemo_recipes (e.g. nemo_recipes.gpt_7b()).",
                )
            ]
        )
    base = RECIPES.get(_RECIPE_OF_CLASS.get(getattr(model_config, "__fn_or_cls__", None), "custom"))
    values = read_fields(partial)
    if base is not None:
        spec = base.replace(**values)
    else:
        spec = RecipeSpec(name="custom", size_label="custom", max_lr=values.pop("max_lr", 1e-4), **values)
    return settled(spec)
