"""The Qwen3 Mixture-of-Experts family: Qwen3's attention (`families/qwen3.py`: QK-norm, grouped-query attention with
heads of 128 channels, RoPE base 1,000,000, RMSNorm, no biases, untied output layer, 151,936-token vocabulary) with
every MLP replaced by 128 fine-grained SwiGLU experts of which a softmax router picks 8 per token, no shared expert,
balanced by the auxiliary loss; its 30B-A3B and 235B-A22B rows on the layouts of NeMo 2.7.3's own recipes.

Its own module rather than rows in `qwen3.py`: its layers are other blocks (`moe_layer`), its Hugging Face class is
another (Qwen3MoeForCausalLM, `model_type` qwen3_moe: `hf()`, read both ways by `hf export` and `hf import`), and its
rows' sources are NeMo's Qwen3MoEConfig and MoE recipes; what
it shares with the dense family it imports from there (`qwen3.ARCHITECTURE`). The rows are named `qwen3_moe_*` so that
NeMo's own `qwen3_30b_a3b`/`qwen3_235b_a22b` stay reachable. Standard library only (the fast path reads it).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

from nemo_recipes.errors import Problem
from nemo_recipes.families import llama, moe_hf, qwen3
from nemo_recipes.families.blocks import moe_layer
from nemo_recipes.families.family import Family

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping

NEMO_CONFIG = "NeMo 2.7.3's Qwen3MoEConfig (llm/gpt/model/qwen3.py, over Qwen3Config)"
SHAPE = (
    f"{qwen3.REPORT}, Table 2; NeMo 2.7.3's Qwen3Config30B_A3B/235B_A22B: 30B-A3B 48 x 2048, 32 query heads and 4 "
    "key/value groups of 128 channels, experts' FFN 768; 235B-A22B 94 x 4096, 64 query heads, 4 groups, experts' "
    "FFN 1536"
)
NEMO_RECIPES = (
    "NeMo 2.7.3's qwen3_30b_a3b and qwen3_235b_a22b pretrain_recipe (llm/recipes/qwen3_30b_a3b.py, "
    "qwen3_235b_a22b.py, qwen3.py's qwen3_trainer with expert_tensor_parallel_size=1): 30B-A3B TP4 PP2 CP1 EP4 with "
    "SP on 1 node, micro batch 2; 235B-A22B TP4 PP16 CP2 EP8 with SP on 16 nodes, micro batch 1, embedding and loss "
    "counted in the pipeline split; global batch 32, sequence 4096"
)
MOE = f"128 experts, top-8, no shared expert: {qwen3.REPORT}, Sec. 2; {NEMO_CONFIG}"
LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                 "expert_tensor_parallel", "micro_batch_size", "global_batch_size", "num_nodes",
                 "pipeline_counts_embedding_and_loss", "seq_length")  # fmt: skip
NEMO_SCHEDULE = (
    "NeMo 2.7.3's qwen3_30b_a3b/qwen3_235b_a22b pretrain_recipe: 500 warmup steps, cosine decay over 300,000 steps "
    "of 32 x 4096 tokens"
)

#: Where the rows' values come from, where they differ from the dense Qwen3's and the catalog's.
SOURCES: dict[str, str] = {
    **qwen3.SOURCES,
    **dict.fromkeys(
        ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "moe_ffn_hidden_size"), SHAPE
    ),  # fmt: skip
    **dict.fromkeys(LAYOUT_FIELDS, NEMO_RECIPES),
    **dict.fromkeys(("warmup_tokens", "decay_tokens", "train_tokens"), NEMO_SCHEDULE),
    "max_lr": "3e-4, min LR 3e-5 (10 %): NeMo 2.7.3's qwen3_30b_a3b/qwen3_235b_a22b pretrain_recipe",
    "ffn_hidden_size": f"6144/12288 ({NEMO_CONFIG}): the dense FFN an all-expert model never builds; the experts' "
    "width is moe_ffn_hidden_size",
    "num_moe_experts": f"128: {MOE}",
    "moe_router_topk": f"8: {MOE}",
    "moe_router_score_function": f"softmax: {NEMO_CONFIG} (Megatron-Core's default)",
    "moe_router_pre_softmax": f"off: {NEMO_CONFIG}",
    "moe_router_load_balancing_type": f"aux_loss (global-batch balancing in the report; NeMo's per micro-batch): "
    f"{NEMO_CONFIG}",
    "moe_aux_loss_coeff": f"1e-3: {NEMO_CONFIG}",
    "moe_token_dispatcher_type": f"alltoall: {NEMO_CONFIG}",
    "moe_grouped_gemm": f"on: {NEMO_CONFIG}",
    "moe_permute_fusion": f"on: {NEMO_CONFIG}",
    "share_embeddings": f"untied output layer for both MoE sizes: {qwen3.REPORT}, Table 2; {NEMO_CONFIG}",
    "recompute": "30B-A3B: full, every layer (NeMo's recompute_method uniform with 1 layer, the same as block over "
    "a whole chunk), as NeMo 2.7.3's qwen3_30b_a3b recipe; 235B-A22B: none, as its qwen3_235b_a22b recipe",
}

#: What both rows share: the dense Qwen3's attention, vocabulary, schedule and optimizer, and NeMo's MoE settings.
ARCHITECTURE: dict[str, Any] = dict(
    qwen3.ARCHITECTURE,
    num_query_groups=4,
    num_moe_experts=128,
    moe_router_topk=8,
    moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=1e-3,
    moe_token_dispatcher_type="alltoall",
    moe_grouped_gemm=True,
    moe_permute_fusion=True,
    expert_tensor_parallel=1,
)

#: The rows, as `RecipeSpec` values (`catalog.RECIPES` builds them).
ROWS: dict[str, dict[str, Any]] = {
    "qwen3_moe_30b_a3b": dict(ARCHITECTURE, size_label="30B-A3B", num_layers=48, hidden_size=2048,
                              num_attention_heads=32, ffn_hidden_size=6144, moe_ffn_hidden_size=768,
                              tensor_parallel=4, pipeline_parallel=2, context_parallel=1, expert_parallel=4,
                              micro_batch_size=2, num_nodes=1, recompute="full"),
    "qwen3_moe_235b_a22b": dict(ARCHITECTURE, size_label="235B-A22B", num_layers=94, hidden_size=4096,
                                num_attention_heads=64, ffn_hidden_size=12288, moe_ffn_hidden_size=1536,
                                tensor_parallel=4, pipeline_parallel=16, context_parallel=2, expert_parallel=8,
                                micro_batch_size=1, num_nodes=16, pipeline_counts_embedding_and_loss=True,
                                recompute="none"),
}  # fmt: skip

ARCHITECTURE_NAME = "Qwen3MoeForCausalLM"


def _problems(spec: Any) -> list[Problem]:
    from nemo_recipes.families.hf_mapping import values_not_held

    held = {**llama.HELD, "qk_layernorm": (True, "every attention layer of it normalises its queries and keys"),
            **moe_hf.HELD}  # fmt: skip
    return moe_hf.no_experts(spec, ARCHITECTURE_NAME) + values_not_held(
        spec, ARCHITECTURE_NAME, held, "Qwen3-MoE", "a dense recipe (qwen3_dense_*)"
    )


def _config(spec: Any, vocab: int, eod: Optional[int]) -> dict[str, Any]:
    """Qwen3MoeConfig's keys (transformers 4.57 configuration_qwen3_moe.py): the dense Qwen3's, the experts' width as
    `moe_intermediate_size`, every layer of experts (`decoder_sparse_step` 1, no `mlp_only_layers`), the top-k
    renormalised (`norm_topk_prob`, as NeMo 2.7.3's HFQwen3Exporter writes it)."""
    values = {**qwen3.hf().config(spec, vocab, eod), "architectures": [ARCHITECTURE_NAME], "model_type": "qwen3_moe"}
    return {
        **values,
        "moe_intermediate_size": spec.moe_ffn_hidden_size or spec.ffn_hidden_size,
        "num_experts": spec.num_moe_experts,
        **moe_hf.router_config(spec),
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }


#: Qwen3-MoE's recipe as transformers' Qwen3MoeForCausalLM, both ways: the dense Qwen3's attention rules (with QK
#: norm), then the MoE half of the layer: `mlp.gate` (the router) and each expert's `gate_proj`, `up_proj` and
#: `down_proj`, as NeMo 2.7.3's HFQwen3Importer/Exporter map them (qwen3.py: `mlp.experts.*.gate_proj/up_proj` <->
#: `local_experts.*.linear_fc1`, `down_proj` <-> `linear_fc2`, `mlp.gate` <-> `router`).
@functools.cache
def hf() -> HFMapping:
    """The mapping, built at first use (see `Family.mapping`)."""
    base = qwen3.hf()
    return replace(
        base,
        architecture=ARCHITECTURE_NAME,
        model_type="qwen3_moe",
        layer=(
            *base.layer[:5],  # the input norm, q/k/v, the query and key norms, the output projection
            *moe_hf.layer_rules("mlp.", gate="gate_proj", up="up_proj", down="down_proj"),
        ),
        config=_config,
        problems=_problems,
        shape_keys={
            **base.shape_keys,
            "moe_ffn_hidden_size": "moe_intermediate_size",
            "num_moe_experts": "num_experts",
            "moe_router_topk": "num_experts_per_tok",
        },
        config_defaults={
            **base.config_defaults,
            "num_experts": lambda config: 128,  # Qwen3MoeConfig's defaults, where a config leaves them out
            "num_experts_per_tok": lambda config: 8,
            "moe_intermediate_size": lambda config: 768,
            "norm_topk_prob": lambda config: False,
        },
        fixed={
            **base.fixed,
            "norm_topk_prob": (True, "the recipes' router renormalises the top-k probabilities (moe_router_pre_softmax "
                               "off)"),
            "decoder_sparse_step": (1, "every layer of the recipes' model is a layer of experts"),
            "mlp_only_layers": ([], "every layer of the recipes' model is a layer of experts"),
        },
    )  # fmt: skip


FAMILY = Family(
    name="qwen3_moe",
    display_name="Qwen3MoE",
    summary="Qwen3 Mixture of Experts: 128 SwiGLU experts, top-8 softmax router, no shared expert; Qwen3's "
    "attention with QK-norm, RoPE (base 1M), RMSNorm, no biases, untied output layer",
    rows=ROWS,
    sources=SOURCES,
    layer=moe_layer,
    mapping=hf,
)
