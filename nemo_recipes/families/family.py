"""What a model family is: the recipe-name prefix it owns, the name it shows, and where its rows' values come from."""

from __future__ import annotations

from typing import Any, Mapping

from nemo_recipes.errors import Problem
from nemo_recipes.frozen_dataclass import field, frozen_dataclass


@frozen_dataclass
class Family:
    """One model family. Its rows share the transformer arithmetic of `families.architecture`; what a family owns is
    its name (the recipe prefix, and the display name that prefixes its NeMo config classes and help) and the sources
    of the values in which its rows differ from the catalog's defaults."""

    prefix: str
    display_name: str
    summary: str  # one line for help texts: what the family's architecture is
    sources: Mapping[str, str] = field(default_factory=dict)
    #: The Hugging Face class its checkpoints convert to and from, and the tensor mapping both ways (`GPT2Mapping`,
    #: `LlamaMapping` in the family modules).
    hf: Any = None
    #: The family's catalog rows as `RecipeSpec` keyword arguments (this layer sits below the catalog, which builds
    #: and collects them into `catalog.RECIPES`); the GPT and Llama rows are still written in catalog.py.
    rows: tuple[Mapping[str, Any], ...] = ()


def values_not_held(
    spec: Any, architecture: str, wanted: Mapping[str, tuple[Any, str]], as_name: str, instead: str
) -> list[Problem]:
    """The recipe fields whose value the Hugging Face class `architecture` cannot hold: `wanted` maps a field to
    (the only value the class holds, why), `as_name` names the class's family and `instead` the recipes to export."""
    return [
        Problem(
            field,
            getattr(spec, field),
            f"{architecture} cannot hold this model: {why}.",
            f"train with {field}={value} to export as {as_name}, or export {instead}.",
        )
        for field, (value, why) in wanted.items()
        if getattr(spec, field) != value
    ]
