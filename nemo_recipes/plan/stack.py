"""The program that will run: which software stack, which attention kernel, which communication overlaps.

Standard library only. Memory and throughput both read one `Program`, so the two halves of a report describe the
same job. What runs follows from the recipe (its overlap fields and layout) and the software stack on the GPUs:

- **Stack.** A plan describes the job on the GPU cluster, which runs the NeMo container (`docker/Dockerfile` builds
  on it) with Transformer Engine; that is the default, `transformer-engine`. A recipe is often planned on a laptop
  without Transformer Engine: `stack="local"` plans for this machine instead, detected with
  `importlib.util.find_spec` (nothing is imported). Every report says which stack it assumed and what this machine
  has.
- **Attention.** With Transformer Engine, Megatron-Core's TE layer spec runs fused attention (cuDNN / flash), which
  stores no s x s score matrix; without it NeMo 2 builds Megatron-Core's local layer spec, whose unfused softmax
  attention stores the scores, their dropout mask and the dropout output (Korthikanti et al. 2022, Table 2:
  `5 a s^2 b`).
- **TP communication overlap.** The recipe asks for it (`tp_comm_overlap`, on by default whenever TP > 1 with
  sequence parallelism, as NVIDIA's performance recipes on H100 and B200); it happens only with Transformer Engine on a
  GPU of compute capability 9.0 or newer: Transformer Engine's userbuffers need CUDA multicast (`initialize_ub`
  asserts `device_supports_multicast()`), and NeMo's callback switches it off without TE, SP or TP > 1. The job's
  callback (`nemo_recipes.training.overlap`) applies the same rule on the node.
- **Pipeline communication overlap.** With an interleaved schedule (VP > 1) the training objects set Megatron-Core's
  `overlap_p2p_comm` (and drops `batch_p2p_comm`), as NeMo's `MegatronCommOverlapCallback` does for every VP run.
- **Data-parallel overlap.** The recipe's `overlap_grad_reduce`; `overlap_param_gather` only with the distributed
  optimizer (Megatron-Core needs it; `training.nemo_fields`'s `param_gather` conversion passes the same condition).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.plan.hardware import GPU, get_gpu

TRANSFORMER_ENGINE_MODULE = "transformer_engine"
# Userbuffers (TP comm overlap) need CUDA multicast: Hopper (9.0) and newer.
TP_OVERLAP_MIN_CAPABILITY = (9, 0)
LOCAL = "local"
FP32_BYTES, HALF_BYTES, FP8_BYTES = 4, 2, 1
# How NVIDIA's performance harness configured its published runs: the calibration benchmark reads it from its rows;
# `plan` does not offer it, since the recipes keep fp32 gradients.
PERFORMANCE_HARNESS = "nemo-performance"


@dataclass(frozen=True)
class Stack:
    """The software on the GPUs: what decides the attention kernel, the overlaps and the fused kernels."""

    name: str
    transformer_engine: bool
    description: str
    # Megatron-Core keeps (and reduces) main gradients in fp32 unless told otherwise; NeMo's performance harness
    # turns it off (bf16 gradient buffers and reductions).
    grad_reduce_in_fp32: bool = True
    # Transformer Engine's fused cross entropy over the vocabulary (`cross_entropy_fusion_impl="te"`) instead of
    # Megatron-Core's unfused fp32 vocab-parallel cross entropy.
    fused_cross_entropy: bool = False
    # The fused attention kernel Transformer Engine runs (`kernels.ATTENTION_TFLOPS`): cuDNN's, which TE prefers on
    # Hopper and newer ("Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance
    # reasons", TE's get_attention_backend; NeMo PR #9188, 2024: "Transformer Engine prefers cuDNN flash attention on
    # Hopper+ architectures, and Tri Dao flash attention on pre-Hopper"), or Tri Dao's FlashAttention-2.
    attention_kernel: str = "cudnn"


STACKS: dict[str, Stack] = {
    stack.name: stack
    for stack in (
        Stack(
            "transformer-engine",
            True,
            "Megatron-Core with Transformer Engine, as in the NeMo container: fused (cuDNN/flash) attention, FP8, "
            "TP communication overlap with userbuffers",
        ),
        Stack(
            PERFORMANCE_HARNESS,
            True,
            "Megatron-Core with Transformer Engine as NVIDIA's performance harness configures it (NeMo "
            "scripts/performance, the source of the NeMo and Megatron-Bridge performance tables): gradients kept and "
            "reduced in BF16 (grad_reduce_in_fp32=False), Transformer Engine's fused cross entropy",
            grad_reduce_in_fp32=False,
            fused_cross_entropy=True,
        ),
        Stack(
            "transformer-engine-flash-attn",
            True,
            "Megatron-Core with Transformer Engine running Tri Dao's FlashAttention-2 instead of cuDNN's fused "
            "attention (NVTE_FUSED_ATTN=0, or the Transformer Engine releases of early 2024, which preferred it on "
            "Hopper): FP8, TP communication overlap with userbuffers",
            attention_kernel="flash-attn-2",
        ),
        Stack(
            "megatron-core",
            False,
            "Megatron-Core without Transformer Engine (its local layer spec, what NeMo 2 builds when TE is "
            "missing): unfused softmax attention that stores the s x s scores, no FP8, no TP communication overlap",
        ),
        Stack(
            "megatron-legacy",
            False,
            "Megatron-LM of 2021-2022 (Narayanan et al. 2021, Korthikanti et al. 2022): unfused softmax attention, "
            "no TP communication overlap",
        ),
    )
}
DEFAULT_STACK = "transformer-engine"
STACK_CHOICES = (*(name for name in STACKS if name != PERFORMANCE_HARNESS), LOCAL)


@functools.lru_cache(maxsize=None)
def transformer_engine_installed() -> bool:
    """Whether this Python environment has Transformer Engine, found without importing it (once per process)."""
    return importlib.util.find_spec(TRANSFORMER_ENGINE_MODULE) is not None


@functools.lru_cache(maxsize=None)
def resolve_stack(name: Optional[str] = None) -> tuple[Stack, str]:
    """The stack `name` means (None: the default, the NeMo container on the GPUs) and a sentence saying why."""
    here = "installed" if transformer_engine_installed() else "not installed"
    if name is None:
        stack = STACKS[DEFAULT_STACK]
        return stack, (
            f"software stack: {stack.description} (assumed: the GPU job runs the NeMo container that "
            f"docker/Dockerfile builds on; Transformer Engine is {here} on this machine, and "
            "--stack local plans for this machine instead)"
        )
    if name == LOCAL:
        stack = STACKS["transformer-engine" if transformer_engine_installed() else "megatron-core"]
        return stack, f"software stack: {stack.description} (Transformer Engine is {here} on this machine)"
    if name not in STACKS:
        raise InvalidInputError(
            [
                Problem(
                    "stack",
                    name,
                    "is not a software stack the planner models.",
                    f"use one of: {', '.join(STACK_CHOICES)}.",
                )
            ]
        )
    stack = STACKS[name]
    return stack, f"software stack: {stack.description} (as given)"


@dataclass(frozen=True)
class Program:
    """What the job will run, as far as memory and step time depend on it."""

    stack: Stack
    fused_attention: bool
    tp_comm_overlap: bool
    pp_comm_overlap: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    gradient_bytes: int  # per main-gradient element, held and reduced across data-parallel ranks
    param_gather_bytes: int  # per parameter all-gathered by the distributed optimizer
    fused_cross_entropy: bool
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack.name,
            "transformer_engine": self.stack.transformer_engine,
            "attention": "fused" if self.fused_attention else "unfused",
            "tp_comm_overlap": self.tp_comm_overlap,
            "pp_comm_overlap": self.pp_comm_overlap,
            "overlap_grad_reduce": self.overlap_grad_reduce,
            "overlap_param_gather": self.overlap_param_gather,
            "gradient_bytes": self.gradient_bytes,
            "param_gather_bytes": self.param_gather_bytes,
            "cross_entropy": "fused" if self.fused_cross_entropy else "unfused",
            "notes": list(self.notes),
        }


def tp_overlap_capable(gpu: GPU) -> bool:
    return gpu.compute_capability is not None and gpu.compute_capability >= TP_OVERLAP_MIN_CAPABILITY


def program_for(
    spec: RecipeSpec, gpu: Optional[GPU], stack: Optional[str] = None, interleaved: Optional[bool] = None
) -> Program:
    """The program `spec` runs on `gpu` (None: the recipe's default GPU) with `stack` (see `resolve_stack`).
    `interleaved` is the layout's VP > 1 (computed here from the spec when not given)."""
    resolved, why = resolve_stack(stack)
    gpu = gpu or get_gpu(spec.default_gpu)
    if interleaved is None:
        interleaved = bool(spec.virtual_pipeline and spec.virtual_pipeline > 1 and spec.pipeline_parallel > 1)
    te = resolved.transformer_engine
    notes = [
        why,
        "attention: "
        + (
            "fused (Transformer Engine: no stored s x s scores)"
            if te
            else "unfused softmax (stores the s x s scores, dropout mask and output)"
        ),
    ]
    tp_overlap, reason = _tp_overlap(spec, gpu, te)
    notes.append(f"TP communication overlap: {'on' if tp_overlap else 'off'} ({reason})")
    if interleaved:
        notes.append("pipeline send/receive overlapped with compute (overlap_p2p_comm, interleaved schedule)")
    gather = spec.overlap_param_gather and spec.distributed_optimizer
    notes.append(
        f"data-parallel overlap: gradient reduce {'on' if spec.overlap_grad_reduce else 'off'}, parameter "
        f"gather {'on' if gather else 'off'}"
    )
    gradient_bytes = FP32_BYTES if resolved.grad_reduce_in_fp32 else HALF_BYTES
    # FP8 runs gather FP8 parameters (fp8_param_gather: our FP8 recipes and NeMo's FP8 mixed-precision presets).
    param_gather_bytes = FP8_BYTES if spec.fp8 else HALF_BYTES
    notes.append(
        f"gradients reduced in {'fp32' if gradient_bytes == FP32_BYTES else 'bf16'}, parameters gathered in "
        f"{'fp8' if param_gather_bytes == FP8_BYTES else 'bf16'}; cross entropy "
        f"{'fused (Transformer Engine)' if resolved.fused_cross_entropy else 'unfused (fp32, Megatron-Core)'}"
    )
    return Program(
        stack=resolved,
        fused_attention=te,
        tp_comm_overlap=tp_overlap,
        pp_comm_overlap=interleaved,
        overlap_grad_reduce=spec.overlap_grad_reduce,
        overlap_param_gather=gather,
        gradient_bytes=gradient_bytes,
        param_gather_bytes=param_gather_bytes,
        fused_cross_entropy=resolved.fused_cross_entropy,
        notes=tuple(notes),
    )


def _tp_overlap(spec: RecipeSpec, gpu: GPU, transformer_engine: bool) -> tuple[bool, str]:
    if spec.tp_comm_overlap is False:
        return False, "tp_comm_overlap=False"
    if spec.tensor_parallel == 1:
        return False, "TP = 1"
    if not spec.sequence_parallel_enabled:
        return False, "sequence parallelism is off"
    if not transformer_engine:
        return False, "no Transformer Engine"
    if gpu.compute_capability is None:
        return False, f"{gpu.name}'s compute capability is unknown (describe it with GPU(compute_capability=...))"
    if not tp_overlap_capable(gpu):
        return False, f"{gpu.name} has no CUDA multicast (needs compute capability 9.0 or newer)"
    return True, f"Transformer Engine userbuffers on {gpu.name}"
