"""The catalog's parameter counts against models NeMo 2 and Megatron-Core build (meta device: shapes, no memory).

Ground truth that does not go through our own model mapping: NeMo's own Llama 3 configs, and NeMo's GPTConfig given
each architecture field directly. The vocabulary is the Llama 3 tokenizer's 128,256 entries (a NullTokenizer of
128,255 plus its end-of-document token), padded by NeMo's get_vocab_size.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

import torch.nn.functional as F  # noqa: E402
from nemo.collections.common.tokenizers.null_tokenizer import NullTokenizer  # noqa: E402
from nemo.collections.llm.gpt.model.base import GPTConfig  # noqa: E402
from nemo.collections.llm.gpt.model.llama import Llama3Config8B, Llama3Config70B, Llama31Config405B  # noqa: E402
from nemo.lightning import get_vocab_size  # noqa: E402
from test_training_objects import single_rank_megatron  # noqa: E402, F401  (the one-rank process group fixture)

from nemo_recipes.catalog import RECIPES, RecipeSpec  # noqa: E402

pytestmark = [pytest.mark.nemo, pytest.mark.usefixtures("single_rank_megatron")]

# Fusions that need CUDA or Transformer Engine; they change no parameter.
CPU = dict(apply_rope_fusion=False, persist_layer_norm=False, bias_activation_fusion=False, bias_dropout_fusion=False)


def built_count(config: GPTConfig, vocab_size: int) -> int:
    config.init_model_with_meta_device = True
    config.use_cpu_initialization = True
    config.perform_initialization = False
    tokenizer = NullTokenizer(vocab_size=vocab_size - 1)  # NullTokenizer adds an end-of-document token
    model = config.configure_model(tokenizer, pre_process=True, post_process=True)
    return sum(p.numel() for p in model.parameters())


NEMO_LLAMA = {"llama_8b": Llama3Config8B, "llama_70b": Llama3Config70B, "llama_405b": Llama31Config405B}


@pytest.mark.parametrize("name,nemo_config", NEMO_LLAMA.items())
def test_llama_rows_count_what_nemo_builds_from_its_own_llama_configs(name, nemo_config):
    spec = RECIPES[name]
    config = nemo_config(**CPU)
    assert built_count(config, spec.vocab_size) == spec.replace(tensor_parallel=1).num_parameters
    # At the recipe's TP, NeMo pads to a multiple of 128 x TP, as the catalog does (70B: 128,512; 405B: 129,024).
    config.tensor_model_parallel_size = spec.tensor_parallel
    assert get_vocab_size(config, spec.vocab_size, config.make_vocab_size_divisible_by) == spec.padded_vocab_size


ACTIVATIONS = {"gelu": (False, F.gelu), "geglu": (True, F.gelu), "swiglu": (True, F.silu)}


def gpt_config(spec: RecipeSpec) -> GPTConfig:
    """NeMo's GPTConfig with every architecture field of `spec` set by hand (not through nemo_recipes.training)."""
    gated, activation = ACTIVATIONS[spec.activation]
    return GPTConfig(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        ffn_hidden_size=spec.ffn_hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_query_groups=spec.num_query_groups,
        kv_channels=spec.kv_channels,
        seq_length=spec.seq_length,
        position_embedding_type=spec.position_embedding_type,
        rotary_base=spec.rotary_base,
        rotary_percent=spec.rotary_percent,
        normalization=spec.normalization,
        gated_linear_unit=gated,
        activation_func=activation,
        add_bias_linear=spec.add_bias_linear,
        share_embeddings_and_output_weights=spec.share_embeddings,
        **CPU,
    )


SMALL = dict(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=1, ffn_hidden_size=96, seq_length=32)


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the Llama architecture: GQA, SwiGLU, RMSNorm, RoPE, no biases, untied
        {"kv_channels": 24, "num_query_groups": 2},  # head width apart from hidden / heads
        {"activation": "geglu", "add_bias_linear": True},
        {"activation": "gelu", "share_embeddings": True, "normalization": "LayerNorm"},
        {"position_embedding_type": "learned_absolute", "num_query_groups": None, "rotary_percent": 0.5},
    ],
)
def test_each_architecture_field_counts_what_megatron_builds(changes):
    spec = RECIPES["llama_8b"].replace(**{**SMALL, "vocab_size": 1000, **changes})
    assert built_count(gpt_config(spec), spec.vocab_size) == spec.replace(tensor_parallel=1).num_parameters
