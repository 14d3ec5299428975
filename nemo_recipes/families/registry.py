"""The families, by name, and which family each catalog row belongs to: a row names its family by being one of the
family module's `ROWS`, never through the spelling of its name.

Standard library only: the catalog, the planner and the fast CLI verbs read it. A new family is one module with a
`FAMILY` and its name in `REGISTRY` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nemo_recipes.errors import InvalidInputError, Problem, did_you_mean
from nemo_recipes.families import deepseek, gpt, llama, mixtral, qwen3, qwen3_moe
from nemo_recipes.families.family import Family

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping

#: Family name -> family, in the order listings show them. The first is the default: its values are the catalog's
#: field defaults, so a shape that names no row of a family (a custom one) is built as one of its models.
REGISTRY: dict[str, Family] = {
    family.name: family
    for family in (gpt.FAMILY, llama.FAMILY, qwen3.FAMILY, mixtral.FAMILY, qwen3_moe.FAMILY, deepseek.FAMILY)
}
DEFAULT = gpt.FAMILY.name

#: Recipe name -> the name of its family.
ROW_FAMILY: dict[str, str] = {row: family.name for family in REGISTRY.values() for row in family.rows}


def get_family(name: str) -> Family:
    """The family called `name`, or an error naming the known ones."""
    if isinstance(name, str) and name in REGISTRY:
        return REGISTRY[name]
    hint = did_you_mean(name, REGISTRY) if isinstance(name, str) else ""
    raise InvalidInputError(
        [Problem("family", name, f"unknown model family{hint}.", f"use one of: {', '.join(REGISTRY)}.")]
    )


def mapping_of(name: str) -> HFMapping:
    """The Hugging Face mapping of the family called `name`, or the problem that it converts to none."""
    mapping = get_family(name).hf
    if mapping is None:
        raise InvalidInputError(
            [
                Problem(
                    "family",
                    name,
                    "has no Hugging Face class to convert to or from.",
                    f"convert a recipe of one of: {', '.join(n for n, f in REGISTRY.items() if f.mapping)}.",
                )
            ]
        )
    return mapping


def custom_name(family: str) -> str:
    """The name of a custom shape built on `family`'s choices (`plan --custom --family NAME`): `custom` for the
    default family, `<family>_custom` for the others; `family_of` knows each of them."""
    return "custom" if family == DEFAULT else f"{family}_custom"


#: A custom shape's name -> its family.
CUSTOM_FAMILY: dict[str, str] = {custom_name(name): name for name in REGISTRY}


def family_of(recipe_name: str) -> str:
    """The family of the catalog row `recipe_name`, or of the custom shape so named (`custom_name`); the default
    family for any other name (a renamed spec, which takes the catalog defaults)."""
    return ROW_FAMILY.get(recipe_name) or CUSTOM_FAMILY.get(recipe_name, DEFAULT)
