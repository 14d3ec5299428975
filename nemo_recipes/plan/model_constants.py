"""The constants of the throughput model (`throughput.py`): the global efficiencies of `ModelConstants`, fitted once
for every GPU and model (`benchmarks/planner_accuracy.py` refits them), the context in which a calibration replaces
them around one plan, and the bytes each memory-bound kernel moves, counted from Megatron-Core's and Transformer
Engine's kernels. Standard library only."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from dataclasses import replace as replace_fields
from typing import Iterator


@dataclass(frozen=True)
class ModelConstants:
    """The efficiencies the model cannot derive, each one global (every GPU, every model). The defaults are the refit
    of benchmarks/planner_accuracy.py on every row of benchmarks/data/calibration.csv (all but `power_exponent`,
    which is derived), each within the range its source below gives except `hbm` (see there); the benchmark also
    prints the values refitted without each source. Attention has no constant: it runs at the published kernel speed
    (`kernels.attention_efficiency`)."""

    # Fraction of the dense tensor-core peak that the math of the largest BF16/FP16 GEMMs reaches, before their
    # shape (`kernels.gemm_efficiency`: waves and depth) and their operand traffic (`_gemm_s`): cuBLAS reaches
    # 80-90 % of 312 TFLOP/s on large A100 GEMMs and about 75-80 % of 989 on H100 SXM.
    matmul: float = 0.87
    # FP8 GEMMs reach a smaller fraction of their doubled peak (power and clock limits; H100 FP8 cuBLAS GEMMs reach
    # about 1300 of 1979 TFLOP/s).
    fp8_matmul: float = 0.64
    # Fraction of the HBM bandwidth that streaming (element-wise) kernels reach: STREAM-like copies reach 80-90 %.
    # The refit lands at the top of its grid (0.95), above that range: the element-wise bytes counted below are an
    # upper bound (Transformer Engine fuses some of them into its GEMMs and norms).
    hbm: float = 0.95
    # Fraction of the link bandwidth NCCL collectives reach as bus bandwidth for large messages: about 80 % on
    # NVLink (nccl-tests PERFORMANCE.md: 230-240 GB/s of A100's 300 GB/s per direction) and 90 % or more of an
    # InfiniBand NIC's line rate.
    comm: float = 0.90
    # Fraction of the TP communication hidden behind GEMMs when the program overlaps it (Transformer Engine
    # userbuffers split the all-gather/reduce-scatter of SP into chunks overlapped with the neighbouring GEMM); the
    # first and last chunks and the slowdown of GEMMs sharing the GPU with communication stay exposed.
    tp_overlap: float = 0.25
    # Exponent of the power-limit derating (`_power_derate`), derived rather than fitted: a GPU with fewer watts per
    # peak TFLOP/s than the reference sustains a lower tensor clock under dense GEMMs. Dynamic power grows with
    # frequency x voltage^2 and the voltage with the frequency, so the sustainable clock goes as power^(1/3).
    power_exponent: float = 1.0 / 3.0
    # Seconds every step costs besides the model's kernels: the gradient-norm and loss reductions that synchronise
    # all ranks, the optimizer's launch-bound multi-tensor kernels, the data loader and logging. Published
    # throughputs include them ("End-to-end measurement: Throughputs include all operations (data loading,
    # optimizer steps, communication, logging)", Megatron-LM README); they weigh most on short steps (small models).
    step_overhead: float = 0.09
    # Fraction of the speed of the same GEMMs launched one by one that the grouped GEMM of a rank's local experts
    # reaches (Transformer Engine's grouped GEMM: one launch over experts whose token counts differ; its shape
    # losses, waves and depth, are already `kernels.gemm_efficiency`'s): an assumption, refitted on the published
    # MoE rows by benchmarks/moe_accuracy.py (the dense rows do not move it): 0.92, close to no loss beyond the
    # shapes' own.
    grouped_gemm: float = 0.92
    # Fraction of the expert-parallel dispatch and combine (all-to-all) hidden behind compute (Megatron-Core's
    # overlap_moe_expert_parallel_comm overlaps one micro-batch's all-to-all with another's compute; without it none
    # is hidden). The published rows, NVIDIA's performance recipes, refit it to 0.9 (benchmarks/moe_accuracy.py):
    # a plan of a recipe that does not overlap them is optimistic by up to that share of its all-to-all.
    ep_overlap: float = 0.9
    # Seconds each MoE layer costs per micro-batch (forward and backward) beyond its kernels' work: the all-to-all
    # dispatcher's device-to-host synchronisation for the token counts of each expert (the all-to-all's split sizes),
    # and the launches of the router's, permutation's and grouped GEMM's small kernels, which a small micro-batch
    # leaves exposed (Megatron-Core's MoE CUDA graphs exist to hide them). Refitted on the published MoE rows
    # (benchmarks/moe_accuracy.py): 6.5 ms.
    moe_layer_latency: float = 0.0065

    def replace(self, **values: float) -> "ModelConstants":
        return replace_fields(self, **values)


CONSTANTS = ModelConstants()

# The constants of the plans made in this context: a calibration (`plan --calibration`) sets them around one plan, so
# that validation, --fit, --best and the advice all time their candidates with the same constants without each
# function passing them on. A context variable, not a module global: a calibration never leaks into another plan.
_ACTIVE: contextvars.ContextVar[ModelConstants] = contextvars.ContextVar("model_constants", default=CONSTANTS)


@contextlib.contextmanager
def using_constants(constants: ModelConstants) -> Iterator[ModelConstants]:
    """Within the block, `estimate_throughput` without `constants` uses these (a calibration's)."""
    token = _ACTIVE.set(constants)
    try:
        yield constants
    finally:
        _ACTIVE.reset(token)


def active_constants() -> ModelConstants:
    """The constants `estimate_throughput` uses when none are given: the shipped ones outside `using_constants`."""
    return _ACTIVE.get()


# Bytes moved per token and layer by the element-wise kernels of one forward pass, per unit of hidden size:
# layer norm in/out 2+2, bias-dropout-add reads two tensors and writes one plus a 1-byte mask 2+2+2+1, twice each
# (attention and MLP sides): 22 bytes x h. Counted from Megatron-Core's fused kernels (bias_dropout_add_fused,
# TE LayerNorm).
NORM_DROPOUT_BYTES_PER_HIDDEN = 22
# Activation function per element of the FFN width: GeLU reads and writes 2-byte values (4 bytes); SwiGLU reads two
# ffn-wide inputs and writes one (6 bytes).
ACTIVATION_BYTES_PER_FFN = {False: 4, True: 6}
# A backward element-wise kernel reads the saved input and the incoming gradient and writes a gradient: twice the
# forward traffic.
BACKWARD_BYTES_FACTOR = 2.0
# FP8 (Transformer Engine): every GEMM input in the forward and every output gradient in the backward is cast to FP8
# and transposed: read 2 bytes, write 1 + 1.
FP8_CAST_BYTES_PER_ELEMENT = 4
# Megatron-Core's (unfused) vocabulary-parallel cross entropy per logit, in fp32: cast up (read 2, write 4), max
# (read 4), subtract the max (4 + 4), exp (4 + 4), sum (4), normalise (4 + 4); backward: scale the saved softmax
# (4 + 4) and cast down (read 4, write 2). 52 bytes (megatron/core/tensor_parallel/cross_entropy.py).
CROSS_ENTROPY_BYTES_PER_LOGIT = 52
# Transformer Engine's fused cross entropy keeps the logits in BF16: one pass for the running max and sum (read 2),
# one that writes the gradient in place of the logit (read 2, write 2), and a backward that scales it by the loss
# gradient (read 2, write 2).
FUSED_CROSS_ENTROPY_BYTES_PER_LOGIT = 10
# Adam step per updated parameter (fp32 master weight, gradient, momentum, variance read = 16 bytes; master, momentum,
# variance written = 12; the BF16 copy written = 2; gradient norm read = 4), and zeroing the fp32 gradient buffer of
# every local parameter (4 bytes).
ADAM_BYTES_PER_PARAM = 34
GRAD_BUFFER_BYTES_PER_PARAM = 4
ACTIVATION_BYTES = 2
# A Mixture of Experts' token permutation per routed copy and hidden channel, forward: the permute gathers each copy
# (read 2, write 2 bytes) and the unpermute reads the expert's output and adds it, weighted, into the token's (read 2,
# write 2) (Megatron-Core moe_utils.permute / unpermute).
PERMUTE_BYTES_PER_HIDDEN = 8
# Unfused attention (Megatron-LM before Transformer Engine): per score element, forward: fused scale-mask-softmax reads
# and writes 2-byte values, dropout reads 2 and writes 2 plus a 1-byte mask (9 bytes); backward: dropout reads the
# gradient and mask and writes 2, softmax reads output and gradient and writes 2 (11 bytes).
SOFTMAX_DROPOUT_BYTES = (9, 11)
