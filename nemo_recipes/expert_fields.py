"""The recipe fields of a Mixture-of-Experts model, in `recipe_fields`' table (which splices them in at their places
in `RecipeSpec`'s order): the experts and their router (model section, Megatron-Core's TransformerConfig names, so
that a user finds them where Megatron documents them) and the expert-parallel sizes (parallel section, NeMo's
MegatronStrategy). Each is `experts_only`: a dense recipe neither shows, writes nor reads them.

Every default is Megatron-Core 0.15's own (transformer_config.py, model_parallel_config.py), so that a dense model's
configuration reads back as the defaults; the MoE rows set theirs from NeMo 2.7.3's configs (`families/mixtral.py`,
`families/qwen3_moe.py`). Standard library only: it is on the fast path.
"""

from __future__ import annotations

from typing import Any

from nemo_recipes.field_limits import COUNT_MAX, SIZE_MAX, Limit, RecipeField, count

_MCORE = "Megatron-Core 0.15's TransformerConfig default"
_COEFF = (
    Limit(">=", 0, "must be at least 0: the weight of the balancing loss in the training loss.", "set {name} to "
          "e.g. 0.01 (Mixtral), 1e-3 (Qwen3-MoE) or 0 (no auxiliary loss)."),
    Limit("<=", 1, "is above 1: the balancing loss would outweigh the language-model loss.", "set {name} to e.g. "
          "0.01 (Mixtral) or 1e-3 (Qwen3-MoE)."),
)  # fmt: skip
_CAPACITY = (Limit(">", 0, "must be positive or unset (dropless).", "set {name} to e.g. 1.0, or None to drop none."),
             Limit("<=", COUNT_MAX, "is far beyond any expert's share of the tokens: most likely a typo.",
                   "set {name} to e.g. 1.0 to 2.0, or None to drop none."))  # fmt: skip
_IMBALANCE = (Limit(">=", 1, "must be at least 1: the busiest rank gets at least its even share.", "set {name} to "
                   "1.0 (force-balanced routing) or a measured ratio such as 1.2."),
              Limit("<=", 64, "is beyond any measured routing imbalance: most likely a typo.", "set {name} to a "
                    "measured ratio of the busiest rank's tokens to the mean, e.g. 1.2."))  # fmt: skip


def _expert(name: str, help: str, source: str, limits: tuple[Limit, ...] = (), **more: Any) -> RecipeField:
    """An expert field of Megatron-Core's TransformerConfig under its own name."""
    nemo: tuple[str, ...] = more.pop("nemo", (f"model.config.{name}",))
    return RecipeField(name, "model", help, source, limits, nemo=nemo, experts_only=True, **more)


def _parallel(name: str, help: str, source: str, nemo: str, optional: bool = False) -> RecipeField:
    """An expert-parallel size: NeMo's MegatronStrategy argument `nemo`."""
    limits = count(COUNT_MAX, optional=optional)
    return RecipeField(name, "parallel", help, source, limits, nemo=(f"trainer.strategy.{nemo}",), experts_only=True)


#: After the dense model's fields (`attention_dropout`), in `RecipeSpec`'s order.
EXPERT_MODEL_FIELDS: tuple[RecipeField, ...] = (
    _expert(
        "num_moe_experts",
        "routed experts per MoE layer; unset: a dense model",
        "none: a dense model (Megatron-Core's default)",
        count(COUNT_MAX, optional=True),
    ),
    _expert("moe_router_topk", "experts each token is routed to", f"2: {_MCORE}", count(COUNT_MAX)),
    _expert(
        "moe_ffn_hidden_size",
        "width of each routed expert's hidden layer; unset: ffn_hidden_size",
        f"none: ffn_hidden_size, as Megatron-Core sets it ({_MCORE})",
        count(SIZE_MAX, optional=True),
    ),
    _expert(
        "moe_shared_expert_intermediate_size",
        "width of the shared experts every token visits (all of them together); unset: none",
        f"none: no shared expert ({_MCORE})",
        count(SIZE_MAX, optional=True),
    ),
    _expert(
        "moe_router_score_function", "softmax or sigmoid: how the router turns logits into scores", f"softmax: {_MCORE}"
    ),
    _expert(
        "moe_router_pre_softmax",
        "scores over all experts before the top-k (softmax router), not after",
        f"off: softmax over the chosen top-k ({_MCORE})",
    ),
    _expert(
        "moe_router_load_balancing_type",
        "aux_loss, seq_aux_loss, sinkhorn or none: how routing is balanced",
        f"aux_loss: the GShard/Switch balancing loss ({_MCORE})",
    ),
    _expert("moe_aux_loss_coeff", "weight of the balancing loss", f"0: {_MCORE}", _COEFF),
    _expert(
        "moe_router_enable_expert_bias",
        "a per-expert bias that steers routing to balance the load, without a "
        "loss (DeepSeek-V3's; sigmoid scores only)",
        f"off: {_MCORE}",
    ),
    _expert(
        "moe_expert_capacity_factor",
        "tokens an expert takes, as a multiple of its even share; unset: dropless (every routed token is computed)",
        f"none: dropless ({_MCORE})",
        _CAPACITY,
    ),
    _expert(
        "moe_token_dispatcher_type",
        "allgather or alltoall: how tokens reach the experts over EP",
        f"allgather: {_MCORE} (the one that works on CPU: moe-cpu.md)",
    ),
    _expert("moe_grouped_gemm", "the local experts' GEMMs as one grouped GEMM (Transformer Engine)", f"off: {_MCORE}"),
    _expert("moe_permute_fusion", "fused token permutation (Transformer Engine >= 2.1)", f"off: {_MCORE}"),
)

#: After `pipeline_counts_embedding_and_loss`, in `RecipeSpec`'s order.
EXPERT_PARALLEL_FIELDS: tuple[RecipeField, ...] = (
    _parallel("expert_parallel", "expert-parallel size (EP): GPUs the routed experts are split over, whole experts "
              "each", "1: MegatronStrategy's expert_model_parallel_size default", "expert_model_parallel_size"),
    _parallel("expert_tensor_parallel", "expert-tensor-parallel size (ETP): GPUs each expert's matrices are split "
              "over; unset: TP", "none: the tensor-parallel size, as Megatron-Core's initialize_model_parallel "
              "takes it (parallel_state.py)", "expert_tensor_parallel_size", optional=True),
    RecipeField(
        "moe_imbalance",
        "parallel",
        "the planner's routing imbalance: tokens the busiest expert-parallel rank receives over the even share "
        "(1.0: force-balanced routing, as the published MoE benchmarks run)",
        "1.0: balanced routing (Megatron-Bridge's performance summaries: \"we force-balance the token distribution "
        "among experts\")",
        _IMBALANCE,
        not_in_nemo="the planner's assumption: the busiest EP rank sets the pace of every MoE layer; NeMo routes "
        "whatever the router decides",
        experts_only=True,
    ),
)  # fmt: skip
