"""What a model family is: its name, its rows with the sources of their values, the blocks its layers are made of and
its Hugging Face class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from nemo_recipes.families.blocks import Block, LayerGroup, dense_layer

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping


@dataclass(frozen=True)
class Family:
    """One model family, one module under `families/`. `rows` are its recipes (name -> the RecipeSpec values of the
    row; `catalog.RECIPES` collects them), `sources` where each value in which its rows differ from the catalog's
    field defaults comes from, `layer` the blocks one decoder layer is made of for a spec (`families.blocks`), or
    `layers` the groups of layers in order where they differ (`LayerGroup`: "the first k dense, then experts"), and
    `mapping` builds its Hugging Face class and the mapping both conversions read (`hf`)."""

    name: str
    display_name: str  # prefixes its NeMo config classes and help texts
    summary: str  # one line for help texts: what the family's architecture is
    rows: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    layer: Callable[[Any], tuple[Block, ...]] = dense_layer
    #: Builds the family's Hugging Face mapping (None: it converts to no Hugging Face class). A function, called at
    #: first use and cached by the family module, because defining the mapping's classes costs every start of the
    #: fast CLI verbs 4 ms, and only the conversions read them.
    mapping: Optional[Callable[[], HFMapping]] = None
    layers: Optional[Callable[[Any], tuple[LayerGroup, ...]]] = None
    #: The NeMo model config class its rows' config classes extend, by import path (`training.model`); None: NeMo's
    #: GPTConfig. A family whose layers need another Megatron-Core config (multi-latent attention's
    #: MLATransformerConfig) names NeMo's class for it, whose values the recipe fields do not set stay NeMo's.
    nemo_config: Optional[str] = None

    @property
    def hf(self) -> Optional[HFMapping]:
        """Its Hugging Face mapping, or None."""
        return None if self.mapping is None else self.mapping()

    def pattern(self, spec: Any) -> tuple[LayerGroup, ...]:
        """The spec's decoder layers as groups of alike layers, first to last: `layers`' groups, or every layer
        `layer`'s blocks."""
        if self.layers is not None:
            return self.layers(spec)
        return (LayerGroup(spec.num_layers, self.layer(spec)),)
