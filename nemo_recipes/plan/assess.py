"""The whole planner in one call: validation and memory, then (for a valid plan on a known GPU) the step-time
estimate and the time to train, all in one `PlanReport`. The CLI, the executor plugin and Python users share it."""

from __future__ import annotations

from typing import Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.report import PlanReport
from nemo_recipes.plan.throughput import estimate_throughput, time_to_train
from nemo_recipes.plan.validate import validate


def with_estimates(report: PlanReport, *, tokens: Optional[float] = None) -> PlanReport:
    """`report` with throughput and time to train (`tokens`, default the recipe's train_tokens) attached.

    An invalid plan, or one without a GPU type, has no meaningful step time: it is returned as it is."""
    if not report.valid or report.cluster.gpu is None:
        return report
    throughput = estimate_throughput(report.spec, report.cluster)
    budget = report.spec.train_tokens if tokens is None else tokens
    return report.with_throughput(throughput).with_time_to_train(time_to_train(throughput, budget))


def assess(spec: RecipeSpec, cluster: Cluster, *, tokens: Optional[float] = None) -> PlanReport:
    """Validate `spec` on `cluster` and attach the estimates a valid plan has."""
    return with_estimates(validate(spec, cluster), tokens=tokens)
