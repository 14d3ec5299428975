"""The recipe's model, precision and optimizer fields measured on what Megatron built in this rank (built_fields.py
lists them and judges them): the modules' shapes, classes and attributes and the optimizer's parameter groups, never
the config object they were built from. Each measure gives (seen, the recipe's value as this rank should show it), or
None where this rank holds no module that shows the field (a pipeline stage without the embedding). Imported inside
the training processes (torch, Megatron-Core)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from nemo_recipes.smoke_training.built_fields import ROUTER_FORWARD_FIELDS

Pair = Optional[tuple[Any, Any]]


def _one(values: set[Any]) -> Any:
    """The one value all modules show, or the sorted list of the different ones (which equals no recipe value)."""
    return next(iter(values)) if len(values) == 1 else sorted(map(repr, values))


def megatron_models(trainer: Any) -> list[Any]:
    """Megatron-Core's GPT modules of this rank, one per virtual pipeline chunk in chunk order, not NeMo's Lightning
    module of the same name: from the strategy's model (`trainer.model`, every chunk), as the Lightning module holds
    the first chunk only."""
    found = {
        id(m): m for m in trainer.model.modules() if type(m).__name__ == "GPTModel" and "megatron" in type(m).__module__
    }
    return list(found.values())


def _layers(models: list[Any]) -> list[Any]:
    return [m for model in models for m in model.modules() if type(m).__name__ == "TransformerLayer"]


class Built:
    """What one rank built: its GPT modules (one per virtual pipeline chunk), their layers, the optimizer parts."""

    def __init__(self, trainer: Any, parts: list[Any], recipe: dict[str, Any]):
        from megatron.core import parallel_state as ps

        self.recipe = recipe
        self.tp = ps.get_tensor_model_parallel_world_size()
        self.models = megatron_models(trainer)
        self.layers = _layers(self.models)
        self.parts = parts
        self.parameters = [p for model in self.models for p in model.parameters()]
        self.head = recipe["kv_channels"] or recipe["hidden_size"] // recipe["num_attention_heads"]

    def shapes(self, get: Callable[[Any], Any]) -> Any:
        return _one({get(layer) for layer in self.layers}) if self.layers else None

    def first(self) -> list[Any]:
        return [m for m in self.models if m.pre_process]

    def last(self) -> list[Any]:
        return [m for m in self.models if m.post_process]


def _num_layers(b: Built) -> Pair:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    count = torch.tensor([len(b.layers)], dtype=torch.long)
    if dist.is_initialized():  # a collective of the pipeline group: every rank measures
        dist.all_reduce(count, group=ps.get_pipeline_model_parallel_group())
    return int(count[0]), b.recipe["num_layers"]


def _proj(layer: Any) -> Any:
    return layer.self_attention.linear_proj.weight


def _hidden(b: Built) -> Pair:
    return b.shapes(lambda la: _proj(la).shape[0]), b.recipe["hidden_size"]


def _kv(b: Built) -> Pair:
    return b.shapes(lambda la: la.self_attention.hidden_size_per_attention_head), b.head


def _heads(b: Built) -> Pair:
    heads = b.shapes(lambda la: _proj(la).shape[1] * b.tp // la.self_attention.hidden_size_per_attention_head)
    return heads, b.recipe["num_attention_heads"]


def _groups(b: Built) -> Pair:
    def groups(layer: Any) -> int:
        attention = layer.self_attention
        keys_values = attention.linear_qkv.weight.shape[0] - _proj(layer).shape[1]
        return keys_values * b.tp // (2 * attention.hidden_size_per_attention_head)

    return b.shapes(groups), b.recipe["num_query_groups"] or b.recipe["num_attention_heads"]


def _moe(layer: Any) -> Optional[Any]:
    """The layer's Mixture-of-Experts MLP (a router and experts), or None for a dense MLP."""
    return layer.mlp if getattr(layer.mlp, "router", None) is not None else None


def _local_experts(moe: Any) -> list[Any]:
    """The routed experts this rank holds, each an MLP (SequentialMLP's; the CPU layer turns grouped GEMM off)."""
    return list(moe.experts.local_experts)


def _mlps(layer: Any) -> list[Any]:
    """Every MLP module of the layer: the dense one, or the local routed experts and the shared expert."""
    moe = _moe(layer)
    if moe is None:
        return [layer.mlp]
    return _local_experts(moe) + ([moe.shared_experts] if moe.shared_experts is not None else [])


