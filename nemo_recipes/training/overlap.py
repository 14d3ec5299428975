"""Tensor-parallel communication overlap, the way NVIDIA's performance recipes switch it on, and only where it works.

NeMo's `MegatronCommOverlapCallback(tp_comm_overlap=True)` is what the performance recipes add (NeMo
`gpt3_175b.py`/`llama3_70b.py` `pretrain_performance_optimizations`, `scripts/performance/llm/pretrain_gpt3_175b.py`
with userbuffers configs for H100 and B200). `TensorParallelCommOverlap` is that callback with two differences:

- it changes nothing but TP overlap: the data-parallel and pipeline settings it would otherwise rewrite are passed
  back as the recipe's own values (`overlap_grad_reduce`, `overlap_param_gather`; `overlap_p2p_comm` and
  `batch_p2p_comm` as `pipeline_comm_values` sets them), so the planner's program is what runs;
- its `setup` does nothing where TP overlap cannot work: no Transformer Engine, no CUDA (the CPU smoke training),
  or a GPU older than compute capability 9.0 (Transformer Engine's userbuffers need CUDA multicast). NeMo's own
  checks (TP > 1, sequence parallelism) still apply after ours.

The recipe adds it only when `spec.tp_comm_overlap_enabled` (TP > 1 with sequence parallelism, `tp_comm_overlap`
not False), so `tp_comm_overlap=False` or TP = 1 leaves the trainer's callbacks as they were.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Optional

import nemo_run as run
from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import MegatronCommOverlapCallback

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.stack import TP_OVERLAP_MIN_CAPABILITY, TRANSFORMER_ENGINE_MODULE

log = logging.getLogger(__name__)
# torch.distributed's NCCL backend bootstraps the userbuffers: Transformer Engine's default prefers MPI, which a
# torchrun launch (our local, Slurm and Kubernetes presets) has not initialised.
BOOTSTRAP_BACKEND = "nccl"


def inert_reason() -> Optional[str]:
    """Why TP overlap cannot run in this process (None when it can)."""
    if importlib.util.find_spec(TRANSFORMER_ENGINE_MODULE) is None:
        return "Transformer Engine is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    capability = torch.cuda.get_device_capability()
    if capability < TP_OVERLAP_MIN_CAPABILITY:
        return f"compute capability {capability[0]}.{capability[1]} has no CUDA multicast for userbuffers"
    return None


class TensorParallelCommOverlap(MegatronCommOverlapCallback):
    """`MegatronCommOverlapCallback(tp_comm_overlap=True)` that keeps the recipe's other overlap settings and does
    nothing where Transformer Engine, CUDA or a Hopper-or-newer GPU is missing."""

    def __init__(
        self,
        overlap_grad_reduce: bool = True,
        overlap_param_gather: bool = True,
        overlap_p2p_comm: bool = False,
        batch_p2p_comm: bool = True,
    ):
        super().__init__(
            tp_comm_overlap=True,
            tp_comm_bootstrap_backend=BOOTSTRAP_BACKEND,
            overlap_grad_reduce=overlap_grad_reduce,
            overlap_param_gather=overlap_param_gather,
            overlap_p2p_comm=overlap_p2p_comm,
            batch_p2p_comm=batch_p2p_comm,
        )

    def setup(self, trainer, pl_module, stage: str) -> None:
        reason = inert_reason()
        if reason is not None:
            log.warning("tensor-parallel communication overlap off: %s", reason)
            return
        super().setup(trainer, pl_module, stage)


def pipeline_comm_values(spec: RecipeSpec) -> dict[str, Any]:
    """Interleaved schedules overlap their point-to-point sends with compute, as NeMo's MegatronCommOverlapCallback
    sets for every VP > 1 run; Megatron-Core needs batch_p2p_comm off for that. The planner models the same
    (`plan.stack.Program.pp_comm_overlap`)."""
    interleaved = Layout.of(spec).interleaved
    return {"overlap_p2p_comm": interleaved, "batch_p2p_comm": not interleaved}


def comm_overlap_callbacks(spec: RecipeSpec) -> list[run.Config]:
    """The callback for the recipe's TP overlap, or nothing when the recipe does not ask for it."""
    if not spec.tp_comm_overlap_enabled:
        return []
    p2p = pipeline_comm_values(spec)
    return [
        run.Config(
            TensorParallelCommOverlap,
            overlap_grad_reduce=spec.overlap_grad_reduce,
            overlap_param_gather=spec.overlap_param_gather and spec.distributed_optimizer,
            overlap_p2p_comm=p2p["overlap_p2p_comm"],
            batch_p2p_comm=p2p["batch_p2p_comm"],
        )
    ]
