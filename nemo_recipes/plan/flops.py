"""FLOPs of a GPT training step: the model FLOPs that MFU counts and the hardware FLOPs a GPU really executes.

Standard library only. Formulas and their sources are in `perf-model.md` section 2.2:

- Forward pass, per token and layer: QKV projection `2·h·(q + 2·g·d_h)`, attention scores `2·s·q`, attention over V
  `2·s·q`, output projection `2·q·h`, MLP `2·h·ffn·(2 if gated else 1) + 2·ffn·h`; plus `2·h·V` for the logits.
  Backward costs twice the forward. For a standard GPT (MHA, ffn = 4h, q = h) the sum is Korthikanti et al. 2022,
  Eq. 7: `72·l·h²·(1 + s/(6h) + V/(12·l·h))` per token, which is also Megatron-Core r0.8.0's
  `num_floating_point_operations`.
- Model FLOPs count neither recomputation nor a causal discount of the `s²` term (the convention of Korthikanti,
  Megatron-Core until 2025-03 and NeMo up to 25.04). Hardware FLOPs add recomputation: full recomputation repeats the
  forward of every layer but not the logits (Narayanan et al. 2021, Eq. 3, the 96-formula); selective recomputation
  repeats the attention core (Korthikanti Eq. 8).
"""

from __future__ import annotations

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.families.architecture import Architecture, TokenFlops
from nemo_recipes.plan.layout import Layout

MODEL_FLOPS_CONVENTION = (
    "Megatron 72-formula generalised to GQA/SwiGLU (Korthikanti et al. 2022 Eq. 7; Megatron-Core "
    "r0.8.0 num_floating_point_operations): padded vocabulary, no causal discount of the s^2 "
    "term, recomputation not counted"
)


def forward_flops_per_token(spec: RecipeSpec) -> TokenFlops:
    """Forward FLOPs per token of the whole model for `spec` (one sequence position, all layers): the family
    architecture's (`families.architecture.Architecture.forward_flops_per_token`)."""
    return Architecture.of(spec).forward_flops_per_token()


def model_flops_per_token(spec: RecipeSpec) -> float:
    """Model FLOPs per token (the MFU numerator): `MODEL_FLOPS_CONVENTION`."""
    return forward_flops_per_token(spec).model


def hardware_flops_per_token(spec: RecipeSpec) -> float:
    """FLOPs per token that the GPUs execute, recomputation included (still without a causal discount).

    Full recomputation adds a forward of every recomputed layer, not of the logits (Narayanan Eq. 3); selective adds
    the forward of the attention core, `4·s·h` per layer and token (Korthikanti Eq. 8 writes `s/(3h)` for the
    attention term, i.e. three times that; we count the work once)."""
    f = forward_flops_per_token(spec)
    extra = 0.0
    if spec.recompute == "full":
        extra = Layout.of(spec).recomputed_fraction(spec) * (f.dense + f.attention)
    elif spec.recompute == "selective":
        extra = f.attention
    return f.model + extra
