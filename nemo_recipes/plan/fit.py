"""Fit a recipe to a cluster: choose TP, PP (and VP), recomputation and micro batch so that it validates and fits,
derive DP and gradient accumulation, optionally scale the global batch and the learning rate, and say why.

Standard library only. The search is exhaustive over a small space (TP: divisors of the node that divide the heads;
PP: divisors of the layers; recompute and micro batch) and ranks the plans that fit by a rough step-time factor
(`layout_cost`): recompute overhead x TP communication x pipeline bubble. It is a ranking, not the throughput model.

Policy, so results are predictable:
- A recipe that already validates on the cluster keeps its layout (only the cluster fields, and the batch and LR when
  `scale_global_batch`, change).
- TP stays within a node (divides `gpus_per_node`); CP and precision are the recipe's.
- Recompute never drops below 'selective' unless the recipe has 'none' (selective costs a few percent and removes
  the largest and least certain activation term); full recompute covers as few layers per chunk as fit.
- An interleaved schedule (VP) is kept when it still divides the layers and the micro-batches, otherwise dropped;
  fit does not add one (it costs memory).
- Plans with under 5 % memory headroom rank after all others. The micro batch only shrinks; the distributed optimizer is switched on when it is off and DP > 1.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterator, Literal, Optional

from nemo_recipes.catalog import RecipeSpec, closest_recipe
from nemo_recipes.errors import ERROR, InvalidRecipeError, Problem
from nemo_recipes.plan.hardware import GPUS, Cluster
from nemo_recipes.plan.memory import estimate_memory, recomputed_fraction
from nemo_recipes.plan.report import Change, PlanReport, check_inputs
from nemo_recipes.plan.validate import (
    TIGHT_MEMORY_FRACTION,
    attention_heads_rule,
    context_parallel_rule,
    data_blend_rule,
    fp8_rule,
    layout_problems,
    validate,
)

LrScaling = Optional[Literal["sqrt", "linear"]]
LR_RULES = ("sqrt", "linear", None)
# Largest cluster the "smallest cluster that fits" search tries, in nodes (16k GPUs on 8-GPU nodes).
MAX_NODES = 2048
# GEMM efficiency assumed when comparing TP communication with compute in `layout_cost` (a typical Megatron MFU).
ASSUMED_EFFICIENCY = 0.5
_RECOMPUTE_ORDER = ("none", "selective", "full")
_LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel", "virtual_pipeline", "micro_batch_size", "recompute",
                  "recompute_num_layers", "distributed_optimizer")


@dataclass(frozen=True)
class FitResult:
    spec: RecipeSpec
    changes: list[Change]
    report: PlanReport


@dataclass(frozen=True)
class _Candidate:
    spec: RecipeSpec
    cost: float
    recompute_factor: float
    tp_factor: float
    bubble_factor: float
    total_gib: Optional[float]


# ---- ranking ----

def layout_cost(spec: RecipeSpec, cluster: Cluster) -> tuple[float, float, float]:
    """(recompute, TP communication, pipeline bubble) step-time factors, each >= 1.

    Recompute: extra forward FLOPs over the 3 forward-equivalents of a training step (perf-model.md 2.2): the
    attention core (4 s h FLOPs per token and layer) for selective, one whole layer forward for full.
    TP: per token and layer, 8 h (t-1)/t bf16 elements over NVLink (Narayanan et al. 2021, Sec. 3.3) against the
    layer's FLOPs / t at `ASSUMED_EFFICIENCY` of the peak; without a GPU, H100 figures.
    Bubble: 1 + (p-1)/(v m) (Narayanan et al. 2021, Sec. 2.2).
    """
    h, s, t = spec.hidden_size, spec.seq_length, spec.tensor_parallel
    kv = spec.kv_groups * (h // spec.num_attention_heads)
    fc1 = (2 if spec.gated_linear_unit else 1) * spec.ffn_hidden_size
    dense = 2.0 * (h * (h + 2 * kv) + h * h + h * fc1 + spec.ffn_hidden_size * h)
    core = 4.0 * s * h
    forward = dense + core
    if spec.recompute == "selective":
        recompute = 1.0 + core / (3.0 * forward)
    elif spec.recompute == "full":
        recompute = 1.0 + recomputed_fraction(spec) / 3.0
    else:
        recompute = 1.0
    gpu = cluster.gpu or GPUS["h100-80gb"]
    link = gpu.nvlink_gb_s if t <= cluster.gpus_per_node or t <= gpu.nvlink_domain else gpu.network_gb_s
    comm_s = 8.0 * h * (t - 1) / t * 2.0 / (link * 1e9)
    compute_s = 3.0 * forward / t / (gpu.bf16_tflops * 1e12 * ASSUMED_EFFICIENCY)
    tp = 1.0 + comm_s / compute_s
    p = spec.pipeline_parallel
    v = spec.virtual_pipeline if spec.virtual_pipeline and spec.virtual_pipeline > 1 and p > 1 else 1
    dp = max(1, cluster.world_size // spec.model_parallel_size)
    m = max(1, spec.global_batch_size // (spec.micro_batch_size * dp))
    bubble = 1.0 + (p - 1) / (v * m)
    return recompute, tp, bubble


# ---- search ----

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _on_cluster(spec: RecipeSpec, cluster: Cluster) -> RecipeSpec:
    changes = {"num_nodes": cluster.nodes, "num_gpus_per_node": cluster.gpus_per_node}
    if cluster.gpu is not None and cluster.gpu.name in GPUS:
        changes["default_gpu"] = cluster.gpu.name
    return spec.replace(**changes)


def _scaled_batch(per_replica: float, dp: int, micro_batch: int) -> int:
    """The global batch keeping `per_replica` sequences per data-parallel replica, rounded to a multiple of
    micro batch x DP."""
    step = micro_batch * dp
    return max(1, round(per_replica * dp / step)) * step


def _per_replica(spec: RecipeSpec) -> float:
    """Sequences per data-parallel replica on the recipe's own cluster (its default DP)."""
    return spec.global_batch_size / spec.data_parallel_size


