"""The memory model: Korthikanti et al. 2022 Fig. 1 reproduced exactly, and the model's structure (bytes per
parameter, parameter split, recompute, pipeline, CP, GQA/SwiGLU generalisation, the program's attention kernel and
TP-overlap buffers)."""

from __future__ import annotations

import math

import pytest

from nemo_recipes.catalog import RECIPES, RecipeSpec, parameter_count
from nemo_recipes.plan import GPUS, Cluster, estimate_memory
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.memory import (
    FRAGMENTATION,
    GIB,
    OTHER_FIXED_GIB,
    TP_OVERLAP_BUFFER_BYTES,
    activation_memory,
    layer_activation_bytes,
    layers_in_flight,
    params_per_gpu,
    state_bytes_per_param,
)

# Korthikanti et al. 2022 (arXiv:2205.05198) Fig. 1 models, as perf-model.md 2.4 gives them: V = 51200,
# b = 4 for 22B and 1 otherwise, v = 3 for 175B and 530B.
PAPER_MODELS = {
    "22B": dict(
        num_layers=48,
        hidden_size=6144,
        num_attention_heads=64,
        tensor_parallel=8,
        pipeline_parallel=1,
        micro_batch_size=4,
        virtual_pipeline=None,
    ),
    "175B": dict(
        num_layers=96,
        hidden_size=12288,
        num_attention_heads=96,
        tensor_parallel=8,
        pipeline_parallel=8,
        micro_batch_size=1,
        virtual_pipeline=3,
    ),
    "530B": dict(
        num_layers=105,
        hidden_size=20480,
        num_attention_heads=128,
        tensor_parallel=8,
        pipeline_parallel=35,
        micro_batch_size=1,
        virtual_pipeline=3,
    ),
    "1T": dict(
        num_layers=128,
        hidden_size=25600,
        num_attention_heads=160,
        tensor_parallel=8,
        pipeline_parallel=64,
        micro_batch_size=1,
        virtual_pipeline=None,
    ),
}
# (params + optimizer GiB, activations TP only, activations TP + SP + selective recompute), perf-model.md 2.3/2.4.
# The first two columns are exact binary fractions; 114.0234, 12.3516, 23.0762 and 32.958984 are printed rounded.
FIG1 = {
    "22B": (45.5625, 59.25, 9.5625),
    "175B": (45.5625, 66.84375, 12.3516),
    "530B": (31.640625, 114.0234, 23.0762),
    "1T": (32.958984, 131.25, 26.5625),
}


def paper_spec(label: str, **overrides) -> RecipeSpec:
    shape = PAPER_MODELS[label]
    world = shape["tensor_parallel"] * shape["pipeline_parallel"]
    p = shape["pipeline_parallel"]
    values = dict(
        name=f"korthikanti-{label}",
        size_label=label,
        ffn_hidden_size=4 * shape["hidden_size"],
        seq_length=2048,
        vocab_size=51200,
        num_nodes=world // 8,
        num_gpus_per_node=8,
        max_lr=1e-4,
        # DP = 1 and enough micro-batches to fill the pipeline (m >= p), as in the paper's runs.
        global_batch_size=shape["micro_batch_size"] * 8 * p,
        **shape,
    )
    values.update(overrides)
    return RecipeSpec(**values)


