"""Model families, one module each (`gpt`, `llama`, `qwen3`): the registry that maps a recipe name's prefix to its
family.

Standard library only: the catalog, the planner and the fast CLI verbs read it. A new family is one module with a
`FAMILY` and one line in `REGISTRY`.
"""

from __future__ import annotations

from nemo_recipes.errors import InvalidInputError, Problem, did_you_mean
from nemo_recipes.families import gpt, llama, qwen3
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.family import Family

#: Recipe-name prefix -> family, in the order listings show them.
REGISTRY: dict[str, Family] = {family.prefix: family for family in (gpt.FAMILY, llama.FAMILY, qwen3.FAMILY)}


def get_family(name: str) -> Family:
    """The family called `name` (a recipe-name prefix), or an error naming the known ones."""
    if isinstance(name, str) and name in REGISTRY:
        return REGISTRY[name]
    hint = did_you_mean(name, REGISTRY) if isinstance(name, str) else ""
    raise InvalidInputError(
        [Problem("family", name, f"unknown model family{hint}.", f"use one of: {', '.join(REGISTRY)}.")]
    )


def family_of(recipe_name: str) -> str:
    """The family a recipe name belongs to: its prefix when that names a family; GPT otherwise, the family whose
    values are the catalog's defaults (a custom shape such as 'custom' builds a GPT unless it says otherwise)."""
    prefix = recipe_name.split("_", 1)[0]
    return prefix if prefix in REGISTRY else gpt.FAMILY.prefix


__all__ = ["REGISTRY", "Architecture", "Family", "family_of", "get_family"]
