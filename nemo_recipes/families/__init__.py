"""Model families, one module each (`gpt`, `llama`, `qwen3`): each owns its rows, the sources of their values, the
blocks its layers are made of (`blocks`) and its Hugging Face mapping (`hf_mapping`); `registry` holds them by name
and `architecture` composes a row's blocks into the model Megatron-Core builds.

Standard library only: the catalog, the planner and the fast CLI verbs read it.
"""

from __future__ import annotations

from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.family import Family
from nemo_recipes.families.registry import DEFAULT, REGISTRY, custom_name, family_of, get_family, mapping_of

__all__ = [
    "DEFAULT",
    "REGISTRY",
    "Architecture",
    "Family",
    "custom_name",
    "family_of",
    "get_family",
    "mapping_of",
]