def _virtual_for(spec: RecipeSpec, p: int, m: int) -> Optional[int]:
    vp = spec.virtual_pipeline
    if not vp or vp < 2 or p < 2 or m % p:
        return None
    for v in range(vp, 1, -1):
        if spec.num_layers % (p * v) == 0:
            return v
    return None


def _fits(spec: RecipeSpec, cluster: Cluster, flash_attention: bool) -> Optional[float]:
    """Total GiB when `spec` has no layout error and fits (no GPU: 0.0 when the layout is valid), else None."""
    if any(p.severity == ERROR for p in layout_problems(spec, cluster)):
        return None
    if cluster.gpu is None:
        return 0.0
    total = estimate_memory(spec, cluster, flash_attention=flash_attention).total
    return total if total <= cluster.gpu.memory_gib else None


def _recompute_options(spec: RecipeSpec, base: RecipeSpec, cluster: Cluster,
                       flash_attention: bool) -> Iterator[tuple[RecipeSpec, float]]:
    """Each recompute mode at or above the recipe's floor that fits, with full covering the fewest layers."""
    floor = "none" if spec.recompute == "none" else "selective"
    for mode in _RECOMPUTE_ORDER[_RECOMPUTE_ORDER.index(floor):]:
        if mode != "full":
            candidate = dataclasses.replace(base, recompute=mode, recompute_num_layers=None)
            total = _fits(candidate, cluster, flash_attention)
            if total is not None:
                yield candidate, total
            continue
        v = base.virtual_pipeline if base.virtual_pipeline and base.pipeline_parallel > 1 else 1
        chunk = max(1, base.num_layers // (base.pipeline_parallel * v))
        everything = dataclasses.replace(base, recompute="full", recompute_num_layers=None)
        if _fits(everything, cluster, flash_attention) is None:
            return
        low, high = 1, chunk  # memory falls as more layers are recomputed: find the fewest that fit
        while low < high:
            mid = (low + high) // 2
            trial = dataclasses.replace(base, recompute="full", recompute_num_layers=mid)
            if _fits(trial, cluster, flash_attention) is None:
                low = mid + 1
            else:
                high = mid
        best = everything if low == chunk else dataclasses.replace(base, recompute="full",
                                                                   recompute_num_layers=low)
        yield best, _fits(best, cluster, flash_attention)


def _candidates(spec: RecipeSpec, cluster: Cluster, *, per_replica: Optional[float],
                flash_attention: bool) -> Iterator[_Candidate]:
    per_node, world, c = cluster.gpus_per_node, cluster.world_size, spec.context_parallel
    tps = [t for t in _divisors(per_node)
           if spec.num_attention_heads % t == 0 and spec.kv_groups % t == 0 and spec.ffn_hidden_size % t == 0]
    if spec.sequence_parallel is True:
        tps = [t for t in tps if t > 1]
    distributed = [spec.distributed_optimizer] if spec.distributed_optimizer else [False, True]
    for t in tps:
        for p in _divisors(spec.num_layers):
            if world % (t * p * c):
                continue
            dp = world // (t * p * c)
            for b in range(spec.micro_batch_size, 0, -1):
                gbs = spec.global_batch_size if per_replica is None else _scaled_batch(per_replica, dp, b)
                if gbs % (b * dp):
                    continue
                m = gbs // (b * dp)
                for dist in distributed:
                    base = dataclasses.replace(
                        spec, tensor_parallel=t, pipeline_parallel=p, micro_batch_size=b, global_batch_size=gbs,
                        virtual_pipeline=_virtual_for(spec, p, m), distributed_optimizer=dist)
                    for candidate, total in _recompute_options(spec, base, cluster, flash_attention):
                        r, tp, bubble = layout_cost(candidate, cluster)
                        yield _Candidate(candidate, r * tp * bubble, r, tp, bubble,
                                         None if cluster.gpu is None else total)


def _changed(a: RecipeSpec, b: RecipeSpec) -> int:
    return sum(getattr(a, f) != getattr(b, f) for f in _LAYOUT_FIELDS)


def _best(spec: RecipeSpec, cluster: Cluster, *, per_replica: Optional[float],
          flash_attention: bool) -> Optional[_Candidate]:
    """The cheapest plan that fits; `per_replica` (sequences per DP replica) scales the global batch, None keeps it."""
    options = _candidates(spec, cluster, per_replica=per_replica, flash_attention=flash_attention)
    capacity = None if cluster.gpu is None else cluster.gpu.memory_gib

    def tight(o: _Candidate) -> bool:  # validate warns on these; prefer a plan with headroom when one exists
        return capacity is not None and o.total_gib > (1.0 - TIGHT_MEMORY_FRACTION) * capacity

    return min(options, key=lambda o: (tight(o), round(o.cost, 4), _changed(spec, o.spec),
                                       -o.spec.micro_batch_size), default=None)


def smallest_cluster(spec: RecipeSpec, cluster: Cluster, *, scale_global_batch: bool = False,
                     flash_attention: bool = False, min_nodes: int = 1,
                     max_nodes: int = MAX_NODES) -> Optional[Cluster]:
    """The fewest nodes, at least `min_nodes`, of this cluster's node size and GPU on which `fit` finds a plan;
    None up to `max_nodes`."""
    per_replica = _per_replica(spec) if scale_global_batch else None
    for nodes in range(max(1, min_nodes), max_nodes + 1):
        trial = Cluster(nodes=nodes, gpus_per_node=cluster.gpus_per_node, gpu=cluster.gpu)
        if _best(_on_cluster(spec, trial), trial, per_replica=per_replica, flash_attention=flash_attention):
            return trial
    return None


# ---- changes ----

def _scaled_lr(lr: float, old_batch: int, new_batch: int, rule: LrScaling) -> float:
    if rule is None or old_batch == new_batch:
        return lr
    ratio = new_batch / old_batch
    return lr * (math.sqrt(ratio) if rule == "sqrt" else ratio)


def _changes(original: RecipeSpec, fitted: RecipeSpec, cluster: Cluster, reason: str, chosen: Optional[_Candidate],
             reference_dp: int, lr_scaling: LrScaling) -> list[Change]:
    dp = max(1, cluster.world_size // fitted.model_parallel_size)
    layout = reason
    if chosen is not None:
        fits = "" if chosen.total_gib is None else f"fits {chosen.total_gib:.1f} of {cluster.gpu.memory_gib:g} GiB; "
        layout = (f"{reason}; chosen as the cheapest layout that fits ({fits}estimated step-time factor x{chosen.cost:.2f} = "
                  f"recompute x{chosen.recompute_factor:.2f}, TP communication x{chosen.tp_factor:.2f}, "
                  f"pipeline bubble x{chosen.bubble_factor:.2f})")
    why = {
        "num_nodes": "the target cluster",
        "num_gpus_per_node": "the target cluster",
        "default_gpu": "the target cluster",
        "global_batch_size": (f"scaled with data-parallel replicas {reference_dp} -> {dp}, keeping "
                              f"{original.global_batch_size / reference_dp:g} sequences per replica"),
        "max_lr": (f"{lr_scaling} rule for global batch {original.global_batch_size} -> "
                   f"{fitted.global_batch_size}"),
    }
    out = []
    for f in dataclasses.fields(RecipeSpec):
        old, new = getattr(original, f.name), getattr(fitted, f.name)
        if old != new:
            out.append(Change(f.name, old, new, why.get(f.name, layout)))
    return out


# ---- public ----

def fit(spec: RecipeSpec, cluster: Cluster, *, scale_global_batch: bool = False, lr_scaling: LrScaling = "sqrt",
        flash_attention: bool = False) -> FitResult:
    """A version of `spec` that validates on `cluster`, with every change (field, from, to, why).

    `scale_global_batch`: keep the recipe's sequences per data-parallel replica (global batch x DP / the recipe's
    default DP) and rescale `max_lr` by `lr_scaling` ('sqrt', 'linear' or None). Raises InvalidRecipeError naming the
    smallest cluster that would work when nothing fits, or the problems fit cannot change (precision, data, CP).
    """
    check_inputs(spec, cluster)
    if lr_scaling not in LR_RULES:
        raise InvalidRecipeError([Problem("lr_scaling", lr_scaling, "unknown learning-rate scaling rule.",
                                          "use 'sqrt', 'linear' or None.")], context="fit")
    fixed = [p for rule in (fp8_rule, data_blend_rule, context_parallel_rule) for p in rule(spec, cluster)]
    fixed += [p for p in attention_heads_rule(spec, cluster) if p.field in ("num_attention_heads",
                                                                            "num_query_groups")]
    fixed = [p for p in fixed if p.severity == ERROR]
    if fixed:
        raise InvalidRecipeError(fixed, context=f"fit {spec.name}: fields fit does not change")

    reference_dp = spec.data_parallel_size
    per_replica = _per_replica(spec) if scale_global_batch else None
    base = _on_cluster(spec, cluster)
    if per_replica is not None and cluster.world_size % base.model_parallel_size == 0:
        dp = cluster.world_size // base.model_parallel_size
        base = base.replace(global_batch_size=_scaled_batch(per_replica, dp, base.micro_batch_size))
    first = validate(base, cluster, flash_attention=flash_attention)
    chosen: Optional[_Candidate] = None
    within_node = cluster.gpus_per_node % base.tensor_parallel == 0
    if first.valid and within_node:
        fitted, reason = base, "as given"
    else:
        chosen = _best(base, cluster, per_replica=per_replica, flash_attention=flash_attention)
        if chosen is None:
            raise _nothing_fits(spec, cluster, first, scale_global_batch, flash_attention)
        fitted = chosen.spec
        error = first.errors[0] if first.errors else None
        reason = (f"as given, {error.field}={error.value}: {error.message.rstrip('.')}" if error else
                  f"as given, TP={base.tensor_parallel} does not fit in a node of {cluster.gpus_per_node} GPUs")
    if scale_global_batch:
        fitted = fitted.replace(max_lr=_scaled_lr(spec.max_lr, spec.global_batch_size, fitted.global_batch_size,
                                                  lr_scaling))
    fitted = fitted.replace()  # runs the catalog's own checks on the result
    changes = _changes(spec, fitted, cluster, reason, chosen, reference_dp, lr_scaling)
    report = validate(fitted, cluster, flash_attention=flash_attention).with_changes(changes)
    return FitResult(spec=fitted, changes=changes, report=report)


def _nothing_fits(spec: RecipeSpec, cluster: Cluster, first: PlanReport, scale_global_batch: bool,
                  flash_attention: bool) -> InvalidRecipeError:
    gpu = "GPU" if cluster.gpu is None else cluster.gpu.name
    smallest = smallest_cluster(spec, cluster, scale_global_batch=scale_global_batch,
                                flash_attention=flash_attention)
    if smallest is not None and smallest.nodes > cluster.nodes:
        fix = (f"use at least {smallest.nodes} node(s) of {cluster.gpus_per_node} x {gpu} "
               f"({smallest.world_size} GPUs), the smallest cluster on which fit finds a plan")
    elif smallest is not None:
        # Smaller clusters work, so the batch arithmetic, not the size, is what fails here: name the next size up.
        larger = smallest_cluster(spec, cluster, scale_global_batch=scale_global_batch,
                                  flash_attention=flash_attention, min_nodes=cluster.nodes + 1)
        fix = (f"fit finds a plan on {smallest.nodes} node(s) of {cluster.gpus_per_node} x {gpu}, the smallest "
               "cluster that works")
        if larger is not None:
            fix += f", and on {larger.nodes} node(s), the next size up"
    else:
        fix = f"no cluster of up to {MAX_NODES} nodes of {cluster.gpus_per_node} x {gpu} fits"
    if not scale_global_batch:
        fix += "; or pass scale_global_batch=True so the global batch follows DP"
    problem = Problem(
        "cluster", f"{cluster.nodes} x {cluster.gpus_per_node} {gpu}",
        f"no choice of TP (within a node), PP, VP, recompute and micro batch makes {spec.name} valid on "
        f"{cluster.world_size} GPUs.", fix + ".")
    return InvalidRecipeError([problem, *first.errors], context=f"fit {spec.name}")


def fit_closest(num_parameters: float, cluster: Cluster, **options) -> FitResult:
    """The catalog recipe closest to `num_parameters` (log scale, `catalog.closest_recipe`) fitted to `cluster`."""
    return fit(closest_recipe(num_parameters), cluster, **options)
