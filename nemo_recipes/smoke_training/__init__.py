"""Smoke training: a recipe scaled down in shape, trained by NeMo's own `llm.pretrain`, stopped, resumed, judged.

    report = nemo_recipes.smoke("gpt_70b", processes=2)          # TP2 on two CPU processes (gloo) or GPUs
    print(report.format()); report.passed

Modules: `shape` (the scaled-down spec and layout, standard library), `corpus` (learnable data as a Megatron indexed
dataset), `worker` (one phase in each rank), `callbacks` (the step record and the phase stop), `record`, `judge`,
`invariance` (a layout against the one-process model; `preconditions`, what both of its runs set) and `runner`.
"""

from nemo_recipes.smoke_training.runner import SmokeError, SmokeReport, smoke
from nemo_recipes.smoke_training.shape import SmokePlan, SmokeShape, smoke_plan, smoke_shape

__all__ = ["SmokeError", "SmokePlan", "SmokeReport", "SmokeShape", "smoke", "smoke_plan", "smoke_shape"]
