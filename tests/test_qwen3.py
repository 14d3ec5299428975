"""The Qwen3 dense family on the fast path (no NeMo): its rows hold NeMo 2.7.3's Qwen3Config8B/32B shapes and its
pretraining recipes' layouts, typed in again here; the counts are NeMo's own (tests/test_qwen3_nemo.py builds them);
the query and key norms are tensors of each layer; the planner, `show` and the Hugging Face mapping take them."""

from __future__ import annotations

import pytest

from nemo_recipes import catalog
from nemo_recipes.catalog import RECIPES
from nemo_recipes.families import REGISTRY, Architecture
from nemo_recipes.plan import Cluster, validate

#: NeMo 2.7.3: Qwen3Config8B/32B (layers, hidden, heads, FFN) and its qwen3_8b/qwen3_32b pretrain_recipe defaults
#: (TP, PP, CP, micro batch, global batch, nodes).
ROWS = {
    #                   layers hidden heads  FFN   TP PP CP MBS GBS nodes
    "qwen3_dense_8b": (36, 4096, 32, 12288, 4, 1, 1, 2, 32, 1),
    "qwen3_dense_32b": (64, 5120, 64, 25600, 8, 2, 1, 2, 32, 2),
}
COLUMNS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "tensor_parallel",
           "pipeline_parallel", "context_parallel", "micro_batch_size", "global_batch_size", "num_nodes")  # fmt: skip
#: Parameter counts of NeMo's own Qwen3Config8B (the issue's figure) and Qwen3Config32B, built on the meta device.
NEMO_COUNTS = {"qwen3_dense_8b": 8_190_735_360, "qwen3_dense_32b": 32_762_123_264}


@pytest.mark.parametrize("name", list(ROWS))
def test_qwen3_rows_hold_nemos_shape_layout_and_architecture(name):
    spec = RECIPES[name]
    assert tuple(getattr(spec, c) for c in COLUMNS) == ROWS[name]
    assert (spec.num_query_groups, spec.head_dim, spec.vocab_size, spec.seq_length) == (8, 128, 151_936, 4096)
    assert (spec.position_embedding_type, spec.rotary_base, spec.normalization, spec.norm_epsilon) == (
        "rope", 1_000_000, "RMSNorm", 1e-6
    )  # fmt: skip
    assert spec.qk_layernorm and spec.activation == "swiglu" and not spec.add_bias_linear
    assert not spec.share_embeddings and (spec.hidden_dropout, spec.attention_dropout) == (0.0, 0.0)
    assert spec.family == "qwen3" and catalog.config_class_name(spec) == "Qwen3Config" + spec.size_label
    # Every value the row states has a Qwen3 source, not the GPT seed's or the catalog defaults'.
    for field in COLUMNS + ("vocab_size", "rotary_base", "norm_epsilon", "qk_layernorm", "kv_channels", "max_lr"):
        assert catalog.source(spec, field) != catalog.SOURCES.get(field), field


@pytest.mark.parametrize("name", list(ROWS))
def test_qwen3_counts_are_nemos_with_a_vocabulary_that_needs_no_padding(name):
    spec = RECIPES[name]
    assert spec.num_parameters == NEMO_COUNTS[name]
    # 151,936 = 128 x 1187: no padding at the row's TP (NeMo pads nothing: its Qwen3Config presets the vocabulary).
    assert spec.padded_vocab_size == 151_936


def test_the_32b_query_width_is_heads_times_head_dim_not_hidden():
    """Qwen3-32B: 64 heads of 128 channels = 8192 query channels, from and back to a hidden size of 5120."""
    arch = Architecture.of(RECIPES["qwen3_dense_32b"])
    shapes = {t.role: t.shape for t in arch.layer_tensors()}
    assert shapes["qkv.weight"] == (8192 + 2 * 8 * 128, 5120)
    assert shapes["proj.weight"] == (5120, 8192)
    # QK-norm: one head_dim-wide RMSNorm weight for the queries and one for the keys, whole on every TP rank.
    assert shapes["q_norm.weight"] == shapes["k_norm.weight"] == (128,)
    replicated = {t.role for t in arch.layer_tensors() if t.split == "replicated"}
    assert replicated == {"input_norm.weight", "pre_mlp_norm.weight", "q_norm.weight", "k_norm.weight"}
    assert arch.layer_params().replicated == 2 * 5120 + 2 * 128


def test_qk_layernorm_adds_two_head_dim_norms_to_each_layer():
    spec = RECIPES["llama_8b"]
    with_norms = spec.replace(qk_layernorm=True)
    assert with_norms.num_parameters - spec.num_parameters == 32 * 2 * 128
    layer_norm = with_norms.replace(normalization="LayerNorm")  # a LayerNorm has a bias too
    roles = {t.role for t in Architecture.of(layer_norm).layer_tensors()}
    assert {"q_norm.weight", "q_norm.bias", "k_norm.weight", "k_norm.bias"} <= roles


@pytest.mark.parametrize("name", list(ROWS))
def test_the_planner_plans_the_qwen3_rows_on_their_default_cluster(name):
    spec = RECIPES[name]
    report = validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node))
    assert report.valid, report.summary()


def test_the_hugging_face_classes_refuse_what_they_cannot_hold():
    qwen3, llama, gpt2 = REGISTRY["qwen3"].hf, REGISTRY["llama"].hf, REGISTRY["gpt"].hf
    assert qwen3.problems(RECIPES["qwen3_dense_8b"]) == []
    # Qwen3ForCausalLM has q_norm/k_norm in every layer; LlamaForCausalLM and GPT-2 have none.
    assert [p.field for p in qwen3.problems(RECIPES["llama_8b"])] == ["qk_layernorm"]
    assert [p.field for p in llama.problems(RECIPES["qwen3_dense_8b"])] == ["qk_layernorm"]
    assert "qk_layernorm" in {p.field for p in gpt2.problems(RECIPES["qwen3_dense_8b"])}


def test_the_hugging_face_config_is_qwen3s():
    spec = RECIPES["qwen3_dense_32b"]
    config = REGISTRY["qwen3"].hf.config(spec, 151_936, None)
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert (config["head_dim"], config["num_attention_heads"], config["hidden_size"]) == (128, 64, 5120)
    assert (config["rms_norm_eps"], config["rope_theta"], config["tie_word_embeddings"]) == (1e-6, 1e6, False)
    assert "mlp_bias" not in config and config["attention_bias"] is False


def test_a_norm_epsilon_outside_zero_to_one_is_refused_with_the_fix():
    from nemo_recipes.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as caught:
        RECIPES["qwen3_dense_8b"].replace(norm_epsilon=0.0)
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("norm_epsilon", 0.0) and "1e-5" in problem.fix
