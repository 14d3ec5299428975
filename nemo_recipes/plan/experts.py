"""The routed experts of a Mixture-of-Experts layer on one GPU, per micro-batch: what the throughput model
(`throughput.py`) adds to a layer's dense work. Standard library only.

- **Who computes what.** A rank holds `experts / EP` whole experts, each split over ETP (`Layout.ep`, `Layout.etp`).
  Its micro-batch's `b·s/CP` tokens, split over TP by sequence parallelism, each pick top_k experts; the dispatch
  sends every copy to the rank of its expert and the ETP group gathers them, so with even routing a rank's experts
  receive `top_k · tokens / TP · ETP` token copies (Megatron-Core's MoEAlltoAllTokenDispatcher). The GEMMs of its
  local experts run as one grouped GEMM, each expert on its share of the copies (`grouped_gemm` of
  `ModelConstants`, an assumption refitted on the published rows).
- **Imbalance.** `RecipeSpec.moe_imbalance` is how many times its even share the busiest EP rank receives; every rank
  waits for it at the combine, so it sets the pace: its GEMMs, permutation and received all-to-all bytes scale by the
  factor. 1.0 is force-balanced routing, as NVIDIA's published MoE benchmarks run ("we force-balance the token
  distribution among experts", Megatron-Bridge performance summary).
- **Dispatch and combine.** Two all-to-alls forward (tokens out, results back) and two backward, each moving a rank's
  top_k copies of its tokens' hidden states (bf16). EP ranks lie ETP apart (Megatron-Core's expert rank order
  tp-ep-dp-pp), so the EP group spans EP x ETP consecutive ranks: the part of the exchange with peers inside the NVLink
  domain runs over NVLink, the rest over the NICs, both at once (the slower sets the time). `ep_overlap` of
  `ModelConstants` is the fraction hidden behind compute. With ETP > 1 the copies are all-gathered before the
  experts and reduce-scattered after, over the ETP group.
- **Latency.** `moe_layer_latency` of `ModelConstants`: seconds per MoE layer and micro-batch that no kernel's work
  explains (the dispatcher's host synchronisation for the split sizes, launch-bound small kernels).
- **Memory-bound work.** The permutation and unpermutation (`PERMUTE_BYTES_PER_HIDDEN`), the experts' activation
  function, and in FP8 the casts of the experts' GEMM inputs, at HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.blocks import Gemm, MoE
from nemo_recipes.plan.hardware import GPU, group_bandwidth_gb_s, nvlink_domain_size
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.model_constants import (
    ACTIVATION_BYTES,
    ACTIVATION_BYTES_PER_FFN,
    BACKWARD_BYTES_FACTOR,
    FP8_CAST_BYTES_PER_ELEMENT,
    PERMUTE_BYTES_PER_HIDDEN,
    ModelConstants,
)
from nemo_recipes.plan.rates import Rates, gemm_s


@dataclass(frozen=True)
class ExpertTimes:
    """Seconds of one MoE layer's routed experts on the busiest rank, per micro-batch, by kind of work."""

    matmul_f: float = 0.0
    matmul_b: float = 0.0
    memory_f: float = 0.0
    memory_b: float = 0.0
    dispatch_f: float = 0.0  # exposed all-to-all (dispatch and combine) and ETP gathers, forward
    dispatch_b: float = 0.0
    latency: float = 0.0  # `moe_layer_latency`, forward and backward together

    @property
    def forward(self) -> float:
        return self.matmul_f + self.memory_f + self.dispatch_f + self.latency / 2

    @property
    def backward(self) -> float:
        return self.matmul_b + self.memory_b + self.dispatch_b + self.latency / 2


NONE = ExpertTimes()


def once_per_token_gemms(arch: Architecture) -> list[Gemm]:
    """The layer's GEMMs that every token runs once, at TP (a Mixture of Experts' router and shared expert; its
    routed experts are `expert_times`')."""
    return [g for block in arch.blocks for g in (block.dense_gemms() if isinstance(block, MoE) else block.gemms())]


def routed_copies(moe: MoE, layout: Layout, imbalance: float) -> float:
    """Token copies the busiest rank's local experts compute per micro-batch (see the module's docstring)."""
    return moe.top_k * layout.tokens_per_rank / layout.tp * layout.etp * imbalance


def all_to_all_s(nbytes: float, layout: Layout, gpu: GPU, rates: Rates) -> float:
    """One all-to-all over the EP group of a rank that exchanges `nbytes` (its share to itself stays put): NVLink
    to the EP peers in its NVLink domain and the NIC to the others, concurrently."""
    ep, etp = layout.ep, layout.etp
    if ep <= 1:
        return 0.0
    near_ranks = min(ep, max(1, nvlink_domain_size(gpu, layout.gpus_per_node) // etp))
    near = nbytes * (near_ranks - 1) / ep / (gpu.nvlink_gb_s * 1e9 * rates.comm)
    far = nbytes * (ep - near_ranks) / ep / (gpu.network_gb_s * 1e9 * rates.comm)
    return max(near, far)


def expert_times(
    spec: RecipeSpec, layout: Layout, gpu: GPU, rates: Rates, k: ModelConstants, moe: MoE, operand: int
) -> ExpertTimes:
    """The routed experts of one MoE layer and micro-batch on the busiest rank (`operand`: the GEMMs' input bytes,
    1 in FP8)."""
    local = moe.experts / layout.ep
    copies = routed_copies(moe, layout, spec.moe_imbalance)
    m = copies / local  # tokens per local expert
    gemms = [g.on_rank(layout.etp) for g in moe.expert_gemms()]
    rate = rates.dense * k.grouped_gemm
    matmul_f = sum(gemm_s(m, a, n, rate, rates, operand, local) for a, n in gemms)
    matmul_b = sum(
        gemm_s(m, n, a, rate, rates, operand, local) + gemm_s(a, m, n, rate, rates, operand, local) for a, n in gemms
    )

    # The permutation of a rank's own copies (before the ETP gather), the activation over its ETP share of each
    # expert's width, and in FP8 the casts of its GEMMs' inputs (forward) and output gradients (backward).
    moved = (
        copies
        / layout.etp
        * (PERMUTE_BYTES_PER_HIDDEN * moe.hidden + ACTIVATION_BYTES_PER_FFN[moe.gated] * moe.expert_ffn)
    )
    if operand == 1:
        moved += copies * FP8_CAST_BYTES_PER_ELEMENT * sum(a + n / BACKWARD_BYTES_FACTOR for a, n in gemms)
    memory_f = moved / rates.hbm

    # A rank's tokens' copies before the ETP gather; the busiest rank receives `moe_imbalance` times its share.
    sent = copies / layout.etp * moe.hidden * ACTIVATION_BYTES
    exchange = 2 * all_to_all_s(sent, layout, gpu, rates)  # dispatch and combine
    if layout.etp > 1:  # all-gather before the experts, reduce-scatter after: an all-reduce's volume
        exchange += rates.allreduce_s(copies * moe.hidden * ACTIVATION_BYTES / layout.etp, layout.etp,
                                      group_bandwidth_gb_s(gpu, layout.etp, 1, layout.gpus_per_node))  # fmt: skip
    exposed = exchange * (1.0 - k.ep_overlap)
    memory_b = BACKWARD_BYTES_FACTOR * memory_f
    return ExpertTimes(matmul_f, matmul_b, memory_f, memory_b, exposed, exposed, k.moe_layer_latency)
