"""The recipe fields of multi-latent attention (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1) and multi-token prediction
(DeepSeek-V3, arXiv:2412.19437, Sec. 2.2), in `recipe_fields`' table after `qk_layernorm`: Megatron-Core's names and
defaults (MLATransformerConfig, TransformerConfig), each meaningful only where MLA (`kv_lora_rank`) or MTP
(`mtp_num_layers`) is set (`RecipeField.applies_when`), so a model without them neither shows, writes nor reads them.
Standard library only: it is on the fast path.
"""

from __future__ import annotations

from nemo_recipes.field_limits import COUNT_MAX, SIZE_MAX, Limit, RecipeField, count


def _model(name: str, help: str, source: str, limits: tuple[Limit, ...], applies_when: str) -> RecipeField:
    return RecipeField(name, "model", help, source, limits, nemo=(f"model.config.{name}",), applies_when=applies_when)


_MLA = "Megatron-Core 0.15's MLATransformerConfig default"
_MTP = "none: no multi-token prediction (Megatron-Core's TransformerConfig default)"
#: After `qk_layernorm`, in `RecipeSpec`'s order.
LATENT_ATTENTION_FIELDS = tuple(
    _model(name, help, source, count(limit, optional=optional), when)
    for name, help, source, limit, optional, when in (
        ("q_lora_rank", "rank the queries are compressed to (multi-latent attention); unset: queries straight from "
         "the hidden state", "none: no query compression (DeepSeek-V2-Lite)", SIZE_MAX, True, "kv_lora_rank"),
        ("kv_lora_rank", "rank of the keys' and values' shared compression; set: multi-latent attention in place of "
         "multi-head attention", "none: multi-head or grouped-query attention", SIZE_MAX, True, "kv_lora_rank"),
        ("qk_head_dim", "channels of each query and key head without position (multi-latent attention)",
         f"128: {_MLA}", COUNT_MAX, False, "kv_lora_rank"),
        ("qk_pos_emb_head_dim", "rotary channels of each query head and of the one key all heads share "
         "(multi-latent attention)", f"64: {_MLA}", COUNT_MAX, False, "kv_lora_rank"),
        ("v_head_dim", "channels of each value head (multi-latent attention)", f"128: {_MLA}", COUNT_MAX, False,
         "kv_lora_rank"),
        ("mtp_num_layers", "multi-token prediction layers (each one more decoder layer predicting a token further "
         "ahead, in training only); unset: none", _MTP, COUNT_MAX, True, "mtp_num_layers"),
    )
) + (
    _model("mtp_loss_scaling_factor", "weight of the multi-token prediction loss beside the language-model loss",
           "none: no multi-token prediction (Megatron-Core's default)", (Limit(">", 0, "must be positive.",
           "set {name} to e.g. 0.1 (DeepSeek-V3's weight for its last 4.8T tokens)."),), "mtp_num_layers"),
)  # fmt: skip
