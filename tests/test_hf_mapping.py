"""The families' Hugging Face mappings on tensors, without training: the two directions are inverse bit for bit,
Megatron's fused QKV and SwiGLU layouts are read as NeMo's own transforms read them (`nemo.lightning.io.state
.TransformFns`, which NeMo's HFLlamaExporter/Importer use), and what a class cannot express is refused by field."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nemo_recipes.catalog import RECIPES
from nemo_recipes.families import REGISTRY, Architecture

pytestmark = [pytest.mark.nemo]

torch = pytest.importorskip("torch")


def _small(name: str):
    """The row with a small shape of its own kind: Llama and Qwen3 keep grouped-query attention (8 heads, 2 groups),
    Qwen3 its heads of 128 channels (8 x 128 query channels from a hidden size of 128)."""
    shape = {"num_layers": 2, "hidden_size": 128, "ffn_hidden_size": 448, "num_attention_heads": 8}
    if RECIPES[name].num_query_groups:
        shape["num_query_groups"] = 2
    return RECIPES[name].replace(**shape)


def _layer(arch: Architecture, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {t.role: torch.randn(t.shape, generator=generator).to(torch.bfloat16) for t in arch.layer_tensors()}


@pytest.mark.parametrize("name", ["gpt_1_3b", "llama_8b", "qwen3_dense_32b"])
def test_a_layer_to_hugging_face_and_back_is_bit_identical(name):
    spec = _small(name)
    arch, mapping = Architecture.of(spec), REGISTRY[name.split("_")[0]].hf
    layer = _layer(arch, 0)
    hf = mapping.layer_to_hf(arch, 3, layer)
    assert list(hf) == mapping.layer_keys(arch, 3)
    back = mapping.layer_from_hf(arch, 3, {k: v.contiguous() for k, v in hf.items()})
    assert sorted(back) == sorted(layer)
    for role, tensor in layer.items():
        assert torch.equal(back[role], tensor), role


def test_llama_qkv_and_swiglu_are_read_as_nemos_transforms_read_them():
    from nemo.lightning.io.state import TransformFns

    spec = _small("llama_8b")
    arch = Architecture.of(spec)
    megatron = SimpleNamespace(
        num_attention_heads=8, num_query_groups=2, kv_channels=spec.head_dim, hidden_size=spec.hidden_size
    )
    ctx = SimpleNamespace(source=SimpleNamespace(config=megatron), target=SimpleNamespace(config=megatron))
    layer = _layer(arch, 1)
    hf = REGISTRY["llama"].hf.layer_to_hf(arch, 0, layer)
    q, k, v = TransformFns.split_qkv(ctx, layer["qkv.weight"])
    assert torch.equal(hf["model.layers.0.self_attn.q_proj.weight"], q)
    assert torch.equal(hf["model.layers.0.self_attn.k_proj.weight"], k)
    assert torch.equal(hf["model.layers.0.self_attn.v_proj.weight"], v)
    gate, up = TransformFns.split_fc1(layer["fc1.weight"])
    assert torch.equal(hf["model.layers.0.mlp.gate_proj.weight"], gate)
    assert torch.equal(hf["model.layers.0.mlp.up_proj.weight"], up)
    assert torch.equal(arch.attention.merge_qkv(q, k, v), TransformFns.merge_qkv(ctx, q, k, v))


def test_gpt2_attention_is_queries_keys_values_concatenated_and_transposed():
    """GPT-2's Conv1D c_attn holds [in, 3 x hidden]: the query heads, then the key heads, then the value heads."""
    spec = _small("gpt_1_3b")
    arch = Architecture.of(spec)
    layer = _layer(arch, 2)
    c_attn = REGISTRY["gpt"].hf.layer_to_hf(arch, 0, layer)["transformer.h.0.attn.c_attn.weight"]
    heads, d = spec.num_attention_heads, spec.head_dim
    grouped = layer["qkv.weight"].reshape(heads, 3, d, spec.hidden_size)  # MHA: one group per head
    expected = torch.cat([grouped[:, i].reshape(heads * d, spec.hidden_size) for i in range(3)]).t()
    assert c_attn.shape == (spec.hidden_size, 3 * spec.hidden_size) and torch.equal(c_attn, expected)


