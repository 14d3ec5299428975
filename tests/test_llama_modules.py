"""Tier (b): the model NeMo builds is the architecture the catalog row states. Each recipe, scaled down as `smoke`
scales it (same architecture, fewer and smaller layers), goes through NeMo's own `GPTConfig.configure_model` on the
CPU with the CPU compatibility layer's model settings, and the built Megatron-Core modules are read: activation and
gating (and the MLP's output, computed again by hand), norm class, query groups, rotary base, output layer, biases,
position table, parameter count."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

import fiddle as fdl  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from test_training_objects import single_rank_megatron  # noqa: E402, F401  (the one-rank process group fixture)

from nemo_recipes.catalog import RECIPES, RecipeSpec  # noqa: E402
from nemo_recipes.smoke_training import cpu_compat  # noqa: E402
from nemo_recipes.smoke_training.shape import HEADS_PER_GROUP, smoke_shape  # noqa: E402
from nemo_recipes.training import parts  # noqa: E402
from nemo_recipes.training.model import model  # noqa: E402

pytestmark = pytest.mark.nemo
LLAMAS = [name for name in RECIPES if name.startswith("llama_")]
GPTS = [name for name in RECIPES if name.startswith("gpt_")]


def _build(spec: RecipeSpec) -> tuple[object, object]:
    """(built GPTConfig, Megatron GPTModel) as NeMo builds them at set-up (with the recipe's tokenizer), on one rank,
    on the CPU."""
    nemo_model = model(spec)
    cpu_compat.cpu_model_settings(nemo_model.config)  # as the smoke worker's cpu_settings does
    config = fdl.build(nemo_model).config
    torch.manual_seed(0)
    gpt = config.configure_model(fdl.build(parts.tokenizer(spec)), pre_process=True, post_process=True)
    return config, gpt


@pytest.fixture(scope="module")
def built(request):
    """Every recipe's scaled-down model, built once for all the checks below."""
    request.getfixturevalue("single_rank_megatron")
    models = {}
    for name in RECIPES:
        if RECIPES[name].kv_lora_rank is not None:  # multi-latent attention builds only with Transformer Engine
            continue
        if RECIPES[name].num_moe_experts is not None:  # experts' dispatcher needs the CPU layer's patches: smoke's
            continue
        spec = smoke_shape(RECIPES[name]).spec
        models[name] = (spec, *_build(spec))
    return models


def _layers(gpt):
    return list(gpt.decoder.layers)


def _mlp_by_hand(mlp, x, activation, gated):
    """The MLP's output computed from its own weights: fc2(act(gate) * up) for a gated unit, else fc2(act(fc1))."""
    fc1 = x @ mlp.linear_fc1.weight.T + (mlp.linear_fc1.bias if mlp.linear_fc1.bias is not None else 0)
    if gated:
        gate, up = torch.chunk(fc1, 2, dim=-1)
        inner = activation(gate) * up
    else:
        inner = activation(fc1)
    return inner @ mlp.linear_fc2.weight.T + (mlp.linear_fc2.bias if mlp.linear_fc2.bias is not None else 0)


def _rotary_base(gpt, head_dim: int) -> float:
    """RoPE's base read back from the built inverse frequencies: inv_freq[i] = base ** (-2i / rotary_dim)."""
    inv_freq = gpt.rotary_pos_emb.inv_freq.double()
    rotary_dim = 2 * inv_freq.numel()
    assert rotary_dim == head_dim  # rotary_percent 1.0: every channel of a head rotates
    return float(inv_freq[1] ** (-rotary_dim / 2))


@pytest.mark.parametrize("name", LLAMAS)
def test_llama_recipes_build_swiglu_rmsnorm_gqa_rope_untied_without_biases(built, name):
    spec, config, gpt = built[name]
    full = RECIPES[name]
    # the scaled shape keeps the row's architecture: grouped-query attention (its heads per group up to
    # HEADS_PER_GROUP), the FFN ratio
    per_group = full.num_attention_heads // full.num_query_groups
    assert spec.num_attention_heads // spec.num_query_groups == min(per_group, HEADS_PER_GROUP) > 1
    assert spec.num_query_groups > 1
    assert spec.ffn_hidden_size / spec.hidden_size == full.ffn_hidden_size / full.hidden_size
    layers = _layers(gpt)
    assert len(layers) == spec.num_layers
    for layer in layers:
        mlp = layer.mlp
        # SwiGLU: SiLU with a gate, so fc1 holds gate and up projection (2 x FFN rows)
        assert mlp.activation_func is F.silu and config.gated_linear_unit
        assert mlp.linear_fc1.weight.shape == (2 * spec.ffn_hidden_size, spec.hidden_size)
        assert mlp.linear_fc2.weight.shape == (spec.hidden_size, spec.ffn_hidden_size)
        # RMSNorm: torch's here (no Transformer Engine), with a weight and no bias
        for norm in (layer.input_layernorm, layer.pre_mlp_layernorm):
            assert isinstance(norm, torch.nn.RMSNorm)
        # grouped-query attention: queries for every head, keys and values for each group
        attention = layer.self_attention
        assert attention.linear_qkv.weight.shape == (
            (spec.num_attention_heads + 2 * spec.num_query_groups) * spec.head_dim,
            spec.hidden_size,
        )
        assert attention.config.num_query_groups == spec.num_query_groups
    assert isinstance(gpt.decoder.final_layernorm, torch.nn.RMSNorm)
    # no bias in any linear layer (nor anywhere: RMSNorm has none)
    assert [n for n, _ in gpt.named_parameters() if n.endswith("bias")] == []
    # RoPE with Llama 3's base, and no learned position table
    assert gpt.position_embedding_type == "rope"
    assert _rotary_base(gpt, spec.head_dim) == pytest.approx(500_000, rel=1e-6)
    assert not hasattr(gpt.embedding, "position_embeddings")
    # an output layer of its own, not the input embedding
    assert gpt.share_embeddings_and_output_weights is False
    output, embedding = gpt.output_layer.weight, gpt.embedding.word_embeddings.weight
    assert output.shape == embedding.shape == (spec.padded_vocab_size, spec.hidden_size)
    assert output.data_ptr() != embedding.data_ptr() and not torch.equal(output, embedding)
    # and the model NeMo built has exactly the parameters the catalog counts for this shape
    assert sum(p.numel() for p in gpt.parameters()) == spec.num_parameters


@pytest.mark.parametrize("name", GPTS)
def test_gpt_recipes_still_build_gelu_layernorm_learned_positions_tied_with_biases(built, name):
    spec, config, gpt = built[name]
    for layer in _layers(gpt):
        assert layer.mlp.activation_func is F.gelu and not config.gated_linear_unit
        assert layer.mlp.linear_fc1.weight.shape == (spec.ffn_hidden_size, spec.hidden_size)
        assert isinstance(layer.input_layernorm, torch.nn.LayerNorm)
        assert layer.self_attention.linear_qkv.weight.shape == (3 * spec.hidden_size, spec.hidden_size)
        assert layer.self_attention.linear_qkv.bias is not None and layer.mlp.linear_fc1.bias is not None
        assert layer.self_attention.linear_proj.bias is not None and layer.mlp.linear_fc2.bias is not None
    assert gpt.position_embedding_type == "learned_absolute"
    assert gpt.embedding.position_embeddings.weight.shape == (spec.seq_length, spec.hidden_size)
    assert gpt.share_embeddings_and_output_weights is True and gpt.output_layer.weight is None
    assert sum(p.numel() for p in gpt.parameters()) == spec.num_parameters


@pytest.mark.parametrize("name", ["llama_8b", "gpt_1_3b"])
def test_the_mlp_computes_its_activation(built, name):
    """Reading the function is not enough: the MLP's forward (Megatron's fused bias-activation path) equals the
    activation computed by hand from its weights, SwiGLU for Llama (not GeGLU, what gating alone gives), GeLU for
    GPT."""
    spec, config, gpt = built[name]
    mlp = _layers(gpt)[0].mlp
    x = torch.randn(3, 2, spec.hidden_size)
    # Megatron's fused bias-GeLU is GeLU's tanh approximation (fused_bias_gelu.py)
    gelu = lambda t: F.gelu(t, approximate="tanh")  # noqa: E731
    activation, other_activation = (F.silu, gelu) if name.startswith("llama") else (gelu, F.silu)
    with torch.no_grad(), torch._dynamo.config.patch(disable=True):
        out, bias = mlp(x)
        if bias is not None:  # Megatron's RowParallelLinear hands its bias back for the fused bias-dropout-add
            out = out + bias
        expected = _mlp_by_hand(mlp, x, activation, config.gated_linear_unit)
        other = _mlp_by_hand(mlp, x, other_activation, config.gated_linear_unit)
    assert torch.allclose(out, expected, atol=1e-5)
    assert not torch.allclose(out, other, atol=1e-3)
    assert config.bias_activation_fusion is True  # the fused path is what ran


#: The dense rows with QK-norm: the Qwen3-MoE rows' attention is the same block, and their experts train in
#: test_moe_smoke.py and test_smoke_training.py, where the CPU layer's patches are engaged; DeepSeek-V3's multi-latent
#: attention normalises its latents, not each head (tests/test_deepseek.py).
QK_NORM_ROWS = [n for n in RECIPES if RECIPES[n].qk_layernorm and RECIPES[n].num_moe_experts is None]


@pytest.mark.parametrize("name", QK_NORM_ROWS)
def test_qk_layernorm_rows_build_a_query_and_a_key_rmsnorm_of_head_dim(built, name):
    """Qwen3's QK-norm as Megatron-Core's local layer spec builds it on the CPU: torch's RMSNorm over each head's
    channels, queries and keys apart, with the row's epsilon; rows without it build none (Megatron's IdentityOp)."""
    spec, config, gpt = built[name]
    assert config.qk_layernorm is True and config.layernorm_epsilon == spec.norm_epsilon == 1e-6
    for layer in _layers(gpt):
        attention = layer.self_attention
        for norm in (attention.q_layernorm, attention.k_layernorm):
            assert isinstance(norm, torch.nn.RMSNorm) and norm.eps == 1e-6
            assert norm.weight.shape == (spec.head_dim,)
        assert attention.q_layernorm is not attention.k_layernorm
    assert sum(p.numel() for p in gpt.parameters()) == spec.num_parameters
    without = built["llama_8b"][2]
    assert type(_layers(without)[0].self_attention.q_layernorm).__name__ == "IdentityOp"
