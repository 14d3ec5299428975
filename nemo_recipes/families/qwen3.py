"""The Qwen3 dense family: Qwen3's architecture (Llama's RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases and
untied output layer, plus a norm of each head's queries and keys, RoPE base 1,000,000, a vocabulary of 151,936 and
heads of 128 channels whatever the hidden size), its 8B and 32B rows with the layouts of NeMo 2.7.3's own pretraining
recipes, the sources of every value, and its Hugging Face mapping (transformers' Qwen3ForCausalLM).

The rows are named `qwen3_dense_*` so that NeMo's own `qwen3_8b`/`qwen3_32b` factories stay reachable beside them in
`nemo llm pretrain --factory`. Standard library only (the catalog and the planner read it on the fast path).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

from nemo_recipes.families import llama
from nemo_recipes.families.blocks import dense_layer
from nemo_recipes.families.family import Family

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping

NEMO_CONFIG = "NeMo 2.7.3's Qwen3Config (llm/gpt/model/qwen3.py, over Qwen2Config)"
HF_CONFIGS = "the config.json of Qwen/Qwen3-8B and Qwen/Qwen3-32B"
REPORT = "Qwen3 Technical Report (Yang et al. 2025)"
SHAPE = (
    f"{REPORT}, Table 1; NeMo 2.7.3's Qwen3Config8B/32B: 8B 36 x 4096, 32 heads, FFN 12288; 32B 64 x 5120, 64 heads "
    "of 128 channels (8192 query channels, wider than hidden), FFN 25600"
)
NEMO_RECIPES = (
    "NeMo 2.7.3's qwen3_8b and qwen3_32b pretrain_recipe (llm/recipes/qwen3_8b.py, qwen3_32b.py): 8B TP4 PP1 CP1 on "
    "1 node, 32B TP8 PP2 CP1 on 2 nodes; micro batch 2, global batch 32, sequence 4096"
)
NEMO_SCHEDULE = (
    "NeMo 2.7.3's qwen3_8b/qwen3_32b pretrain_recipe: 500 warmup steps, cosine decay over 300,000 steps of "
    "32 x 4096 tokens (39.3B; Qwen3 itself saw 36T, Sec. 3)"
)
#: Tokens per step of NeMo's Qwen3 recipes (global batch 32 x sequence 4096), the unit of their warmup and length.
NEMO_STEP_TOKENS = 32 * 4096

LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "micro_batch_size", "global_batch_size",
                 "num_nodes", "seq_length")  # fmt: skip
#: Where the Qwen3 rows' values come from, where they differ from the catalog's `SOURCES`.
SOURCES: dict[str, str] = {
    **dict.fromkeys(("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size"), SHAPE),
    **dict.fromkeys(LAYOUT_FIELDS, NEMO_RECIPES),
    **dict.fromkeys(("warmup_tokens", "decay_tokens", "train_tokens"), NEMO_SCHEDULE),
    "max_lr": "3e-4, min LR 3e-5 (10 %): NeMo 2.7.3's qwen3_8b/qwen3_32b pretrain_recipe",
    "adam_eps": "1e-5: NeMo 2.7.3's distributed_fused_adam_with_cosine_annealing (llm/recipes/optim/adam.py), which "
    "its Qwen3 recipes use",
    "num_query_groups": f"8 key/value groups (grouped-query attention): {REPORT}, Table 1; {NEMO_CONFIG}",
    "kv_channels": f"128 channels a head in every size: {NEMO_CONFIG}; head_dim in {HF_CONFIGS}",
    "vocab_size": f"151,936 rows (151,643 BPE tokens, control tokens, unused rows): {NEMO_CONFIG}; {HF_CONFIGS}",
    "make_vocab_size_divisible_by": "1187, as NeMo 2.7.3's HFQwen3Importer sets it: 151,936 = 128 x 1187 needs no "
    "padding at any TP up to 128, so the model has the rows of NeMo's Qwen3Config (whose vocab_size NeMo never pads)",
    "position_embedding_type": f"RoPE: {NEMO_CONFIG}",
    "rotary_base": f"1,000,000: {NEMO_CONFIG}; rope_theta in {HF_CONFIGS}",
    "normalization": f"RMSNorm: {NEMO_CONFIG}",
    "norm_epsilon": f"1e-6: {NEMO_CONFIG} (layernorm_epsilon); rms_norm_eps in {HF_CONFIGS}",
    "qk_layernorm": f"on: QK-norm in place of Qwen2's QKV bias ({REPORT}, Sec. 2); {NEMO_CONFIG}",
    "activation": f"SwiGLU: {NEMO_CONFIG} (activation_func=silu, gated_linear_unit=True)",
    "add_bias_linear": f"no biases, not even on QKV: {NEMO_CONFIG} (add_bias_linear, add_qkv_bias off)",
    "share_embeddings": f"untied output layer for 8B and 32B: {REPORT}, Table 1; {HF_CONFIGS}",
    "hidden_dropout": f"0: {NEMO_CONFIG}",
    "attention_dropout": f"0: {NEMO_CONFIG}",
    "recompute": "8B: none, as NeMo 2.7.3's qwen3_8b recipe; 32B: full, every layer (its recompute_method uniform "
    "with 1 layer, the same as block over a whole chunk), as NeMo 2.7.3's qwen3_32b recipe",
}

#: What every Qwen3 dense row shares (NeMo's Qwen3Config and its pretraining recipes).
ARCHITECTURE: dict[str, Any] = dict(
    num_query_groups=8,
    kv_channels=128,
    seq_length=4096,
    vocab_size=151_936,
    make_vocab_size_divisible_by=1187,
    position_embedding_type="rope",
    rotary_base=1_000_000,
    normalization="RMSNorm",
    norm_epsilon=1e-6,
    qk_layernorm=True,
    activation="swiglu",
    add_bias_linear=False,
    share_embeddings=False,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    micro_batch_size=2,
    global_batch_size=32,
    context_parallel=1,
    max_lr=3e-4,
    adam_eps=1e-5,
    warmup_tokens=500 * NEMO_STEP_TOKENS,
    decay_tokens=300_000 * NEMO_STEP_TOKENS,
    train_tokens=300_000 * NEMO_STEP_TOKENS,
)

#: The rows, as `RecipeSpec` values (`catalog.RECIPES` builds them).
ROWS: dict[str, dict[str, Any]] = {
    "qwen3_dense_8b": dict(ARCHITECTURE, size_label="8B", num_layers=36, hidden_size=4096, num_attention_heads=32,
                           ffn_hidden_size=12288, tensor_parallel=4, pipeline_parallel=1, num_nodes=1,
                           recompute="none"),
    "qwen3_dense_32b": dict(ARCHITECTURE, size_label="32B", num_layers=64, hidden_size=5120, num_attention_heads=64,
                            ffn_hidden_size=25600, tensor_parallel=8, pipeline_parallel=2, num_nodes=2,
                            recompute="full"),
}  # fmt: skip


def _problems(spec: Any) -> list[Any]:
    from nemo_recipes.families.hf_mapping import values_not_held

    wanted = {**llama.HELD, "qk_layernorm": (True, "every attention layer of it normalises its queries and keys")}
    return values_not_held(spec, hf().architecture, wanted, "Qwen3", "a Llama-shaped recipe (llama_*)")


def _config(spec: Any, vocab: int, eod: Optional[int]) -> dict[str, Any]:
    values = {
        **llama.hf().config(spec, vocab, eod),
        "architectures": [hf().architecture],
        "model_type": hf().model_type,
    }
    del values["mlp_bias"]  # Qwen3Config has no such key
    return {**values, "rms_norm_eps": spec.norm_epsilon, "use_sliding_window": False}


#: Qwen3's recipe as transformers' Qwen3ForCausalLM, both ways: Llama's rules (separate q/k/v and gate/up
#: projections) plus each layer's query and key norms, `self_attn.q_norm.weight`/`k_norm.weight` in Hugging Face,
#: `self_attention.q_layernorm.weight`/`k_layernorm.weight` in Megatron, one head_dim-wide vector each, copied as
#: they are (NeMo 2.7.3's HFQwen3Exporter/Importer map them the same way).
@functools.cache
def hf() -> HFMapping:
    """The mapping, built at first use (see `Family.mapping`)."""
    from nemo_recipes.families.hf_mapping import Same

    base = llama.hf()
    return replace(
        base,
        architecture="Qwen3ForCausalLM",
        model_type="qwen3",
        layer=(
            *base.layer[:2],  # the input norm, q/k/v
            Same("q_norm.weight", "self_attn.q_norm.weight"),
            Same("k_norm.weight", "self_attn.k_norm.weight"),
            *base.layer[2:],
        ),
        config=_config,
        problems=_problems,
        shape_keys={**base.shape_keys, "norm_epsilon": "rms_norm_eps"},
        fixed={
            "hidden_act": ("silu", "the recipes' SwiGLU gates with SiLU"),
            "attention_bias": (False, "the recipes' Qwen3 has no linear biases"),
            "rope_scaling": (None, "the recipes' RoPE is unscaled (YaRN long-context scaling is not modelled)"),
            "use_sliding_window": (False, "the recipes' attention is full causal attention in every layer"),
        },
    )


FAMILY = Family(
    name="qwen3",
    display_name="Qwen3",
    summary="Qwen3 dense architecture: RoPE (base 1M), RMSNorm, SwiGLU, grouped-query attention with QK-norm, no "
    "biases, untied output layer",
    rows=ROWS,
    sources=SOURCES,
    layer=dense_layer,
    mapping=hf,
)
