"""The GPT family: GPT-3's architecture (learned positions, LayerNorm, GELU MLP, biases, tied embeddings). Its values
are the catalog's field defaults, so their sources are the catalog's `SOURCES`, and it adds none of its own."""

from __future__ import annotations

from nemo_recipes.families.family import Family

FAMILY = Family(
    prefix="gpt",
    display_name="GPT",
    summary="GPT-3 architecture: learned positions, LayerNorm, GELU MLP, biases, tied embeddings",
)
