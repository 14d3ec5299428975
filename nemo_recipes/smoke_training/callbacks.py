"""The smoke run's Lightning callbacks: the record of each step, and the stop that ends the first phase.

Rank 0 holds the loss of every step (NeMo sends the last pipeline stage's reduced loss to it for logging).
"""

from __future__ import annotations

import os
import time
from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.record import append


def attempt() -> int:
    """Which run of a requeued Slurm job this is (0 for the first, and outside Slurm): Slurm counts requeues in
    SLURM_RESTART_COUNT, and the judge needs it to tell a killed attempt's steps from its successor's."""
    count = os.environ.get("SLURM_RESTART_COUNT", "0")
    return int(count) if count.isdigit() else 0


def _number(value: Any) -> float | None:
    """A logged scalar (a tensor) as a float; NaN and infinities are kept: they are what the judge looks for."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class StopAtStep(Callback):
    """Ends training after `step` steps, as a preemption would, without touching `trainer.max_steps` (NeMo copies
    max_steps into the learning-rate schedule, so stopping through it would change the schedule)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # A run requeued after the first phase had already reached its step (a preemption between the last step
        # and the job's exit) resumes there: it must not train one more step.
        if trainer.global_step >= self.step:
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class SmokeMetrics(Callback):
    """Records where training started (the resumed step and data position), then each step's loss, consumed
    samples, learning rate and duration."""

    def __init__(self, path: str, phase: str, reference_after: int | None = None):
        self.path, self.phase = path, phase
        # Steps past it train the uninterrupted reference (straight_through.py): recorded apart from the run's.
        self.reference_after = reference_after
        self._started = 0.0

    def _rank_zero(self, trainer: Any) -> bool:
        return trainer.global_rank == 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._rank_zero(trainer):
            return
        from megatron.core import parallel_state as ps

        sampler = getattr(trainer.datamodule, "data_sampler", None)
        append(
            self.path,
            {
                "event": "start",
                "phase": self.phase,
                "time": time.time(),
                "global_step": trainer.global_step,
                "max_steps": trainer.max_steps,
                "world_size": trainer.world_size,
                # The groups Megatron actually built, to compare with the plan.
                "parallel": {
                    "tp": ps.get_tensor_model_parallel_world_size(),
                    "pp": ps.get_pipeline_model_parallel_world_size(),
                    "cp": ps.get_context_parallel_world_size(),
                    "dp": ps.get_data_parallel_world_size(),
                    "sequence_parallel": bool(getattr(pl_module.config, "sequence_parallel", False)),
                    **(
                        {
                            "ep": ps.get_expert_model_parallel_world_size(),
                            "etp": ps.get_expert_tensor_parallel_world_size(),
                        }
                        if getattr(pl_module.config, "num_moe_experts", None)
                        else {}
                    ),
                },
                "consumed_samples": getattr(sampler, "init_consumed_samples", None),
                "resumed_from": str(trainer.ckpt_path) if trainer.ckpt_path else None,
                "slurm_job": os.environ.get("SLURM_JOB_ID"),
                "attempt": attempt(),
                # Slurm's own text, as tests/test_slurm_two_nodes.py reads it (None outside a requeued job).
                "restart_count": os.environ.get("SLURM_RESTART_COUNT"),
            },
        )

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._rank_zero(trainer):
            return
        metrics = trainer.callback_metrics
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        append(
            self.path,
            {
                "event": "reference step"
                if self.reference_after is not None and trainer.global_step > self.reference_after
                else "step",
                "phase": self.phase,
                "attempt": attempt(),
                "step": trainer.global_step,
                "loss": _number(metrics.get("reduced_train_loss")),
                "consumed_samples": _number(metrics.get("consumed_samples")),
                "lr": _number(optimizer.param_groups[0]["lr"]) if optimizer else None,
                "seconds": time.perf_counter() - self._started,
            },
        )

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._rank_zero(trainer):
            append(
                self.path,
                {
                    "event": "end",
                    "phase": self.phase,
                    "attempt": attempt(),
                    "time": time.time(),
                    "global_step": trainer.global_step,
                    **_gpu_memory(),
                },
            )


def _gpu_memory() -> dict[str, Any]:
    """Peak GPU memory of this rank (rank 0: the first pipeline stage, the most loaded one), where there is a GPU."""
    import torch

    if not torch.cuda.is_available():
        return {}
    return {
        "gpu": torch.cuda.get_device_name(),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
    }
