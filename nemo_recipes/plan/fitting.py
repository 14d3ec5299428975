"""Fit a recipe to a cluster: choose TP, PP (and VP), recomputation and micro batch so that it validates and fits,
derive DP and gradient accumulation, optionally scale the global batch and the learning rate, and say why. Also the
fastest valid plan (`best`, `nemo-recipes plan --best`) and the advice line of `plan` (`advise`).

Standard library only. Candidates come from `search` and are ranked by the throughput model's step time, with
memory headroom as the tie-break; each choice is explained against the runner-up.

Policy, so results are predictable:
- A recipe that already validates on the cluster keeps its layout in `fit` (only the cluster fields, and the batch
  and LR when `scale_global_batch`, change); `best` searches regardless.
- TP stays within a node (divides `gpus_per_node`); CP, precision and sequence length are the recipe's.
- `fit` never lowers recomputation below 'selective' unless the recipe has 'none', only shrinks the micro batch and
  does not add an interleaved schedule (`search.Space.FIT`); `best` and `advise` try all of them
  (`search.Space.BEST`). Full recompute covers as few layers per chunk as fit.
- The distributed optimizer is switched on when it is off and that is what fits or is faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Optional

from nemo_recipes.catalog import RecipeSpec, closest_recipe
from nemo_recipes.errors import ERROR, InvalidInputError, Problem
from nemo_recipes.plan.hardware import GPUS, Cluster
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.report import Advice, Change, PlanReport, check_inputs
from nemo_recipes.plan.rules import (
    attention_heads_rule,
    context_parallel_rule,
    data_blend_rule,
    fp8_rule,
)
from nemo_recipes.plan.search import (
    Candidate,
    Space,
    changed_fields,
    explain,
    fastest_plan,
    ranked_plans,
    scaled_batch,
    summary,
    valid_plans,
)
from nemo_recipes.plan.validation import validate

LrScaling = Optional[Literal["sqrt", "linear"]]
LR_RULES = ("sqrt", "linear", None)
# Largest cluster the "smallest cluster that fits" search tries, in nodes (16k GPUs on 8-GPU nodes).
MAX_NODES = 2048
# `plan` advises a faster plan only when it is predicted at least this much faster: below it the difference is
# within what the model cannot resolve (identical configurations move 2-4 % between releases of published tables).
ADVICE_MIN_SPEEDUP = 1.03


@dataclass(frozen=True)
class FitResult:
    """A fitted (or best) plan: the spec, its changes from the asked one, its report and the plans it beat."""

    spec: RecipeSpec
    changes: list[Change]
    report: PlanReport
    ranking: list[Candidate] = field(default_factory=list)  # the valid plans considered, fastest first
    explanation: str = ""


def _on_cluster(spec: RecipeSpec, cluster: Cluster) -> RecipeSpec:
    changes: dict[str, Any] = {"num_nodes": cluster.nodes, "num_gpus_per_node": cluster.gpus_per_node}
    if cluster.gpu is not None and cluster.gpu.name in GPUS:
        changes["default_gpu"] = cluster.gpu.name
    return spec.replace(**changes)


def _per_replica(spec: RecipeSpec) -> float:
    """Sequences per data-parallel replica on the recipe's own cluster (its default DP)."""
    return spec.global_batch_size / Layout.of(spec).dp


def smallest_cluster(
    spec: RecipeSpec,
    cluster: Cluster,
    *,
    scale_global_batch: bool = False,
    stack: Optional[str] = None,
    min_nodes: int = 1,
    max_nodes: int = MAX_NODES,
) -> Optional[Cluster]:
    """The fewest nodes, at least `min_nodes`, of this cluster's node size and GPU on which `fit` finds a plan;
    None up to `max_nodes`."""
    per_replica = _per_replica(spec) if scale_global_batch else None
    for nodes in range(max(1, min_nodes), max_nodes + 1):
        trial = Cluster(nodes=nodes, gpus_per_node=cluster.gpus_per_node, gpu=cluster.gpu)
        plans = valid_plans(_on_cluster(spec, trial), trial, space=Space.FIT, stack=stack, per_replica=per_replica)
        if next(plans, None) is not None:
            return trial
    return None


