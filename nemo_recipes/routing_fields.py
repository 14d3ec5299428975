"""The recipe fields of DeepSeek-style routing, in `recipe_fields`' table after the expert fields (`expert_fields`):
group-limited routing, the routed experts' scaling factor, the expert bias's update rate (DeepSeek-V3,
arXiv:2412.19437, Sec. 2.1.2) and the leading layers that keep a dense MLP. Megatron-Core's names and defaults
(TransformerConfig), each `experts_only`: a dense recipe neither shows, writes nor reads them. Standard library only:
it is on the fast path.
"""

from __future__ import annotations

from typing import Any

from nemo_recipes.field_limits import COUNT_MAX, Limit, RecipeField, count

_MCORE = "Megatron-Core 0.15's TransformerConfig default"


def _routing(name: str, help: str, source: str, limits: tuple[Limit, ...] = (), **more: Any) -> RecipeField:
    nemo: tuple[str, ...] = more.pop("nemo", (f"model.config.{name}",))
    return RecipeField(name, "model", help, source, limits, nemo=nemo, experts_only=True, **more)


_POSITIVE = (Limit(">", 0, "must be positive or unset.", "set {name} to e.g. 2.5 (DeepSeek-V3), or None."),)
_RATE = (
    Limit(">", 0, "must be positive: the step the expert bias moves by.", "set {name} to e.g. 1e-3 (DeepSeek-V3)."),
    Limit("<", 1, "must be below 1: the expert bias would swing past any balance.", "set {name} to e.g. 1e-3."),
)

#: After `EXPERT_MODEL_FIELDS`, in `RecipeSpec`'s order.
ROUTING_FIELDS: tuple[RecipeField, ...] = (
    _routing("moe_router_num_groups", "groups the experts are split into for group-limited routing; unset: none",
             f"none: no group-limited routing ({_MCORE})", count(COUNT_MAX, optional=True)),
    _routing("moe_router_group_topk", "groups each token's experts may come from (group-limited routing)",
             f"none: no group-limited routing ({_MCORE})", count(COUNT_MAX, optional=True)),
    _routing("moe_router_topk_scaling_factor", "factor the routed experts' weights are scaled by; unset: 1",
             f"none: unscaled ({_MCORE})", _POSITIVE),
    _routing("moe_router_bias_update_rate", "step by which the expert bias moves towards balance after each "
             "batch (moe_router_enable_expert_bias)", f"1e-3: {_MCORE}", _RATE),
    _routing("moe_first_dense_layers", "leading layers with a dense MLP of ffn_hidden_size in place of experts",
             "0: every layer has experts (Megatron-Core's moe_layer_freq default, 1)", (Limit(">=", 0, "must be at "
             "least 0.", "set {name} to e.g. 3 (DeepSeek-V3) or 0."), Limit("<=", COUNT_MAX, "is far beyond any "
             "model's layers.", "set {name} below num_layers.")), nemo=("model.config.moe_layer_freq",),
             conversion="moe_layer_freq"),
)  # fmt: skip