def test_what_a_class_cannot_hold_is_refused_by_field():
    gpt2, llama = REGISTRY["gpt"].hf, REGISTRY["llama"].hf
    fields = {p.field for p in gpt2.problems(RECIPES["llama_8b"])}
    assert fields == {"position_embedding_type", "normalization", "activation", "add_bias_linear", "share_embeddings",
                      "num_query_groups"}  # fmt: skip
    fields = {p.field for p in llama.problems(RECIPES["gpt_7b"])}
    assert fields == {"position_embedding_type", "normalization", "activation", "add_bias_linear"}
    assert not gpt2.problems(RECIPES["gpt_175b"]) and not llama.problems(RECIPES["llama_405b"])
    assert [p.field for p in llama.problems(RECIPES["llama_8b"].replace(rotary_percent=0.5))] == ["rotary_percent"]


def test_qwen3_query_and_key_norms_take_the_names_nemos_qwen3_converters_give_them():
    """NeMo 2.7.3's HFQwen3Exporter maps `**.self_attention.q_layernorm.weight` to `**.self_attn.q_norm.weight` and
    `k_layernorm` to `k_norm` (its importer the reverse): the same pairs, through our roles, both ways."""
    from nemo_recipes.families.megatron_names import LAYER_KEYS

    spec = _small("qwen3_dense_8b")
    arch, mapping = Architecture.of(spec), REGISTRY["qwen3"].hf
    layer = _layer(arch, 3)
    hf = mapping.layer_to_hf(arch, 5, layer)
    for megatron, hf_name in (("q_layernorm", "q_norm"), ("k_layernorm", "k_norm")):
        (role,) = [r for r, keys in LAYER_KEYS.items() if keys == (f"self_attention.{megatron}.weight",)]
        assert layer[role].shape == (spec.head_dim,)
        assert hf[f"model.layers.5.self_attn.{hf_name}.weight"] is layer[role]
    assert not torch.equal(layer["q_norm.weight"], layer["k_norm.weight"])  # a swap would show


def _small_moe(name: str):
    """The MoE row with 4 experts of FFN 96, top-2, its attention as `_small` makes it."""
    return _small(name).replace(num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=96, ffn_hidden_size=96,
                                expert_parallel=1, expert_tensor_parallel=None)  # fmt: skip


@pytest.mark.parametrize("name, family", [("mixtral_moe_8x7b", "mixtral"), ("qwen3_moe_30b_a3b", "qwen3_moe")])
def test_a_moe_layer_to_hugging_face_and_back_is_bit_identical_and_reads_experts_as_nemo_does(name, family):
    """Each expert's fc1 (Megatron's stacked experts, global index first) splits into gate and up as NeMo's
    `TransformFns.split_fc1` splits a `local_experts.{i}.linear_fc1` (HFMixtralExporter, HFQwen3Exporter)."""
    from nemo.lightning.io.state import TransformFns

    spec = _small_moe(name)
    arch, mapping = Architecture.of(spec), REGISTRY[family].hf
    layer = _layer(arch, 4)
    hf = mapping.layer_to_hf(arch, 2, layer)
    assert list(hf) == mapping.layer_keys(arch, 2)
    experts = "model.layers.2." + ("block_sparse_moe.experts" if family == "mixtral" else "mlp.experts")
    gate, up, down = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    for e in range(4):
        nemo_gate, nemo_up = TransformFns.split_fc1(layer["experts.fc1.weight"][e])
        assert torch.equal(hf[f"{experts}.{e}.{gate}.weight"], nemo_gate)
        assert torch.equal(hf[f"{experts}.{e}.{up}.weight"], nemo_up)
        assert torch.equal(hf[f"{experts}.{e}.{down}.weight"], layer["experts.fc2.weight"][e])
    back = mapping.layer_from_hf(arch, 2, {k: v.contiguous() for k, v in hf.items()})
    assert sorted(back) == sorted(layer) and all(torch.equal(back[r], t) for r, t in layer.items())


def test_what_the_moe_classes_cannot_hold_is_refused_by_field():
    mixtral, qwen3_moe = REGISTRY["mixtral"].hf, REGISTRY["qwen3_moe"].hf
    assert not mixtral.problems(RECIPES["mixtral_moe_8x22b"]) and not qwen3_moe.problems(RECIPES["qwen3_moe_235b_a22b"])
    assert [p.field for p in mixtral.problems(RECIPES["llama_8b"])] == ["num_moe_experts"]
    changed = RECIPES["qwen3_moe_30b_a3b"].replace(moe_router_score_function="sigmoid", moe_router_pre_softmax=True,
                                                   moe_shared_expert_intermediate_size=768)  # fmt: skip
    assert {p.field for p in qwen3_moe.problems(changed)} == {
        "moe_router_score_function", "moe_router_pre_softmax", "moe_shared_expert_intermediate_size"}  # fmt: skip