def _ffn(b: Built) -> Pair:
    """Dense layers' MLP width; in a model of expert layers only, the experts' where they take ffn_hidden_size
    (moe_ffn_hidden_size unset), else nothing to show (the recipe's value is unused by such a model)."""
    dense = [la for la in b.layers if _moe(la) is None]
    if dense:
        return _one({la.mlp.linear_fc2.weight.shape[1] * b.tp for la in dense}), b.recipe["ffn_hidden_size"]
    experts = _expert_width(b)
    if experts is not None and b.recipe.get("moe_ffn_hidden_size") is None:
        return experts[0], b.recipe["ffn_hidden_size"]
    dense_expected = b.recipe.get("num_moe_experts") is None or (b.recipe.get("moe_first_dense_layers") or 0) > 0
    return None if dense_expected else (None, None)


def _activation(b: Built) -> Pair:
    from nemo_recipes.training.nemo_fields import ACTIVATIONS

    def activation(mlp: Any) -> str:
        gated = mlp.linear_fc1.weight.shape[0] == 2 * mlp.linear_fc2.weight.shape[1]
        function = mlp.activation_func
        found = [name for name, pair in ACTIVATIONS.items() if pair == (function, gated)]
        return found[0] if found else f"{getattr(function, '__name__', function)} gated={gated}"

    return b.shapes(lambda la: _one({activation(mlp) for mlp in _mlps(la)})), b.recipe["activation"]


def _seq_length(b: Built) -> Pair:
    lengths = {m.max_sequence_length for m in b.models}
    lengths |= {
        m.embedding.position_embeddings.weight.shape[0]
        for m in b.first()
        if getattr(m.embedding, "position_embeddings", None) is not None
    }
    return (_one(lengths), b.recipe["seq_length"]) if lengths else None


def _padded_rows(b: Built) -> Pair:
    rows = {m.embedding.word_embeddings.weight.shape[0] * b.tp for m in b.first()}
    rows |= {m.output_layer.weight.shape[0] * b.tp for m in b.last() if m.output_layer.weight is not None}
    multiple = b.recipe["make_vocab_size_divisible_by"] * b.tp
    return (_one(rows), math.ceil(b.recipe["vocab_size"] / multiple) * multiple) if rows else None


def _position_type(b: Built) -> Pair:
    kinds = set()
    for m in b.models:
        if getattr(m, "rotary_pos_emb", None) is not None:
            kinds.add("rope")
        elif m.pre_process:
            learned = getattr(m.embedding, "position_embeddings", None) is not None
            kinds.add("learned_absolute" if learned else "none")
    return (_one(kinds), b.recipe["position_embedding_type"]) if kinds else None


def _inverse_frequencies(b: Built) -> list[Any]:
    return [m.rotary_pos_emb.inv_freq for m in b.models if getattr(m, "rotary_pos_emb", None) is not None]


def _rotary_base(b: Built) -> Pair:
    """inv_freq[i] = base^(-2i / d) over the d rotated dimensions: base = inv_freq[1]^(-d / 2)."""
    rope = b.recipe["position_embedding_type"] == "rope"
    bases = {
        float(f.double()[1] ** (-len(f))) if len(f) > 1 else None for f in _inverse_frequencies(b)
    }  # len(f) = d / 2
    return (_one(bases) if bases else None), (float(b.recipe["rotary_base"]) if rope else None)


def _rotary_percent(b: Built) -> Pair:
    rope = b.recipe["position_embedding_type"] == "rope"
    shares = {2 * len(f) / b.head for f in _inverse_frequencies(b)}
    return (_one(shares) if shares else None), (float(b.recipe["rotary_percent"]) if rope else None)


def _norms(b: Built) -> list[Any]:
    names = ("input_layernorm", "pre_mlp_layernorm")
    found = [getattr(layer, n) for layer in b.layers for n in names]
    found += [m.decoder.final_layernorm for m in b.last() if getattr(m.decoder, "final_layernorm", None) is not None]
    return [n for n in found if type(n).__name__ != "IdentityOp"]


def _normalization(b: Built) -> Pair:
    kinds = {"RMSNorm" if "RMS" in type(n).__name__ else type(n).__name__.replace("Fused", "") for n in _norms(b)}
    return (_one(kinds), b.recipe["normalization"]) if kinds else None


