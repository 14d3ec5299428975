"""Checks that run where the job starts, before the first step: the recipe builds anywhere, but FP8 trains only with
Transformer Engine on a GPU with FP8 tensor cores (compute capability 8.9, Ada, or newer: Hopper, Blackwell)."""

from __future__ import annotations

import importlib.util
from typing import Optional

from lightning.pytorch.callbacks import Callback

from nemo_recipes.errors import InvalidRecipeError, Problem

FP8_MIN_CAPABILITY = (8, 9)


def fp8_problems(has_transformer_engine: bool, capability: Optional[tuple[int, int]], device_name: str) -> list[Problem]:
    """Why FP8 cannot run here (empty when it can). Split from the callback so the rule is testable on any machine."""
    problems = []
    if not has_transformer_engine:
        problems.append(Problem(
            "precision", "fp8", "FP8 needs NVIDIA Transformer Engine, which is not installed in this environment.",
            "install it (`pip install 'nemo-recipes[gpu]'`, or use the image built from docker/Dockerfile), "
            "or set precision='bf16'."))
    if capability is None:
        problems.append(Problem(
            "precision", "fp8", "FP8 needs a CUDA GPU, and none is visible.",
            "run on Hopper (H100/H200), Ada or Blackwell GPUs, or set precision='bf16'."))
    elif capability < FP8_MIN_CAPABILITY:
        problems.append(Problem(
            "precision", "fp8",
            f"{device_name} (compute capability {capability[0]}.{capability[1]}) has no FP8 tensor cores.",
            "run on Hopper (H100/H200), Ada or Blackwell GPUs, or set precision='bf16'."))
    return problems


class PrecisionPreflight(Callback):
    """Refuses to start training with a precision the node cannot run, with the field, the value and the fix."""

    def __init__(self, precision: str = "bf16"):
        self.precision = precision

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.precision != "fp8":
            return
        import torch

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        name = torch.cuda.get_device_name() if capability else "no GPU"
        problems = fp8_problems(importlib.util.find_spec("transformer_engine") is not None, capability, name)
        if problems:
            raise InvalidRecipeError(problems, context="precision preflight")
