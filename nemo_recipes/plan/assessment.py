"""The whole planner in one call: validation and memory, then (for a valid plan on a known GPU) the step-time
estimate, the time to train and the advice (a faster valid plan on the same hardware), all in one `PlanReport`, all
for one program (`stack`). The CLI, the executor plugin and Python users share it."""

from __future__ import annotations

from typing import Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.plan.fitting import advise as _advise
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.report import PlanReport
from nemo_recipes.plan.throughput import estimate_throughput, time_to_train
from nemo_recipes.plan.validation import validate


def with_estimates(
    report: PlanReport, *, tokens: Optional[float] = None, stack: Optional[str] = None, advise: bool = True
) -> PlanReport:
    """`report` with throughput, time to train (`tokens`, default the recipe's train_tokens) and, with `advise`, the
    advice attached.

    An invalid plan, or one without a GPU type, has no meaningful step time: it is returned as it is."""
    if not report.valid or report.cluster.gpu is None:
        return report
    throughput = estimate_throughput(report.spec, report.cluster, stack=stack)
    budget = report.spec.train_tokens if tokens is None else tokens
    report = report.with_throughput(throughput).with_time_to_train(time_to_train(throughput, budget))
    return report.with_advice(_advise(report, stack=stack)) if advise else report


def assess(
    spec: RecipeSpec,
    cluster: Cluster,
    *,
    tokens: Optional[float] = None,
    stack: Optional[str] = None,
    advise: bool = True,
) -> PlanReport:
    """Validate `spec` on `cluster` and attach the estimates (and advice) a valid plan has."""
    return with_estimates(validate(spec, cluster, stack=stack), tokens=tokens, stack=stack, advise=advise)
