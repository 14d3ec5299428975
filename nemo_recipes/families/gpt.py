"""The GPT family: GPT-3's architecture (learned positions, LayerNorm, GELU MLP, biases, tied embeddings), the five
rows of the seed table, and GPT-2's Hugging Face class. Its values are the catalog's field defaults, so their sources
are the catalog's `SOURCES`, and it adds none of its own."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Optional

from nemo_recipes.errors import Problem
from nemo_recipes.families.blocks import NORM_EPSILON, dense_layer
from nemo_recipes.families.family import Family

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import HFMapping

ARCHITECTURE = "GPT2LMHeadModel"
MODEL_TYPE = "gpt2"


def _row(
    label: str, layers: int, hidden: int, heads: int, tp: int, pp: int, mbs: int, gbs: int, seq: int, **choices: Any
) -> dict[str, Any]:
    """One seed row, in the seed's column order; FFN is 4 x hidden as in GPT-3."""
    return dict(
        size_label=label,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        seq_length=seq,
        ffn_hidden_size=4 * hidden,
        **choices,
    )


#: The seed table's rows (`megatron-recipes.txt`, "Common Model Configurations"); the sources of their values are the
#: catalog's `SOURCES`, whose field defaults are GPT-3's.
ROWS: dict[str, dict[str, Any]] = {
    #                label  layers hidden heads TP PP  MBS  GBS   seq
    "gpt_1_3b": _row("1.3B", 24, 2048, 16, 1, 1, 4, 256, 2048, max_lr=2.0e-4),
    "gpt_7b": _row("7B", 32, 4096, 32, 1, 1, 2, 512, 4096, max_lr=1.2e-4, recompute="full"),
    "gpt_13b": _row("13B", 40, 5120, 40, 2, 1, 1, 512, 4096, max_lr=1.0e-4),
    "gpt_70b": _row("70B", 80, 8192, 64, 8, 4, 1, 1024, 4096, max_lr=0.8e-4, num_nodes=4),
    "gpt_175b": _row("175B", 96, 12288, 96, 8, 8, 1, 1536, 2048, max_lr=0.6e-4, num_nodes=8),
}


def _problems(spec: Any) -> list[Problem]:
    from nemo_recipes.families.hf_mapping import values_not_held

    """What GPT2LMHeadModel cannot express, each with the recipe field, its value and the fix."""
    wanted = {
        "position_embedding_type": ("learned_absolute", "it has a learned position table only"),
        "normalization": ("LayerNorm", "its norms are LayerNorm"),
        "activation": ("gelu", "its MLP is one GELU layer, not gated"),
        "add_bias_linear": (True, "every linear layer of it has a bias"),
        "share_embeddings": (True, "its output layer is the word embeddings"),
        "qk_layernorm": (False, "it has no norm of queries and keys"),
    }
    if spec.kv_groups != spec.num_attention_heads:
        wanted["num_query_groups"] = (None, "its attention has one key and value head per query head")
    found = values_not_held(spec, ARCHITECTURE, wanted, "GPT-2", "a Llama-shaped recipe (llama_*)")
    if spec.head_dim * spec.num_attention_heads != spec.hidden_size:
        found.append(
            Problem(
                "kv_channels",
                spec.kv_channels,
                "GPT2LMHeadModel's heads are hidden_size / heads wide.",
                "leave kv_channels unset (hidden_size / num_attention_heads).",
            )
        )
    return found


def _config(spec: Any, vocab: int, eod: Optional[int]) -> dict[str, Any]:
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": vocab,
        "n_positions": spec.seq_length,
        "n_embd": spec.hidden_size,
        "n_layer": spec.num_layers,
        "n_head": spec.num_attention_heads,
        "n_inner": spec.ffn_hidden_size,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": spec.norm_epsilon,
        "resid_pdrop": spec.hidden_dropout,
        "embd_pdrop": spec.hidden_dropout,
        "attn_pdrop": spec.attention_dropout,
        "tie_word_embeddings": True,
        # No end-of-document token without a tokenizer: GPT2Config's default (50256) would name none here.
        "bos_token_id": eod,
        "eos_token_id": eod,
    }


def _renamed(key: str) -> Optional[str]:
    """The GPT-2 checkpoints on the Hub name their tensors without the `transformer.` prefix."""
    return None if key.startswith(("transformer.", "lm_head.")) else "transformer." + key


#: GPT-3's recipe as transformers' GPT2LMHeadModel, both ways. GPT-2 stores its linear layers as `Conv1D` ([in, out],
#: the transpose of Megatron's [out, in]) and its attention projection as queries, keys and values concatenated, where
#: Megatron interleaves them per head. Its GELU is `gelu_new`, the tanh approximation: the one Megatron computes too,
#: since the recipes fuse bias and GELU (training/model.py `fusion_values`) and Megatron's fused bias-GELU is that
#: approximation (megatron/core/fusions/fused_bias_gelu.py).
@functools.cache
def hf() -> HFMapping:
    """The mapping, built at first use (see `Family.mapping`)."""
    from nemo_recipes.families.hf_mapping import ConcatQKV, HFMapping, Same

    return HFMapping(
        architecture=ARCHITECTURE,
        model_type=MODEL_TYPE,
        layer_prefix="transformer.h.{index}.",
        layer=(
            Same("input_norm.weight", "ln_1.weight"),
            Same("input_norm.bias", "ln_1.bias"),
            ConcatQKV("qkv.weight", "attn.c_attn.weight", transposed=True),
            ConcatQKV("qkv.bias", "attn.c_attn.bias"),
            Same("proj.weight", "attn.c_proj.weight", transposed=True),
            Same("proj.bias", "attn.c_proj.bias"),
            Same("pre_mlp_norm.weight", "ln_2.weight"),
            Same("pre_mlp_norm.bias", "ln_2.bias"),
            Same("fc1.weight", "mlp.c_fc.weight", transposed=True),
            Same("fc1.bias", "mlp.c_fc.bias"),
            Same("fc2.weight", "mlp.c_proj.weight", transposed=True),
            Same("fc2.bias", "mlp.c_proj.bias"),
        ),
        # The tensors outside the layers (the output layer is the tied embeddings).
        globals={
            "embedding.weight": "transformer.wte.weight",
            "position.weight": "transformer.wpe.weight",
            "final_norm.weight": "transformer.ln_f.weight",
            "final_norm.bias": "transformer.ln_f.bias",
        },
        config=_config,
        problems=_problems,
        shape_keys={
            "num_layers": "n_layer",
            "hidden_size": "n_embd",
            "num_attention_heads": "n_head",
            "ffn_hidden_size": "n_inner",
            "seq_length": "n_positions",  # the learned position table has one row per position of the sequence
            "vocab_size": "vocab_size",
        },
        config_defaults={"n_inner": lambda config: 4 * config.get("n_embd", 768)},  # GPT-2's default FFN width
        fixed={
            "activation_function": ("gelu_new", "Megatron's fused bias-GELU is the tanh approximation (gelu_new)"),
            "layer_norm_epsilon": (NORM_EPSILON, f"the recipes' norms use eps={NORM_EPSILON}"),
        },
        ignored=(".attn.bias", ".attn.masked_bias"),  # GPT-2's causal-mask buffers, which older savers write
        renamed=_renamed,
    )


FAMILY = Family(
    name="gpt",
    display_name="GPT",
    summary="GPT-3 architecture: learned positions, LayerNorm, GELU MLP, biases, tied embeddings",
    rows=ROWS,
    layer=dense_layer,
    mapping=hf,
)