def _norm_epsilon(b: Built) -> Pair:
    eps = {float(getattr(n, "eps", getattr(n, "epsilon", math.nan))) for n in _norms(b)}
    return (_one(eps), float(b.recipe["norm_epsilon"])) if eps else None


def _qk_layernorm(b: Built) -> Pair:
    def has(layer: Any) -> bool:
        norm = getattr(layer.self_attention, "q_layernorm", None)
        return norm is not None and type(norm).__name__ != "IdentityOp"

    return b.shapes(has), b.recipe["qk_layernorm"]


def _bias(b: Built) -> Pair:
    def biased(layer: Any) -> Any:
        linears = [
            layer.self_attention.linear_proj,
            *(m for mlp in _mlps(layer) for m in (mlp.linear_fc1, mlp.linear_fc2)),
        ]
        return _one({getattr(linear, "bias", None) is not None for linear in linears})

    return b.shapes(biased), b.recipe["add_bias_linear"]


def _shared(b: Built) -> Pair:
    shared = {
        m.output_layer.weight is None or bool(getattr(m.output_layer.weight, "shared_embedding", False))
        for m in b.last()
    }
    return (_one(shared), b.recipe["share_embeddings"]) if shared else None


def _hidden_dropout(b: Built) -> Pair:
    return b.shapes(lambda la: float(la.hidden_dropout)), float(b.recipe["hidden_dropout"])


def _attention_dropout(b: Built) -> Pair:
    return (
        b.shapes(lambda la: float(la.self_attention.core_attention.attention_dropout.p)),
        float(b.recipe["attention_dropout"]),
    )


def _precision(b: Built) -> Pair:
    dtypes = {str(p.dtype) for p in b.parameters}
    want = "torch.float16" if b.recipe["precision"] == "fp16" else "torch.bfloat16"  # fp8 keeps bf16 weights
    return _one(dtypes), want


def _groups_of(b: Built) -> list[dict[str, Any]]:
    return [group for part in b.parts for group in part.optimizer.param_groups]


def _max_lr(b: Built) -> Pair:
    rates = {float(g["max_lr"]) for g in _groups_of(b) if "max_lr" in g}
    return (_one(rates), float(b.recipe["max_lr"])) if rates else None


def _min_lr_ratio(b: Built) -> Pair:
    ratios = {float(g["min_lr"]) / float(g["max_lr"]) for g in _groups_of(b) if g.get("max_lr")}
    return (_one(ratios), float(b.recipe["min_lr_ratio"])) if ratios else None


# Mixture-of-Experts fields: measured on each expert layer's router, experts and dispatcher; (None, None) for a model
# without experts (neither has them). The router's settings that no shape shows are read from the router's own
# config, the object its forward pass reads them from at every step.
def _experts_only(b: Built, measure: Callable[[list[Any]], Any], want: Any) -> Pair:
    """(what every expert layer of this rank shows, `want`); (None, None) where neither the model nor the recipe
    has experts, None where this rank holds no expert layer."""
    moes = [m for m in (_moe(la) for la in b.layers) if m is not None]
    if b.recipe.get("num_moe_experts") is None:
        return (None, None) if not moes else ("expert layers in a dense recipe", want)
    return (_one({measure([m]) for m in moes}), want) if moes else None


def _expert_parallel() -> tuple[int, int]:
    from megatron.core import parallel_state as ps

    return ps.get_expert_model_parallel_world_size(), ps.get_expert_tensor_parallel_world_size()


def _num_experts(b: Built) -> Pair:
    def count(moes: list[Any]) -> Any:
        moe = moes[0]
        ep = _expert_parallel()[0]
        routed, held = moe.router.weight.shape[0], len(_local_experts(moe)) * ep
        return routed if routed == held else f"router {routed}, experts {len(_local_experts(moe))} x EP {ep}"

    return _experts_only(b, count, b.recipe.get("num_moe_experts"))


def _expert_width(b: Built) -> Pair:
    etp = _expert_parallel()[1]
    want = b.recipe.get("moe_ffn_hidden_size") or b.recipe["ffn_hidden_size"]
    experts = b.recipe.get("num_moe_experts") is not None
    return _experts_only(
        b,
        lambda ms: _one({e.linear_fc2.weight.shape[1] * etp for e in _local_experts(ms[0])}),
        want if experts else None,
    )


