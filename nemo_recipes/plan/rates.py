"""What one GPU achieves: its tensor-core, HBM and link rates under the throughput model's constants (`Rates`), the
power-limit derating of its tensor clock, and the time of a GEMM on it (`gemm_s`). Read by the throughput model
(`throughput.py`) and the experts' times (`experts.py`). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nemo_recipes.errors import known
from nemo_recipes.plan import kernels as _kernels
from nemo_recipes.plan.hardware import GPU, get_gpu
from nemo_recipes.plan.model_constants import ACTIVATION_BYTES, ModelConstants

# The GPU whose board power per dense BF16 TFLOP/s is the reference of `power_derate` (the H100 SXM, 700 W / 989).
POWER_REFERENCE = get_gpu("h100-80gb")


def gemm_s(m: float, k: float, n: float, rate: float, rates: "Rates", operand_bytes: int, batch: float = 1.0) -> float:
    """Time of `batch` (m x k) @ (k x n) GEMMs launched together: their math at `rate` times their shape's
    efficiency (`kernels.gemm_efficiency`: wave quantisation over all their tiles, and depth), plus their operands
    and 2-byte outputs through HBM.

    A smooth roofline (math and traffic added, not overlapped): a GEMM whose arithmetic intensity is a few times the
    GPU's ridge point loses a visible fraction of its speed, which is why larger models reach a higher MFU (Megatron-LM
    README: "larger GEMMs have higher arithmetic intensity and are consequently more efficient")."""
    efficiency = _kernels.gemm_efficiency(m, n, k, rates.sms, operand_bytes, batch)
    return batch * (
        2.0 * m * k * n / (rate * efficiency) + (operand_bytes * (m * k + k * n) + ACTIVATION_BYTES * m * n) / rates.hbm
    )


def power_derate(gpu: GPU, k: ModelConstants) -> float:
    """The fraction of its rated tensor-core peak a GPU sustains under its power limit, relative to the H100 SXM
    (whose rows the efficiencies are mostly measured on): (W per peak TFLOP/s / the H100's) ^ `power_exponent`,
    at most 1. Blackwell rates twice Hopper's peak at 1.4-1.7 times its power, so its GEMMs run at a lower clock."""
    reference = known(POWER_REFERENCE.tdp_w, "the reference GPU's board power is in the GPU table")
    if gpu.tdp_w is None:
        return 1.0
    ratio = (gpu.tdp_w / gpu.bf16_tflops) / (reference / POWER_REFERENCE.bf16_tflops)
    return min(1.0, ratio**k.power_exponent)


@dataclass(frozen=True)
class Rates:
    """Achievable rates of one GPU, in FLOP/s and bytes/s."""

    bf16: float
    dense: float  # the transformer blocks' GEMMs: FP8 for FP8 plans
    attention: float  # the dense BF16 peak under the power derating, before `kernels.attention_efficiency`
    hbm: float
    comm: float  # fraction of a link's bandwidth collectives reach
    derate: float  # the power-limit derating applied to the tensor-core rates
    sms: Optional[int]  # streaming multiprocessors, for the GEMMs' wave quantisation

    @classmethod
    def of(cls, gpu: GPU, fp8: bool, k: ModelConstants) -> "Rates":
        derate = power_derate(gpu, k)
        bf16 = gpu.bf16_tflops * 1e12 * k.matmul * derate
        if fp8:
            fp8_tflops = known(gpu.fp8_tflops, "FP8 plans on a GPU without FP8 are refused before the rates")
            dense = fp8_tflops * 1e12 * k.fp8_matmul * derate
        else:
            dense = bf16
        return cls(
            bf16=bf16,
            dense=dense,
            attention=gpu.bf16_tflops * 1e12 * derate,
            hbm=gpu.hbm_tb_s * 1e12 * k.hbm,
            comm=k.comm,
            derate=derate,
            sms=gpu.sm_count,
        )

    def allreduce_s(self, nbytes: float, n: int, bus_gb_s: float) -> float:
        return 2.0 * (n - 1) / n * nbytes / (bus_gb_s * 1e9 * self.comm) if n > 1 else 0.0

    def gather_s(self, nbytes: float, n: int, bus_gb_s: float) -> float:
        """Reduce-scatter or all-gather of a buffer of `nbytes` per rank (nccl-tests convention)."""
        return (n - 1) / n * nbytes / (bus_gb_s * 1e9 * self.comm) if n > 1 else 0.0

    def send_s(self, nbytes: float, link_gb_s: float) -> float:
        return nbytes / (link_gb_s * 1e9 * self.comm)
