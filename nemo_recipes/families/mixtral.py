"""The Mixtral family: Mistral's sparse Mixture of Experts (Jiang et al. 2024, "Mixtral of Experts"): Mistral 7B's
attention (RoPE base 1,000,000, RMSNorm, grouped-query attention with 8 key/value groups, no biases, untied output
layer, a 32,000-token vocabulary) with every MLP replaced by 8 SwiGLU experts of which a softmax router picks 2 per
token, balanced by the GShard/Switch auxiliary loss at 0.01; its 8x7B and 8x22B rows on the layouts of NeMo 2.7.3's
own pretraining recipes, the sources of every value.

The rows are named `mixtral_moe_*` so that NeMo's own `mixtral_8x7b`/`mixtral_8x22b` factories stay reachable beside
them in `nemo llm pretrain --factory`. Its Hugging Face class is MixtralForCausalLM (`hf()`, read both ways by
`hf export` and `hf import`). Standard library only (the catalog and the planner read it on the fast path).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

from nemo_recipes.errors import Problem
from nemo_recipes.families import llama, moe_hf
from nemo_recipes.families.blocks import moe_layer
from nemo_recipes.families.family import Family

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping

PAPER = "Mixtral of Experts (Jiang et al. 2024), Table 1"
NEMO_CONFIG = "NeMo 2.7.3's MixtralConfig (llm/gpt/model/mixtral.py)"
HF_CONFIGS = "the config.json of mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1"
SHAPE = (
    f"{PAPER}; NeMo 2.7.3's MixtralConfig8x7B/8x22B: 8x7B 32 x 4096, 32 heads, experts' FFN 14336; 8x22B 56 x 6144, "
    "48 heads, experts' FFN 16384"
)
NEMO_RECIPES = (
    "NeMo 2.7.3's mixtral_8x7b and mixtral_8x22b pretrain_recipe and trainer (llm/recipes/mixtral_8x7b.py, "
    "mixtral_8x22b.py): 8x7B TP1 PP4 VP8 CP1 EP8, no SP, on 8 nodes; 8x22B TP2 PP4 VP14 CP2 EP8 with SP on 16 nodes; "
    "expert_tensor_parallel_size unset (Megatron-Core takes TP); micro batch 1, global batch 512, sequence 4096"
)
#: Tokens per step of NeMo's Mixtral recipes (global batch 512 x sequence 4096).
NEMO_STEP_TOKENS = 512 * 4096
NEMO_SCHEDULE = (
    "NeMo 2.7.3's mixtral recipes: distributed_fused_adam_with_cosine_annealing's 2000 warmup steps, its trainer's "
    "1,168,251 steps of 512 x 4096 tokens (cosine over all of them)"
)

LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel", "virtual_pipeline", "context_parallel", "expert_parallel",
                 "expert_tensor_parallel", "micro_batch_size", "global_batch_size", "num_nodes",
                 "seq_length")  # fmt: skip
MOE = f"{PAPER} (8 experts, top-2, softmax gating over the chosen two); {NEMO_CONFIG}"

#: Where the Mixtral rows' values come from, where they differ from the catalog's `SOURCES`.
SOURCES: dict[str, str] = {
    **dict.fromkeys(("num_layers", "hidden_size", "num_attention_heads", "moe_ffn_hidden_size"), SHAPE),
    **dict.fromkeys(LAYOUT_FIELDS, NEMO_RECIPES),
    **dict.fromkeys(("warmup_tokens", "decay_tokens", "train_tokens"), NEMO_SCHEDULE),
    "ffn_hidden_size": f"14336/16384 ({NEMO_CONFIG}): Megatron-Core builds no dense MLP in an all-expert model; "
    "the experts' width is moe_ffn_hidden_size",
    "num_moe_experts": f"8: {MOE}",
    "moe_router_topk": f"2: {MOE}",
    "moe_router_score_function": f"softmax: {MOE}",
    "moe_router_pre_softmax": f"off, softmax over the top-2 logits: {MOE}",
    "moe_router_load_balancing_type": f"aux_loss: {NEMO_CONFIG}",
    "moe_aux_loss_coeff": f"0.01: {NEMO_CONFIG}",
    "moe_token_dispatcher_type": f"alltoall: {NEMO_CONFIG}",
    "max_lr": "3e-4, min LR 3e-5 (10 %): NeMo 2.7.3's mixtral recipes (distributed_fused_adam_with_cosine_annealing"
    "(max_lr=3e-4))",
    "adam_eps": "1e-5: NeMo 2.7.3's distributed_fused_adam_with_cosine_annealing (llm/recipes/optim/adam.py)",
    "num_query_groups": f"8 key/value groups: {PAPER} (n_kv_heads); {NEMO_CONFIG}",
    "vocab_size": f"32,000 tokens: {PAPER}; {HF_CONFIGS} (the 8x22B Instruct v0.3 tokenizer's 32,768 is not the "
    "base model's)",
    "position_embedding_type": f"RoPE: {NEMO_CONFIG}",
    "rotary_base": f"1,000,000: {NEMO_CONFIG}; rope_theta in {HF_CONFIGS}",
    "normalization": f"RMSNorm: {NEMO_CONFIG}",
    "activation": f"SwiGLU experts: {NEMO_CONFIG} (activation_func=silu, gated_linear_unit=True)",
    "add_bias_linear": f"no biases: {NEMO_CONFIG}",
    "share_embeddings": f"untied output layer: {NEMO_CONFIG}",
    "hidden_dropout": f"0: {NEMO_CONFIG}",
    "attention_dropout": f"0: {NEMO_CONFIG}",
    "recompute": "none: NeMo 2.7.3's mixtral recipes recompute nothing",
}

#: What both Mixtral rows share (NeMo's MixtralConfig and its pretraining recipes).
ARCHITECTURE: dict[str, Any] = dict(
    num_query_groups=8,
    seq_length=4096,
    vocab_size=32_000,
    position_embedding_type="rope",
    rotary_base=1_000_000,
    normalization="RMSNorm",
    activation="swiglu",
    add_bias_linear=False,
    share_embeddings=False,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    num_moe_experts=8,
    moe_router_topk=2,
    moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=0.01,
    moe_token_dispatcher_type="alltoall",
    micro_batch_size=1,
    global_batch_size=512,
    max_lr=3e-4,
    adam_eps=1e-5,
    recompute="none",
    warmup_tokens=2000 * NEMO_STEP_TOKENS,
    decay_tokens=1_168_251 * NEMO_STEP_TOKENS,
    train_tokens=1_168_251 * NEMO_STEP_TOKENS,
)

#: The rows, as `RecipeSpec` values (`catalog.RECIPES` builds them).
ROWS: dict[str, dict[str, Any]] = {
    "mixtral_moe_8x7b": dict(ARCHITECTURE, size_label="8x7B", num_layers=32, hidden_size=4096, num_attention_heads=32,
                             ffn_hidden_size=14336, moe_ffn_hidden_size=14336, tensor_parallel=1,
                             pipeline_parallel=4, virtual_pipeline=8, context_parallel=1,
                             expert_parallel=8, num_nodes=8),
    "mixtral_moe_8x22b": dict(ARCHITECTURE, size_label="8x22B", num_layers=56, hidden_size=6144,
                              num_attention_heads=48, ffn_hidden_size=16384, moe_ffn_hidden_size=16384,
                              tensor_parallel=2, pipeline_parallel=4, virtual_pipeline=14, context_parallel=2,
                              expert_parallel=8, num_nodes=16),
}  # fmt: skip

ARCHITECTURE_NAME = "MixtralForCausalLM"


def _problems(spec: Any) -> list[Problem]:
    from nemo_recipes.families.hf_mapping import values_not_held

    return moe_hf.no_experts(spec, ARCHITECTURE_NAME) + values_not_held(
        spec, ARCHITECTURE_NAME, {**llama.HELD, **moe_hf.HELD}, "Mixtral", "a dense recipe (llama_*, qwen3_dense_*)"
    )


def _config(spec: Any, vocab: int, eod: Optional[int]) -> dict[str, Any]:
    """MixtralConfig's keys (transformers 4.57 configuration_mixtral.py): Llama's attention and norms, the experts'
    width as `intermediate_size` (Mixtral has no dense MLP), full attention (no sliding window)."""
    values = {**llama.hf().config(spec, vocab, eod), "architectures": [ARCHITECTURE_NAME], "model_type": "mixtral"}
    for key in ("mlp_bias", "attention_bias"):  # MixtralConfig has neither: no biases at all
        del values[key]
    return {
        **values,
        "intermediate_size": spec.moe_ffn_hidden_size or spec.ffn_hidden_size,
        "num_local_experts": spec.num_moe_experts,
        **moe_hf.router_config(spec),
        "router_jitter_noise": 0.0,
        "sliding_window": None,
    }


#: Mixtral's recipe as transformers' MixtralForCausalLM, both ways: Llama's attention rules, then the MoE half of the
#: layer: `block_sparse_moe.gate` (the router) and each expert's `w1` (gate), `w3` (up) and `w2` (down), as NeMo
#: 2.7.3's HFMixtralImporter/Exporter map them (mixtral.py: `block_sparse_moe.experts.*.w1/w3` <->
#: `local_experts.*.linear_fc1`, `w2` <-> `linear_fc2`, `gate` <-> `router`).
@functools.cache
def hf() -> HFMapping:
    """The mapping, built at first use (see `Family.mapping`)."""
    base = llama.hf()
    return replace(
        base,
        architecture=ARCHITECTURE_NAME,
        model_type="mixtral",
        layer=(
            *base.layer[:3],  # the input norm, q/k/v, the output projection
            *moe_hf.layer_rules("block_sparse_moe.", gate="w1", up="w3", down="w2"),
        ),
        config=_config,
        problems=_problems,
        shape_keys={
            **base.shape_keys,
            "moe_ffn_hidden_size": "intermediate_size",  # ffn_hidden_size too (Llama's key): the rows keep them equal
            "num_moe_experts": "num_local_experts",
            "moe_router_topk": "num_experts_per_tok",
        },
        config_defaults={
            **base.config_defaults,
            "num_local_experts": lambda config: 8,  # MixtralConfig's defaults, where a config leaves them out
            "num_experts_per_tok": lambda config: 2,
        },
        fixed={
            "hidden_act": ("silu", "the recipes' SwiGLU experts gate with SiLU"),
            "rms_norm_eps": base.fixed["rms_norm_eps"],
            "sliding_window": (None, "the recipes' attention is full causal attention (Mistral 7B's sliding window is "
                               "not modelled)"),
        },
    )  # fmt: skip


FAMILY = Family(
    name="mixtral",
    display_name="Mixtral",
    summary="Mixtral sparse Mixture of Experts: 8 SwiGLU experts, top-2 softmax router, RoPE (base 1M), RMSNorm, "
    "grouped-query attention, no biases, untied output layer",
    rows=ROWS,
    sources=SOURCES,
    layer=moe_layer,
    mapping=hf,
)