def _shared_width(b: Built) -> Pair:
    def width(moes: list[Any]) -> Any:
        shared = moes[0].shared_experts
        return None if shared is None else shared.linear_fc2.weight.shape[1] * b.tp

    return _experts_only(b, width, b.recipe.get("moe_shared_expert_intermediate_size"))


def _router(attribute: str, field: str) -> Callable[[Built], Pair]:
    return lambda b: _experts_only(b, lambda ms: getattr(ms[0].router, attribute), b.recipe.get(field))


def _router_config(field: str) -> Callable[[Built], Pair]:
    return lambda b: _experts_only(b, lambda ms: getattr(ms[0].router.config, field), b.recipe.get(field))


def _expert_bias(b: Built) -> Pair:
    return _experts_only(
        b,
        lambda ms: getattr(ms[0].router, "expert_bias", None) is not None,
        b.recipe.get("moe_router_enable_expert_bias"),
    )


#: Megatron-Core's dispatcher classes -> the moe_token_dispatcher_type that builds them.
DISPATCHERS = {"MoEAllGatherTokenDispatcher": "allgather", "MoEAlltoAllTokenDispatcher": "alltoall"}


def _dispatcher(b: Built) -> Pair:
    def kind(moes: list[Any]) -> str:
        name = type(moes[0].token_dispatcher).__name__
        return DISPATCHERS.get(name, name)

    return _experts_only(b, kind, b.recipe.get("moe_token_dispatcher_type"))


def _first_dense(b: Built) -> Pair:
    """The global numbers of this rank's dense layers are exactly those not above moe_first_dense_layers."""
    if b.recipe.get("num_moe_experts") is None:
        return None, None
    first = b.recipe.get("moe_first_dense_layers") or 0
    dense = sorted(la.layer_number for la in b.layers if _moe(la) is None)
    want = sorted(la.layer_number for la in b.layers if la.layer_number <= first)
    return (first if dense == want else f"dense layers {dense}", first) if b.layers else None


#: Field -> its measure (built_fields.MEASURED says in words what each reads).
MEASURES: dict[str, Callable[[Built], Pair]] = {
    "num_layers": _num_layers,
    "hidden_size": _hidden,
    "num_attention_heads": _heads,
    "ffn_hidden_size": _ffn,
    "seq_length": _seq_length,
    "num_query_groups": _groups,
    "kv_channels": _kv,
    "vocab_size": _padded_rows,
    "make_vocab_size_divisible_by": _padded_rows,
    "position_embedding_type": _position_type,
    "rotary_base": _rotary_base,
    "rotary_percent": _rotary_percent,
    "normalization": _normalization,
    "norm_epsilon": _norm_epsilon,
    "qk_layernorm": _qk_layernorm,
    "activation": _activation,
    "add_bias_linear": _bias,
    "share_embeddings": _shared,
    "hidden_dropout": _hidden_dropout,
    "attention_dropout": _attention_dropout,
    "precision": _precision,
    "max_lr": _max_lr,
    "min_lr_ratio": _min_lr_ratio,
    "num_moe_experts": _num_experts,
    "moe_router_topk": _router("topk", "moe_router_topk"),
    "moe_ffn_hidden_size": _expert_width,
    "moe_shared_expert_intermediate_size": _shared_width,
    "moe_router_score_function": _router("score_function", "moe_router_score_function"),
    "moe_router_load_balancing_type": _router("routing_type", "moe_router_load_balancing_type"),
    "moe_router_enable_expert_bias": _expert_bias,
    "moe_token_dispatcher_type": _dispatcher,
    "moe_first_dense_layers": _first_dense,
    **{name: _router_config(name) for name in (*ROUTER_FORWARD_FIELDS, "moe_router_bias_update_rate")},
}


def measured_fields(trainer: Any, parts: list[Any], recipe: dict[str, Any]) -> dict[str, Any]:
    """{field: [seen, recipe]} for every field this rank's modules and Megatron optimizer `parts` show (a measure
    that fails is a finding)."""
    built = Built(trainer, parts, recipe)
    found: dict[str, Any] = {}
    for name, measure in MEASURES.items():
        try:
            pair = measure(built)
        except Exception as error:  # a module without the attribute measured: not the recipe's model
            pair = (f"not measurable: {type(error).__name__}: {error}", recipe.get(name))
        if pair is not None and (pair[0] is not None or pair[1] is None):  # None, None: neither has it (RoPE)
            found[name] = list(pair)
    return found
