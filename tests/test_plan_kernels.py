"""Kernel efficiencies by shape (plan/kernels.py) and how the step model uses them: fused attention by sequence
length, head dimension and mask from the published cuDNN figures; GEMMs by waves and depth; the step's terms."""

from __future__ import annotations

import pytest

from nemo_recipes.catalog import RECIPES
from nemo_recipes.plan import kernels
from nemo_recipes.plan.flops import forward_flops_per_token
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.throughput import EXPERT_PARTS, STEP_TERMS, estimate_throughput

PEAK = kernels.ATTENTION_REFERENCE_TFLOPS


@pytest.mark.parametrize(
    "seq, head_dim, causal, backward, published",
    [
        (4096, 128, True, False, 518),  # FlashAttention-3 paper, Fig. 5, cuDNN, causal, head dim 128
        (512, 128, False, False, 497),
        (16384, 64, False, True, 433),  # Fig. 6, backward, head dim 64
        (2048, 256, True, False, 450),
    ],
)
def test_attention_reproduces_the_published_points(seq, head_dim, causal, backward, published):
    assert kernels.attention_efficiency(seq, head_dim, causal, backward) * PEAK == pytest.approx(published)


def test_attention_speeds_up_with_sequence_length_and_the_mask_costs_most_on_short_sequences():
    for causal in (True, False):
        for backward in (True, False):
            values = [kernels.attention_efficiency(s, 128, causal, backward) for s in (512, 2048, 16384)]
            assert values[0] < values[1] <= values[2] * 1.05  # cuDNN's non-causal forward flattens after 2k
    gap = [
        kernels.attention_efficiency(s, 128, False, False) / kernels.attention_efficiency(s, 128, True, False)
        for s in (512, 16384)
    ]
    assert gap[0] > 1.5 > 1.15 > gap[1] > 1.0
    # The causal backward is derived: the non-causal backward times the forward's causal ratio.
    ratio = kernels.attention_efficiency(1024, 128, True, False) / kernels.attention_efficiency(1024, 128, False, False)
    causal_b = kernels.attention_efficiency(1024, 128, True, True)
    assert causal_b == pytest.approx(kernels.attention_efficiency(1024, 128, False, True) * ratio)


def test_attention_interpolates_between_points_and_holds_at_the_ends():
    low, high = (kernels.attention_efficiency(s, 128, True, False) for s in (2048, 4096))
    between = kernels.attention_efficiency(2048 * 2**0.5, 128, True, False)  # halfway in log2
    assert between == pytest.approx((low + high) / 2)
    assert kernels.attention_efficiency(128, 128, True, False) == kernels.attention_efficiency(512, 128, True, False)
    assert kernels.attention_efficiency(131072, 128, True, True) == kernels.attention_efficiency(16384, 128, True, True)
    # Head dimension: 64 is slower per FLOP than 128; 96 lies between; the backward above 128 holds at 128.
    d64, d96, d128 = (kernels.attention_efficiency(8192, d, True, False) for d in (64, 96, 128))
    assert d64 < d96 < d128
    assert kernels.attention_efficiency(8192, 256, False, True) == kernels.attention_efficiency(8192, 128, False, True)


def test_gemm_wave_quantisation_and_depth():
    tile = kernels.GEMM_TILE
    full = kernels.wave_fraction(tile[0] * 12, tile[1] * 11, 132)  # 132 tiles: one full wave on an H100
    assert full == 1.0
    # 133 tiles of 128 x 256 (or 134 of 256 x 128, the better): a second wave for one or two tiles.
    one_more = kernels.wave_fraction(tile[0] * 133, tile[1], 132)
    assert one_more == pytest.approx(134 / 264)
    assert kernels.wave_fraction(tile[0] * 133, tile[1], None) == 1.0  # unknown SM count: no quantisation
    # Batched GEMMs quantise over all their tiles.
    assert kernels.wave_fraction(tile[0], tile[1], 132, batch=132) == 1.0
    # Depth: FP8 pays twice the K of BF16 for a tile's fixed cost, so it gains more from deep GEMMs.
    for k in (256, 1024, 8192):
        assert kernels.depth_fraction(k, 1) < kernels.depth_fraction(k, 2) < 1.0
    assert kernels.depth_fraction(8192, 1) / kernels.depth_fraction(256, 1) > kernels.depth_fraction(
        8192, 2
    ) / kernels.depth_fraction(256, 2)