# ---- changes ----


def _scaled_lr(lr: float, old_batch: int, new_batch: int, rule: LrScaling) -> float:
    if rule is None or old_batch == new_batch:
        return lr
    ratio = new_batch / old_batch
    return lr * (math.sqrt(ratio) if rule == "sqrt" else ratio)


#: How far --scale-global-batch may take a recipe. The square-root and linear rules are observations over a few
#: doublings of the batch (Goyal et al. 2017 to 8k images, Malladi et al. 2022 for Adam); past a critical batch
#: size they stop holding, and a learning rate many times the recipe's, tuned at its batch, is a guess that
#: diverges more often than not. A run of a few hundred steps is no pretraining: warmup and decay are its whole
#: schedule. Beyond these the fit is refused with the way out (keep the recipe's batch, or fewer nodes).
MAX_LR_FACTOR = 8.0
MIN_SCALED_STEPS = 1000


def raise_if_unsound(original: RecipeSpec, fitted: RecipeSpec, cluster: Cluster) -> None:
    """Refuse a global batch scaled so far that the learning rate or the run's length stop making sense."""
    factor = fitted.max_lr / original.max_lr if original.max_lr else 1.0
    keep = (
        f"drop --scale-global-batch (scale_global_batch=False) to keep the recipe's global batch of "
        f"{original.global_batch_size}, or plan on fewer than {cluster.nodes} nodes"
    )
    problems = []
    if factor > MAX_LR_FACTOR:
        problems.append(
            Problem(
                "max_lr",
                fitted.max_lr,
                f"is {factor:.3g}x the recipe's {original.max_lr:g} (global batch {original.global_batch_size} -> "
                f"{fitted.global_batch_size}); no scaling rule is known to hold beyond {MAX_LR_FACTOR:g}x.",
                keep + "; or --lr-scaling none and a learning rate you have tuned at that batch.",
            )
        )
    if fitted.train_steps < MIN_SCALED_STEPS:
        problems.append(
            Problem(
                "global_batch_size",
                fitted.global_batch_size,
                f"leaves {fitted.train_steps} optimizer steps for the run's {fitted.train_tokens:,} tokens (at "
                f"least {MIN_SCALED_STEPS} make a pretraining run: warmup and decay would be all of it).",
                keep + ", or train on more tokens (--tokens).",
            )
        )
    if problems:
        raise InvalidInputError(problems, context=f"fit {original.name} --scale-global-batch on {cluster.nodes} nodes")


def _changes(
    original: RecipeSpec, fitted: RecipeSpec, cluster: Cluster, reason: str, reference_dp: int, lr_scaling: LrScaling
) -> list[Change]:
    dp = Layout.of(fitted, cluster).dp
    why = {
        "num_nodes": "the target cluster",
        "num_gpus_per_node": "the target cluster",
        "default_gpu": "the target cluster",
        "global_batch_size": (
            f"scaled with data-parallel replicas {reference_dp} -> {dp}, keeping "
            f"{original.global_batch_size / reference_dp:g} sequences per replica"
        ),
        "max_lr": (f"{lr_scaling} rule for global batch {original.global_batch_size} -> {fitted.global_batch_size}"),
    }
    out = []
    for f in fields(RecipeSpec):
        old, new = getattr(original, f.name), getattr(fitted, f.name)
        if old != new:
            out.append(Change(f.name, old, new, why.get(f.name, reason)))
    return out


def _chosen(ranking: list[Candidate], what: str) -> str:
    runner_up = ranking[1] if len(ranking) > 1 else None
    return (
        f"chosen as the {what} ({ranking[0].label()}: predicted {summary(ranking[0])}); "
        f"{explain(ranking[0], runner_up)}"
    )


# ---- public ----