def _decimals(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("label", list(FIG1))
def test_korthikanti_fig1_params_and_optimizer(label):
    shape = PAPER_MODELS[label]
    l, h, t, p = shape["num_layers"], shape["hidden_size"], shape["tensor_parallel"], shape["pipeline_parallel"]
    # The paper counts 12 l h^2 parameters (no embeddings, biases or norms) at 18 bytes each, without sharding.
    per_param = sum(state_bytes_per_param(distributed_optimizer=False))
    gib = per_param * 12 * l * h * h / (t * p) / GIB
    expected = FIG1[label][0]
    assert round(gib, _decimals(expected)) == expected


@pytest.mark.parametrize("label", list(FIG1))
def test_korthikanti_fig1_activations_tensor_parallel_only(label):
    # The paper's Megatron had no fused attention: the s x s scores are stored.
    spec = paper_spec(label, sequence_parallel=False, recompute="none")
    gib = activation_memory(spec, fused_attention=False).layers / GIB
    expected = FIG1[label][1]
    assert round(gib, _decimals(expected)) == expected


@pytest.mark.parametrize("label", list(FIG1))
def test_korthikanti_fig1_activations_sequence_parallel_selective(label):
    spec = paper_spec(label, sequence_parallel=True, recompute="selective")
    gib = activation_memory(spec, fused_attention=False).layers / GIB
    expected = FIG1[label][2]
    assert round(gib, _decimals(expected)) == expected


def test_state_bytes_per_param_follow_megatron_distributed_optimizer_table():
    assert state_bytes_per_param(False) == (2.0, 4.0, 12.0)  # 18 bytes: bf16 weights, fp32 grads, fp32 Adam
    for d in (1, 2, 8, 64):
        weights, grads, optimizer = state_bytes_per_param(True, d)
        assert (weights, grads) == (2.0, 4.0)
        assert weights + grads + optimizer == pytest.approx(6 + 12 / d)


def test_gradients_are_held_in_the_bytes_of_the_program():
    spec, cluster = RECIPES["gpt_7b"], Cluster.of(1, 8, "h100")
    recipe = estimate_memory(spec, cluster)  # the recipes keep fp32 main gradients
    harness = estimate_memory(spec, cluster, stack="nemo-performance")  # NVIDIA's harness keeps them in bf16
    assert recipe.gradients == pytest.approx(2 * harness.gradients, rel=1e-9)
    assert recipe.weights == harness.weights and recipe.optimizer == harness.optimizer


@pytest.mark.parametrize("name", list(RECIPES))
def test_params_per_gpu_without_parallelism_is_the_catalog_count(name):
    spec = RECIPES[name].replace(tensor_parallel=1, pipeline_parallel=1, sequence_parallel=None, expert_parallel=1)
    assert params_per_gpu(spec.replace(expert_tensor_parallel=1)) == parameter_count(spec)


def test_params_per_gpu_of_a_llama_like_shape_is_the_catalog_count():
    spec = RECIPES["gpt_7b"].replace(
        num_query_groups=8,
        activation="swiglu",
        ffn_hidden_size=11008,
        share_embeddings=False,
        position_embedding_type="rope",
        normalization="RMSNorm",
    )
    assert params_per_gpu(spec) == parameter_count(spec)


def test_params_split_over_tensor_and_pipeline_parallel():
    spec = RECIPES["gpt_175b"]
    full = params_per_gpu(spec.replace(tensor_parallel=1, pipeline_parallel=1))
    split = params_per_gpu(spec)
    # The first stage holds 1/p of the layers over t ranks, plus the embedding; norms and some biases replicate.
    assert full / (spec.tensor_parallel * spec.pipeline_parallel) < split < full / spec.pipeline_parallel


def test_weights_gradients_optimizer_are_separate_numbers():
    spec = RECIPES["gpt_13b"]
    memory = estimate_memory(spec, Cluster.of(1, 8, "h100"))
    params = params_per_gpu(spec)
    dp = 8 // spec.model_parallel_size
    assert memory.weights == pytest.approx(2 * params / GIB)
    assert memory.gradients == pytest.approx(4 * params / GIB)
    assert memory.optimizer == pytest.approx(12 / dp * params / GIB)
    without = estimate_memory(spec.replace(distributed_optimizer=False), Cluster.of(1, 8, "h100"))
    assert without.optimizer == pytest.approx(12 * params / GIB)
    assert without.weights == memory.weights and without.gradients == memory.gradients


def test_fp8_does_not_change_the_model_state_accounting():
    spec = RECIPES["gpt_7b"]
    bf16 = estimate_memory(spec, "h100")
    fp8 = estimate_memory(spec.replace(precision="fp8"), "h100")
    assert (fp8.weights, fp8.gradients, fp8.optimizer) == (bf16.weights, bf16.gradients, bf16.optimizer)


def test_other_is_the_stated_allowance_and_capacity_is_the_gpu_memory():
    memory = estimate_memory(RECIPES["gpt_1_3b"], "h200")
    tensors = memory.weights + memory.gradients + memory.optimizer + memory.activations
    assert memory.other == pytest.approx(OTHER_FIXED_GIB + FRAGMENTATION * tensors)
    assert memory.capacity == GPUS["h200"].memory_gib
    assert memory.total == pytest.approx(tensors + memory.other)
    assert estimate_memory(RECIPES["gpt_1_3b"]).capacity is None
    assert estimate_memory(RECIPES["gpt_1_3b"], Cluster.of(1, 8)).fits is None


@pytest.mark.parametrize("name", list(RECIPES))
def test_more_recompute_means_less_activation_memory(name):
    spec = RECIPES[name]
    none, selective, full = (
        activation_memory(spec.replace(recompute=r, recompute_num_layers=None), fused_attention=False).total
        for r in ("none", "selective", "full")
    )
    assert full < selective < none
    # Fused attention stores no scores, so selective recompute saves (almost) nothing over none.
    fused = [
        activation_memory(spec.replace(recompute=r, recompute_num_layers=None), fused_attention=True).total
        for r in ("none", "selective", "full")
    ]
    assert fused[2] < fused[1] == fused[0]


def test_partial_full_recompute_lies_between_none_and_full():
    spec = RECIPES["gpt_7b"]  # 32 layers, PP 1
    totals = [
        activation_memory(spec.replace(recompute="full", recompute_num_layers=k), fused_attention=True).layers
        for k in (1, 16, 31)
    ]
    assert totals == sorted(totals, reverse=True)
    assert activation_memory(spec.replace(recompute="none"), fused_attention=True).layers > totals[0]
    assert totals[-1] > activation_memory(spec.replace(recompute="full"), fused_attention=True).layers


def test_fused_attention_drops_the_score_term_like_selective_recompute():
    spec = RECIPES["gpt_7b"].replace(recompute="none")
    fused = activation_memory(spec, fused_attention=True).layers
    assert fused == activation_memory(spec.replace(recompute="selective"), fused_attention=False).layers
    assert fused < activation_memory(spec, fused_attention=False).layers


def test_memory_follows_the_stack_the_plan_names():
    spec, cluster = RECIPES["gpt_7b"], Cluster.of(1, 8, "h100")
    default = estimate_memory(spec, cluster)
    container = estimate_memory(spec, cluster, stack="transformer-engine")
    without_te = estimate_memory(spec, cluster, stack="megatron-core")
    assert default == container and default.detail["attention"] == "fused"
    assert without_te.detail["attention"] == "unfused"
    # The 5as^2b score term of the layer being recomputed: about 5 GiB for gpt_7b (the gap).
    assert 4.5 < without_te.total - default.total < 6.0


def test_tp_overlap_buffers_are_counted_only_when_the_program_overlaps():
    spec = RECIPES["gpt_70b"]  # TP 8 with SP: overlap on with Transformer Engine on Hopper
    cluster = Cluster.of(4, 8, "h100")
    on = estimate_memory(spec, cluster)
    expected = TP_OVERLAP_BUFFER_BYTES[False] * spec.seq_length * spec.micro_batch_size * spec.hidden_size / GIB
    assert on.detail["other_tp_overlap_buffers"] == pytest.approx(expected, abs=1e-3)
    for off in (
        estimate_memory(spec, Cluster.of(4, 8, "a100-80gb")),
        estimate_memory(spec, cluster, stack="megatron-core"),
        estimate_memory(spec.replace(tp_comm_overlap=False), cluster),
    ):
        assert off.detail["other_tp_overlap_buffers"] == 0


def test_context_parallel_divides_activations():
    spec = RECIPES["gpt_70b"]
    cluster = Cluster.of(8, 8)
    one = activation_memory(spec, Layout.of(spec, cluster), fused_attention=True)
    two_cp = spec.replace(context_parallel=2)
    two = activation_memory(two_cp, Layout.of(two_cp, cluster), fused_attention=True)
    assert two.total == pytest.approx(one.total / 2)


def test_pipeline_first_stage_holds_l_layers_or_the_interleaved_factor():
    spec = RECIPES["gpt_175b"]  # l = 96, p = 8, DP 1 on 64 GPUs
    l, p = spec.num_layers, spec.pipeline_parallel
    assert layers_in_flight(Layout.of(spec)) == l
    assert layers_in_flight(Layout.of(spec.replace(global_batch_size=2))) == l * 2 / p  # m < p: m in flight
    interleaved = spec.replace(virtual_pipeline=4)
    assert layers_in_flight(Layout.of(interleaved)) == pytest.approx(l * (1 + (p - 1) / (p * 4)))
    assert layers_in_flight(Layout.of(spec.replace(pipeline_parallel=1, global_batch_size=800))) == l


def test_output_layer_and_cross_entropy_only_without_pipeline():
    spec = RECIPES["gpt_13b"]
    assert activation_memory(spec, fused_attention=True).output > 0
    assert activation_memory(spec.replace(pipeline_parallel=2), fused_attention=True).output == 0


def test_generalisation_reduces_to_korthikanti_for_gpt_shapes():
    s, b, h, a = 2048, 2, 4096, 32
    sbh = s * b * h
    common = dict(seq=s, micro_batch=b, hidden=h, heads=a, ffn=4 * h, kv_groups=a, gated=False)
    assert layer_activation_bytes(**common, tp=1, sequence_parallel=False, attention_core=True) == pytest.approx(
        sbh * (34 + 5 * a * s / h)
    )
    assert layer_activation_bytes(**common, tp=4, sequence_parallel=False, attention_core=True) == pytest.approx(
        sbh * (10 + 24 / 4 + 5 * a * s / (h * 4))
    )
    assert layer_activation_bytes(**common, tp=4, sequence_parallel=True, attention_core=False) == pytest.approx(
        34 * sbh / 4
    )


def test_gqa_and_swiglu_change_only_their_own_terms():
    s, b, h, a = 4096, 1, 4096, 32
    base = dict(seq=s, micro_batch=b, hidden=h, heads=a, tp=2, sequence_parallel=True, attention_core=False)
    mha = layer_activation_bytes(**base, ffn=4 * h, kv_groups=a, gated=False)
    gqa = layer_activation_bytes(**base, ffn=4 * h, kv_groups=8, gated=False)
    assert gqa < mha  # smaller K and V
    # Unfused SwiGLU stores twice the ffn-wide tensors of a GeLU MLP of the same width.
    swiglu = layer_activation_bytes(**base, ffn=11008, kv_groups=a, gated=True)
    gelu_double = layer_activation_bytes(**base, ffn=2 * 11008, kv_groups=a, gated=False)
    assert swiglu == pytest.approx(gelu_double)


def test_estimate_memory_never_raises_on_an_inconsistent_layout():
    spec = RECIPES["gpt_7b"].replace(pipeline_parallel=3, tensor_parallel=3)
    memory = estimate_memory(spec, Cluster.of(1, 8, "h100"))
    assert math.isfinite(memory.total) and memory.total > 0


def test_megatron_formula_benchmark_agrees_where_both_model_the_same_thing():
    from benchmarks.planner_vs_megatron_memory import megatron_theoretical_memory

    for name in ("gpt_13b", "gpt_70b", "gpt_175b"):  # SP + selective: both count 34 sbh/t per layer
        spec = RECIPES[name]
        cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, "h100")
        layout = Layout.of(spec, cluster)
        theirs = megatron_theoretical_memory(spec, layout)
        ours = estimate_memory(spec, cluster)
        assert theirs.layers_gib == pytest.approx(ours.detail["activations_layers"], rel=1e-3)
        # The parameter counts differ only by biases, learned positions and replicated norms (under 2 %).
        assert 1.0 < layout.params_per_rank / theirs.params_most_loaded < 1.02
    # Full recompute: the formula charges every layer in full, the planner only the recomputed layers' inputs.
    spec = RECIPES["gpt_7b"]
    layout = Layout.of(spec, Cluster.of(1, 8, "h100"))
    assert (
        megatron_theoretical_memory(spec, layout).layers_gib
        > 10 * estimate_memory(spec, Cluster.of(1, 8, "h100")).detail["activations_layers"]
    )