def _attention_s_per_flop(seq: int, cp: int = 1) -> float:
    spec = RECIPES["gpt_7b"].replace(seq_length=seq, context_parallel=cp, global_batch_size=64)
    result = estimate_throughput(spec, Cluster.of(1, 8, "h100"))
    tokens = spec.global_batch_size * seq / 8  # per GPU
    return result.breakdown_s["attention"] / (tokens * forward_flops_per_token(spec).attention)


def test_long_sequences_run_attention_faster_per_flop():
    assert _attention_s_per_flop(16384) < 0.85 * _attention_s_per_flop(2048)


def test_context_parallel_attention_is_one_causal_step_and_unmasked_half_chunks():
    from nemo_recipes.plan.hardware import get_gpu
    from nemo_recipes.plan.throughput import CONSTANTS, _fused_attention_s, _Rates

    rates = _Rates.of(get_gpu("h100"), False, CONSTANTS)
    flops = 1e15
    forward, backward = _fused_attention_s(flops, 16384, 4, 128, rates)
    eff = kernels.attention_efficiency
    expected_f = flops / rates.attention * (0.25 / eff(4096, 128, True, False) + 0.75 / eff(2048, 128, False, False))
    expected_b = (
        2.5 * flops / rates.attention * (0.25 / eff(4096, 128, True, True) + 0.75 / eff(2048, 128, False, True))
    )
    assert (forward, backward) == pytest.approx((expected_f, expected_b))
    # Without CP: one causal kernel over the whole sequence.
    assert _fused_attention_s(flops, 16384, 1, 128, rates)[0] == pytest.approx(
        flops / rates.attention / eff(16384, 128, True, False)
    )


def test_step_terms_add_up_to_the_step_and_name_the_dominant_one():
    cluster = Cluster.of(4, 8, "h100")
    result = estimate_throughput(RECIPES["gpt_70b"], cluster)
    terms = result.terms_s
    assert set(terms) == set(STEP_TERMS)
    assert sum(terms.values()) == pytest.approx(result.step_time_s, rel=1e-9)
    parts = sum(STEP_TERMS.values(), ())
    dense_parts = [part for part in parts if part not in EXPERT_PARTS]
    assert sorted(dense_parts) == sorted(result.breakdown_s)  # every part in exactly one term
    experts = estimate_throughput(RECIPES["mixtral_moe_8x7b"], Cluster.of(8, 8, "h100"))
    assert sorted(parts) == sorted(experts.breakdown_s)  # a Mixture of Experts' parts too
    assert sum(experts.terms_s.values()) == pytest.approx(experts.step_time_s, rel=1e-9)
    assert result.dominant_term == max(terms, key=lambda name: terms[name]) == "matmul"
    data = result.to_dict()
    assert data["dominant_term"] == "matmul" and data["terms_s"] == terms
    # A deep pipeline with few micro-batches is slow because of its bubble, and the report says so.
    bubbly = RECIPES["gpt_70b"].replace(
        pipeline_parallel=8, tensor_parallel=4, virtual_pipeline=None, global_batch_size=8, micro_batch_size=1
    )
    assert estimate_throughput(bubbly, cluster).dominant_term == "pipeline_bubble"


def test_flash_attention_2_is_the_papers_orange_bars_and_slower_than_cudnn_on_hopper():
    assert kernels.attention_efficiency(16384, 128, True, False, "flash-attn-2") * PEAK == pytest.approx(335)
    assert kernels.attention_efficiency(1024, 64, False, True, "flash-attn-2") * PEAK == pytest.approx(238)
    for seq in (512, 4096, 16384):
        for causal in (True, False):
            for backward in (True, False):
                fa2 = kernels.attention_efficiency(seq, 128, causal, backward, "flash-attn-2")
                assert fa2 < kernels.attention_efficiency(seq, 128, causal, backward)
    # The stack that runs it (Transformer Engine with NVTE_FUSED_ATTN=0, or its early-2024 releases) makes the
    # step's attention slower and nothing else.
    spec, cluster = RECIPES["gpt_7b"].replace(seq_length=16384, global_batch_size=64), Cluster.of(1, 8, "h100")
    cudnn = estimate_throughput(spec, cluster).breakdown_s
    fa2 = estimate_throughput(spec, cluster, stack="transformer-engine-flash-attn").breakdown_s
    assert fa2["attention"] > 1.4 * cudnn["attention"]
    assert fa2["dense_matmul"] == cudnn["dense_matmul"]