def _unchangeable(spec: RecipeSpec, cluster: Cluster) -> list[Problem]:
    layout = Layout.of(spec, cluster)
    fixed = [p for rule in (fp8_rule, data_blend_rule, context_parallel_rule) for p in rule(spec, layout)]
    fixed += [p for p in attention_heads_rule(spec, layout) if p.field in ("num_attention_heads", "num_query_groups")]
    return [p for p in fixed if p.severity == ERROR]


def fit(
    spec: RecipeSpec,
    cluster: Cluster,
    *,
    scale_global_batch: bool = False,
    lr_scaling: LrScaling = "sqrt",
    stack: Optional[str] = None,
) -> FitResult:
    """A version of `spec` that validates on `cluster`, with every change (field, from, to, why).

    When the recipe does not validate as given, the fastest valid plan of `search.Space.FIT` replaces its layout,
    and the changes say why, against the runner-up. `scale_global_batch`: keep the recipe's sequences per
    data-parallel replica (global batch x DP / the recipe's default DP) and rescale `max_lr` by `lr_scaling`
    ('sqrt', 'linear' or None). Raises InvalidInputError naming the smallest cluster that would work when nothing
    fits, or the problems fit cannot change (precision, data, CP).
    """
    check_inputs(spec, cluster)
    if lr_scaling not in LR_RULES:
        raise InvalidInputError(
            [Problem("lr_scaling", lr_scaling, "unknown learning-rate scaling rule.", "use 'sqrt', 'linear' or None.")],
            context="fit",
        )
    fixed = _unchangeable(spec, cluster)
    if fixed:
        raise InvalidInputError(fixed, context=f"fit {spec.name}: fields fit does not change")

    reference_dp = Layout.of(spec).dp
    per_replica = _per_replica(spec) if scale_global_batch else None
    base = _on_cluster(spec, cluster)
    layout = Layout.of(base, cluster)
    if per_replica is not None and layout.world_divides:
        base = base.replace(global_batch_size=scaled_batch(per_replica, layout.dp, base.micro_batch_size))
    first = validate(base, cluster, stack=stack)
    ranking: list[Candidate] = []
    explanation = ""
    if first.valid and cluster.gpus_per_node % base.tensor_parallel == 0:
        fitted, reason = base, "as given"
    else:
        ranking = ranked_plans(base, cluster, space=Space.FIT, stack=stack, per_replica=per_replica)
        if not ranking:
            raise _nothing_fits(spec, cluster, first, scale_global_batch, stack)
        fitted = ranking[0].spec
        error = first.errors[0] if first.errors else None
        explanation = _chosen(ranking, "fastest valid plan")
        reason = (
            f"as given, {error.field}={error.value}: {error.message.rstrip('.')}"
            if error
            else f"as given, TP={base.tensor_parallel} does not fit in a node of {cluster.gpus_per_node} GPUs"
        )
        reason += f"; {explanation}"
    if scale_global_batch:
        fitted = fitted.replace(
            max_lr=_scaled_lr(spec.max_lr, spec.global_batch_size, fitted.global_batch_size, lr_scaling)
        )
        raise_if_unsound(spec, fitted, cluster)
    fitted = fitted.replace()  # runs the catalog's own checks on the result
    changes = _changes(spec, fitted, cluster, reason, reference_dp, lr_scaling)
    report = validate(fitted, cluster, stack=stack).with_changes(changes)
    return FitResult(spec=fitted, changes=changes, report=report, ranking=ranking, explanation=explanation)