LLAMA_ROWS = ["llama_8b", "llama_70b", "llama_405b"]


@pytest.mark.parametrize("name", LLAMA_ROWS)
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_llama_weights_per_gpu_count_gqa_swiglu_untied_output_and_no_biases(name, tp):
    spec = RECIPES[name].replace(
        tensor_parallel=tp, pipeline_parallel=1, virtual_pipeline=None, pipeline_counts_embedding_and_loss=False
    )
    h, ffn, d = spec.hidden_size, spec.ffn_hidden_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_query_groups * d  # 8 K/V heads, not one per query head
    sharded = h * (q + 2 * kv) + q * h + 3 * h * ffn  # QKV, proj; SwiGLU's gate, up and down matrices
    output = 2 * spec.padded_vocab_size * h  # embeddings and the untied output layer
    expected = spec.num_layers * (sharded / tp + 2 * h) + output / tp + h  # RMSNorm weights replicated over TP
    assert params_per_gpu(spec) == pytest.approx(expected, rel=1e-12)


def test_llama_activations_follow_query_groups_and_the_gate():
    spec = RECIPES["llama_8b"].replace(recompute="selective")
    held = activation_memory(spec, fused_attention=True).layers
    assert activation_memory(spec.replace(num_query_groups=None), fused_attention=True).layers > held
    assert activation_memory(spec.replace(activation="gelu"), fused_attention=True).layers < held


def test_untied_output_layer_is_a_second_vocabulary_matrix_in_memory():
    spec, cluster = RECIPES["llama_8b"], Cluster.of(1, 8, "h100")
    tied = spec.replace(share_embeddings=True)
    extra = spec.padded_vocab_size * spec.hidden_size
    assert params_per_gpu(spec) - params_per_gpu(tied) == extra
    assert estimate_memory(spec, cluster).weights - estimate_memory(tied, cluster).weights == pytest.approx(
        2 * extra / GIB
    )


def test_the_head_width_scales_q_k_v_and_the_projection_input():
    spec = RECIPES["llama_8b"].replace(recompute="selective")
    base = activation_memory(spec, fused_attention=True).layers
    wide = activation_memory(spec.replace(kv_channels=256), fused_attention=True).layers
    s, b, t, c = spec.seq_length, spec.micro_batch_size, spec.tensor_parallel, 2
    held = layers_in_flight(Layout.of(spec))
    # Q and the output-projection input (32 heads) and K and V (8 groups), each 128 channels wider per head.
    extra = held * s * b * (4 * 32 + 4 * 8) * 128 / t / c
    assert wide - base == pytest.approx(extra)
