"""The Llama family: Llama 3's architecture (RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases, untied output
layer), its three rows on NVIDIA's published H100 layouts with the sources of every value in which they differ from
the catalog's defaults, and transformers' LlamaForCausalLM."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Optional

from nemo_recipes.errors import Problem
from nemo_recipes.families.blocks import NORM_EPSILON, dense_layer
from nemo_recipes.families.family import Family

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping

ARCHITECTURE = "LlamaForCausalLM"
MODEL_TYPE = "llama"

#: Llama 2's batch of 4M tokens (1024 sequences of 4096), the unit of the Llama papers' warmup steps.
BATCH_TOKENS = 1024 * 4096
VOCAB_SIZE = 128256  # Llama 3's tiktoken-based tokenizer: 128,000 BPE tokens + 256 special (Dubey et al. 2024)

#: What every Llama 3 row shares (sources: `SOURCES`).
SHARED: dict[str, Any] = dict(
    seq_length=8192,
    vocab_size=VOCAB_SIZE,
    position_embedding_type="rope",
    rotary_base=500_000,
    normalization="RMSNorm",
    activation="swiglu",
    add_bias_linear=False,
    share_embeddings=False,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    adam_eps=1e-5,
    train_tokens=15_000_000_000_000,
    decay_tokens=15_000_000_000_000,
    warmup_tokens=2000 * BATCH_TOKENS,
)


def _row(
    label: str,
    layers: int,
    hidden: int,
    heads: int,
    groups: int,
    ffn: int,
    tp: int,
    pp: int,
    cp: int,
    vp: Optional[int],
    mbs: int,
    gbs: int,
    nodes: int,
    **choices: Any,
) -> dict[str, Any]:
    """One Llama 3 row: the published shape (layers, hidden, heads, query groups, FFN) and NVIDIA's H100 layout on
    the node count it was published for, with what every Llama 3 shares (`SHARED`)."""
    return dict(
        size_label=label,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=groups,
        ffn_hidden_size=ffn,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        context_parallel=cp,
        virtual_pipeline=vp,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        num_nodes=nodes,
        **{**SHARED, **choices},
    )


# Per-row choices (sources: `SOURCES`): the 405B schedule of the Llama 3 paper and the pipeline split of its 126
# layers over PP 8 x VP 8 chunks; the full recomputation each row needs to fit 80 GB.
CHOICES_8B: dict[str, Any] = dict(max_lr=3e-4, recompute="full", recompute_num_layers=16)
CHOICES_405B: dict[str, Any] = dict(
    max_lr=8e-5,
    min_lr_ratio=0.01,
    warmup_tokens=8000 * BATCH_TOKENS,
    pipeline_counts_embedding_and_loss=True,
    recompute="full",
    recompute_num_layers=1,
)

ROWS: dict[str, dict[str, Any]] = {
    #                   label layers hidden heads groups FFN TP PP CP VP  MBS GBS nodes
    "llama_8b": _row("8B", 32, 4096, 32, 8, 14336, 1, 1, 2, None, 1, 128, 1, **CHOICES_8B),
    "llama_70b": _row("70B", 80, 8192, 64, 8, 28672, 4, 4, 2, 5, 1, 128, 8, max_lr=1.5e-4),
    "llama_405b": _row("405B", 126, 16384, 128, 8, 53248, 8, 8, 2, 8, 1, 512, 128, **CHOICES_405B),
}


# NVIDIA's published H100 layouts for Llama 3 (BF16 pretraining rows), read in NeMo's performance scripts.
LLAMA_H100 = (
    "NVIDIA's H100 BF16 pretraining layout for Llama 3 (NVIDIA/NeMo "
    "scripts/performance/recommended_model_configs/model_configs_h100.csv @000e8c17a3: llama3 8b on 8 GPUs "
    "TP1 PP1 CP2, 70b on 64 GPUs TP4 PP4 CP2 VP5, llama31 405b on 1024 GPUs TP8 PP8 CP2 VP8; micro batch 1; "
    "global batch 128, 128, 512)"
)
LLAMA3_SHAPE = (
    "Llama 3 (Dubey et al. 2024, Table 3; NeMo Llama3Config8B/70B, Llama31Config405B): "
    "8B 32 x 4096, 32 heads; 70B 80 x 8192, 64 heads; 405B 126 x 16384, 128 heads"
)
#: Where the Llama rows' values come from, where they differ from the catalog's `SOURCES` (the field defaults and GPT
#: rows).
SOURCES: dict[str, str] = {
    **dict.fromkeys(("num_layers", "hidden_size", "num_attention_heads"), LLAMA3_SHAPE),
    **dict.fromkeys(
        (
            "tensor_parallel",
            "pipeline_parallel",
            "context_parallel",
            "virtual_pipeline",
            "micro_batch_size",
            "global_batch_size",
        ),
        LLAMA_H100,
    ),
    "num_query_groups": "8 key/value groups (grouped-query attention), Llama 3 (Dubey et al. 2024, Table 3)",
    "ffn_hidden_size": "SwiGLU FFN of Llama 3 (Dubey et al. 2024, Table 3): 14336, 28672, 53248",
    "seq_length": "8192, Llama 3's pretraining context (Dubey et al. 2024, Sec. 3.4) and NeMo's llama3 recipes",
    "vocab_size": "128,256 tokens, Llama 3's tokenizer (Dubey et al. 2024, Sec. 3.1); padded as NeMo pads it",
    "position_embedding_type": "RoPE (Su et al. 2021), as Llama 3 and NeMo's Llama3Config",
    "rotary_base": "500,000, Llama 3's RoPE base (Dubey et al. 2024, Sec. 3.1.1; NeMo Llama3Config8B)",
    "normalization": "RMSNorm, as Llama 3 and NeMo's LlamaConfig",
    "activation": "SwiGLU (gated linear unit with SiLU), as Llama 3 and NeMo's LlamaConfig (activation_func=silu)",
    "add_bias_linear": "no biases in linear layers, as Llama 3 and NeMo's LlamaConfig",
    "share_embeddings": "untied output layer, as Llama 3 8B/70B/405B and NeMo's Llama3Config",
    "hidden_dropout": "0, as Llama 3 and NeMo's Llama3Config",
    "attention_dropout": "0, as Llama 3 and NeMo's Llama3Config",
    "pipeline_counts_embedding_and_loss": "405B: on, 126 layers + embedding + loss = 128 over PP 8 x VP 8 "
    "(NeMo's llama31_405b recipe); off for 8B and 70B, whose layers divide evenly",
    "max_lr": "8B 3e-4 (NeMo's llama3_8b recipe; Llama 2 7B, Touvron et al. 2023); 70B 1.5e-4 (Llama 2 70B, "
    "Touvron et al. 2023, Table 1); 405B 8e-5 (Llama 3 paper, Sec. 3.4.1)",
    "min_lr_ratio": "8B, 70B: 10 % of max LR (Llama 2 paper, Sec. 2.2); 405B: 8e-7 = 1 % (Llama 3 paper, Sec. 3.4.1)",
    "adam_eps": "1e-5, as Llama 2 (Touvron et al. 2023, Sec. 2.2) and NeMo's Llama recipes",
    "warmup_tokens": "8B, 70B: 2000 steps of 4M tokens (Llama 2 paper, Sec. 2.2); 405B: 8000 steps of 4M tokens "
    "(Llama 3 paper, Sec. 3.4.1)",
    "decay_tokens": "cosine decay over the whole run, as Llama 3 405B (Sec. 3.4.1)",
    "train_tokens": "15T tokens, Llama 3's pretraining corpus (Dubey et al. 2024, Sec. 3.1)",
    "num_nodes": "the published layout's GPU count on 8-GPU nodes (8, 64, 1024 GPUs: DP 4, 2, 8): the distributed "
    "optimizer shards its state over DP x CP, which the 70B and 405B layouts need to fit",
    "recompute": "70B: selective (attention core), the catalog default. 8B, 405B: full recomputation of the first "
    "recompute_num_layers layers of each chunk, the least that fits 80 GB with 5 % to spare under the planner's "
    "default stack (`nemo-recipes plan llama_8b`): NVIDIA's runs recompute nothing but reduce gradients in BF16 "
    "(grad_reduce_in_fp32 off in NeMo's performance scripts), where NeMo's default keeps them in FP32",
    "recompute_num_layers": "8B: 16 of 32 layers; 405B: 1 of each 2-layer chunk (see recompute)",
}


#: The recipe values LlamaForCausalLM holds (field -> (the only value, why)); a family built on Llama's layer (Qwen3)
#: starts from them.
HELD: dict[str, tuple[Any, str]] = {
    "position_embedding_type": ("rope", "its positions are rotary (RoPE) only"),
    "normalization": ("RMSNorm", "its norms are RMSNorm"),
    "activation": ("swiglu", "its MLP is SwiGLU"),
    "add_bias_linear": (False, "its exporter here writes no linear biases"),
    "rotary_percent": (1.0, "its rotary embedding turns every dimension of a head"),
    "qk_layernorm": (False, "it has no norm of queries and keys"),
}


def _problems(spec: Any) -> list[Problem]:
    from nemo_recipes.families.hf_mapping import values_not_held

    return values_not_held(spec, ARCHITECTURE, HELD, "Llama", "a GPT-shaped recipe (gpt_*)")


def _config(spec: Any, vocab: int, eod: Optional[int]) -> dict[str, Any]:
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": vocab,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.ffn_hidden_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.kv_groups,
        "head_dim": spec.head_dim,
        "max_position_embeddings": spec.seq_length,
        "rms_norm_eps": spec.norm_epsilon,
        "rope_theta": float(spec.rotary_base),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": spec.attention_dropout,
        "tie_word_embeddings": bool(spec.share_embeddings),
        "bos_token_id": eod,
        "eos_token_id": eod,
    }


def _tied(config: Any) -> bool:
    return False  # LlamaConfig's default: an untied output layer


#: Llama 3's recipe as transformers' LlamaForCausalLM, both ways: queries, keys and values as separate projections in
#: head order (Megatron fuses them, grouped per key/value head), gate and up as separate projections (Megatron's
#: SwiGLU fc1 holds the gate rows, then the up rows: NeMo's `TransformFns.split_fc1`). NeMo 2.7.3's
#: `HFLlamaExporter`/`HFLlamaImporter` do the same mapping on a whole model in memory, loaded through the
#: checkpoint's NeMo context; here it runs one layer at a time on the checkpoint's tensors, so that a model larger
#: than RAM converts and a checkpoint without that context (a smoke run's) converts too. The tests check it against
#: NeMo's own transforms.
@functools.cache
def hf() -> HFMapping:
    """The mapping, built at first use (see `Family.mapping`)."""
    from nemo_recipes.families.hf_mapping import GateUp, HFMapping, Same, SplitQKV

    return HFMapping(
        architecture=ARCHITECTURE,
        model_type=MODEL_TYPE,
        layer_prefix="model.layers.{index}.",
        layer=(
            Same("input_norm.weight", "input_layernorm.weight"),
            SplitQKV("qkv.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
            Same("proj.weight", "self_attn.o_proj.weight"),
            Same("pre_mlp_norm.weight", "post_attention_layernorm.weight"),
            GateUp("fc1.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight"),
            Same("fc2.weight", "mlp.down_proj.weight"),
        ),
        globals={
            "embedding.weight": "model.embed_tokens.weight",
            "final_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight",
        },
        config=_config,
        problems=_problems,
        shape_keys={
            "num_layers": "num_hidden_layers",
            "hidden_size": "hidden_size",
            "num_attention_heads": "num_attention_heads",
            "num_query_groups": "num_key_value_heads",
            "ffn_hidden_size": "intermediate_size",
            "kv_channels": "head_dim",
            "rotary_base": "rope_theta",
            "share_embeddings": "tie_word_embeddings",
            "vocab_size": "vocab_size",
        },
        config_defaults={
            "num_key_value_heads": lambda config: config.get("num_attention_heads"),  # multi-head attention
            "tie_word_embeddings": _tied,
        },
        fixed={
            "hidden_act": ("silu", "the recipes' SwiGLU gates with SiLU"),
            "rms_norm_eps": (NORM_EPSILON, f"the recipes' norms use eps={NORM_EPSILON}"),
            "attention_bias": (False, "the recipes' Llama has no linear biases"),
            "mlp_bias": (False, "the recipes' Llama has no linear biases"),
            "rope_scaling": (None, "the recipes' RoPE is unscaled (Llama 3.1's long-context scaling is not modelled)"),
        },
    )


FAMILY = Family(
    name="llama",
    display_name="Llama",
    summary="Llama 3 architecture: RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases, untied output layer",
    rows=ROWS,
    sources=SOURCES,
    layer=dense_layer,
    mapping=hf,
)
