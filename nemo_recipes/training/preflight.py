"""Checks that run where the job starts, before the first step. The recipe builds anywhere, but:

- FP8 trains only with Transformer Engine on a GPU with FP8 tensor cores (compute capability 8.9, Ada, or newer:
  Hopper, Blackwell): refused otherwise, with the fix;
- asynchronous checkpoint saves need the Megatron-Core checkpoint strategies NeMo's async IO imports (NeMo 2.7.3 with
  Megatron-Core 0.16 lacks them and would fail at set-up): saved synchronously there, with a warning.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Optional

from lightning.pytorch.callbacks import Callback

from nemo_recipes.catalog import FP8_RECIPES
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.plan.hardware import MXFP8_COMPUTE_CAPABILITY

FP8_MIN_CAPABILITY = (8, 9)


def fp8_problems(
    has_transformer_engine: bool, capability: Optional[tuple[int, int]], device_name: str
) -> list[Problem]:
    """Why FP8 cannot run here (empty when it can). Split from the callback so the rule is testable on any machine."""
    problems = []
    if not has_transformer_engine:
        problems.append(
            Problem(
                "precision",
                "fp8",
                "FP8 needs NVIDIA Transformer Engine, which is not installed in this environment.",
                "install it (`pip install 'nemo-recipes[gpu]'`, or use the image built from docker/Dockerfile), "
                "or set precision='bf16'.",
            )
        )
    if capability is None:
        problems.append(
            Problem(
                "precision",
                "fp8",
                "FP8 needs a CUDA GPU, and none is visible.",
                "run on Hopper (H100/H200), Ada or Blackwell GPUs, or set precision='bf16'.",
            )
        )
    elif capability < FP8_MIN_CAPABILITY:
        problems.append(
            Problem(
                "precision",
                "fp8",
                f"{device_name} (compute capability {capability[0]}.{capability[1]}) has no FP8 tensor cores.",
                "run on Hopper (H100/H200), Ada or Blackwell GPUs, or set precision='bf16'.",
            )
        )
    return problems


def async_save_available() -> bool:
    """Whether NeMo's asynchronous checkpoint IO can work with the installed Megatron-Core."""
    from nemo.utils.callbacks import dist_ckpt_io

    return bool(getattr(dist_ckpt_io, "HAVE_MEGATRON_CORE", False))


ASYNC_FALLBACK = (
    "checkpoint_async=True: this NeMo cannot save checkpoints asynchronously with the installed "
    "Megatron-Core (megatron.core.dist_checkpointing.strategies.tensorstore is missing); saving "
    "synchronously instead. Fix: install the pinned megatron-core (pip install -c constraints.txt), "
    "or set checkpoint_async=False to silence this."
)


class Preflight(Callback):
    """Runs on every rank at set-up, before the strategy and the checkpoint callback read their settings (Lightning
    calls callbacks' `setup` before the strategy's, and NeMoLogger appends the checkpoint callback after ours)."""

    def __init__(self, precision: str = "bf16"):
        self.precision = precision

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._check_precision()
        self._choose_checkpoint_io(trainer)

    @staticmethod
    def _choose_checkpoint_io(trainer: Any) -> None:
        strategy = trainer.strategy
        if getattr(strategy, "async_save", False) and not async_save_available():
            logging.getLogger(__name__).warning(ASYNC_FALLBACK)
            strategy.async_save = False

    def _check_precision(self) -> None:
        if self.precision not in FP8_RECIPES:
            return
        import torch

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        name = torch.cuda.get_device_name() if capability else "no GPU"
        problems = fp8_problems(importlib.util.find_spec("transformer_engine") is not None, capability, name)
        if self.precision == "mxfp8" and capability is not None and capability < MXFP8_COMPUTE_CAPABILITY:
            problems.append(
                Problem(
                    "precision",
                    "mxfp8",
                    f"{name} (compute capability {capability[0]}.{capability[1]}) has no MXFP8 tensor cores: "
                    "MXFP8 is Blackwell's format.",
                    "run on Blackwell (B200, GB200, B300, GB300), or use precision='fp8_tensorwise' or "
                    "'fp8_blockwise' on Hopper.",
                )
            )
        if problems:
            raise InvalidInputError(problems, context="precision preflight")