def best(spec: RecipeSpec, cluster: Cluster, *, stack: Optional[str] = None) -> FitResult:
    """The fastest valid plan of `spec` on `cluster` (`search.Space.BEST`: TP, PP, VP, micro batch, recompute; the
    global batch, precision, CP and sequence stay), with every change from the recipe and why, against the
    runner-up. Raises InvalidInputError like `fit` when nothing fits."""
    fixed = _unchangeable(spec, cluster)
    if fixed:
        raise InvalidInputError(fixed, context=f"best plan for {spec.name}: fields the search does not change")
    base = _on_cluster(spec, cluster)
    ranking = ranked_plans(base, cluster, space=Space.BEST, stack=stack)
    if not ranking:
        raise _nothing_fits(spec, cluster, validate(base, cluster, stack=stack), False, stack)
    fitted = ranking[0].spec.replace()
    explanation = _chosen(ranking, "fastest of {} valid plans".format(len(ranking)))
    given = next((c for c in ranking if not changed_fields(base, c.spec)), None)
    if given is not None and given is not ranking[0]:
        explanation += f"; the recipe as given: {given.step_time_s:.3g} s per step"
    changes = _changes(spec, fitted, cluster, explanation, Layout.of(spec).dp, None)
    report = validate(fitted, cluster, stack=stack).with_changes(changes)
    return FitResult(spec=fitted, changes=changes, report=report, ranking=ranking, explanation=explanation)


def advise(report: PlanReport, *, stack: Optional[str] = None) -> list[Advice]:
    """A faster valid plan on the same cluster, when the fastest of `search.Space.BEST` beats the report's plan by
    `ADVICE_MIN_SPEEDUP` or more; empty otherwise (and for invalid plans, or without a GPU type or an estimate)."""
    if not report.valid or report.cluster.gpu is None or not report.throughput or report.memory is None:
        return []
    current = Candidate(
        spec=report.spec,
        step_time_s=float(report.throughput["step_time_s"]),
        total_gib=report.memory.total,
        capacity_gib=report.memory.capacity,
        breakdown=dict(report.throughput.get("breakdown_s") or {}),
    )
    winner = fastest_plan(report.spec, report.cluster, space=Space.BEST, stack=stack)
    if winner is None or current.step_time_s / winner.step_time_s < ADVICE_MIN_SPEEDUP:
        return []
    return [
        Advice(
            changes=changed_fields(report.spec, winner.spec),
            step_time_s=winner.step_time_s,
            current_step_time_s=current.step_time_s,
            memory_gib=winner.total_gib,
            why=explain(winner, current, other_name="the plan as given"),
        )
    ]


def _nothing_fits(
    spec: RecipeSpec, cluster: Cluster, first: PlanReport, scale_global_batch: bool, stack: Optional[str]
) -> InvalidInputError:
    gpu = "GPU" if cluster.gpu is None else cluster.gpu.name
    smallest = smallest_cluster(spec, cluster, scale_global_batch=scale_global_batch, stack=stack)
    if smallest is not None and smallest.nodes > cluster.nodes:
        fix = (
            f"use at least {smallest.nodes} node(s) of {cluster.gpus_per_node} x {gpu} "
            f"({smallest.world_size} GPUs), the smallest cluster on which fit finds a plan"
        )
    elif smallest is not None:
        # Smaller clusters work, so the batch arithmetic, not the size, is what fails here: name the next size up.
        larger = smallest_cluster(
            spec, cluster, scale_global_batch=scale_global_batch, stack=stack, min_nodes=cluster.nodes + 1
        )
        fix = (
            f"fit finds a plan on {smallest.nodes} node(s) of {cluster.gpus_per_node} x {gpu}, the smallest "
            "cluster that works"
        )
        if larger is not None:
            fix += f", and on {larger.nodes} node(s), the next size up"
    else:
        fix = f"no cluster of up to {MAX_NODES} nodes of {cluster.gpus_per_node} x {gpu} fits"
    if not scale_global_batch:
        fix += "; or pass scale_global_batch=True so the global batch follows DP"
    problem = Problem(
        "cluster",
        f"{cluster.nodes} x {cluster.gpus_per_node} {gpu}",
        f"no choice of TP (within a node), PP, VP, recompute and micro batch makes {spec.name} valid on "
        f"{cluster.world_size} GPUs.",
        fix + ".",
    )
    return InvalidInputError([problem, *first.errors], context=f"fit {spec.name}")


def fit_closest(num_parameters: float, cluster: Cluster, **options) -> FitResult:
    """The catalog recipe closest to `num_parameters` (log scale, `catalog.closest_recipe`) fitted to `cluster`."""
    return fit(closest_recipe(num_parameters), cluster, **options)
