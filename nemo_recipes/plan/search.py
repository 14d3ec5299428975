"""The valid plans of a recipe on a cluster, ranked by predicted step time: what `fit`, `plan --best` and the advice
line of `plan` choose from.

Standard library only. A plan is a choice of TP (divisors of a node that meet every block's TP split need),
PP (divisors of the pipeline split), VP, micro batch, recomputation and the distributed optimizer; it is valid when no
rule of `validate` reports an error for it and, with a GPU, its memory fits. Valid plans are ranked by the step time
of the throughput model (`throughput.estimate_throughput`, on the same program: same stack, same overlaps). Step times
within `TIE` count as equal, and then the plan with more memory headroom wins; plans that leave under 5 % headroom
(validate warns on those) rank after all others. Recomputation, when full, covers as few layers per chunk as fit.

Two search spaces:
- `Space.FIT` (what `fit` changes when the recipe does not validate): the micro batch only shrinks, recomputation
  never drops below 'selective' unless the recipe has 'none', an interleaved schedule is kept when it still divides
  and never added.
- `Space.BEST` (`plan --best`, and the advice of `plan`): every micro batch up to `MAX_MICRO_BATCH` that divides the
  batch per replica, recomputation from 'none', and interleaved schedules of every VP that divides a stage's layers.
Both keep the global batch (unless `fit` scales it), precision, context parallelism and sequence length.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.counts import divisors
from nemo_recipes.errors import ERROR, InvalidInputError
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.blocks import MoE
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.layout import Layout, pipeline_sizes, shape_architecture
from nemo_recipes.plan.memory import LayoutActivations, ModelState, model_state, state_floor_gib, total_gib
from nemo_recipes.plan.rules import LAYOUT_RULES, RECOMPUTE_RULES, Rule, program_problems
from nemo_recipes.plan.stack import Program, program_for
from nemo_recipes.plan.throughput import step_time
from nemo_recipes.plan.validation import TIGHT_MEMORY_FRACTION

# Step times closer than this are a tie (the model cannot tell them apart): more memory headroom wins.
TIE = 0.01
# The largest micro batch the BEST space tries: beyond it GEMMs gain nothing and activations only grow.
MAX_MICRO_BATCH = 8
# Fields that describe a plan's layout; a candidate differs from the recipe only in these (and the batch).
PLAN_FIELDS = (
    "tensor_parallel",
    "pipeline_parallel",
    "virtual_pipeline",
    "micro_batch_size",
    "recompute",
    "recompute_num_layers",
    "distributed_optimizer",
    "global_batch_size",
    "expert_parallel",
    "expert_tensor_parallel",
)
_RECOMPUTE_ORDER = ("none", "selective", "full")


class Space(enum.Enum):
    FIT = "fit"
    BEST = "best"


@dataclass(frozen=True)
class Candidate:
    """One valid plan and what the models predict for it."""

    spec: RecipeSpec
    step_time_s: float
    total_gib: Optional[float]  # None without a GPU type
    capacity_gib: Optional[float]
    breakdown: dict[str, float]

    @property
    def headroom_gib(self) -> Optional[float]:
        # total_gib and capacity_gib are both None or both set (without a GPU type or with one)
        return None if self.capacity_gib is None or self.total_gib is None else self.capacity_gib - self.total_gib

    @property
    def tight(self) -> bool:
        return _tight(self.total_gib, self.capacity_gib)

    def label(self) -> str:
        s = self.spec
        parts = [f"TP {s.tensor_parallel}", f"PP {s.pipeline_parallel}"]
        if s.num_moe_experts:
            parts.append(f"EP {s.expert_parallel}, ETP {s.expert_tensor_parallel_size}")
        if s.virtual_pipeline:
            parts.append(f"VP {s.virtual_pipeline}")
        parts.append(f"micro batch {s.micro_batch_size}")
        recompute: str = s.recompute
        if s.recompute == "full" and s.recompute_num_layers:
            recompute += f" ({s.recompute_num_layers} layers/chunk)"
        parts.append(f"recompute {recompute}")
        return ", ".join(parts)


def _tight(total_gib: Optional[float], capacity_gib: Optional[float]) -> bool:
    """Under 5 % of the GPU's memory left (validate warns): such plans rank after all others."""
    return (
        capacity_gib is not None
        and total_gib is not None
        and capacity_gib - total_gib < TIGHT_MEMORY_FRACTION * capacity_gib
    )


def _with(spec: RecipeSpec, **changes: object) -> RecipeSpec:
    """`spec` with plan fields changed, skipping the catalog's type checks: the search only writes positive ints,
    None and booleans into fields that already hold valid values (the checks would cost most of the search)."""
    copy = object.__new__(RecipeSpec)
    copy.__dict__.update(spec.__dict__)
    copy.__dict__.update(changes)
    return copy


def _errors(spec: RecipeSpec, layout: Layout, rules: tuple[Rule, ...]) -> bool:
    for rule in rules:  # loops, not a generator: the search asks this once per memory estimate
        for problem in rule(spec, layout):
            if problem.severity == ERROR:
                return True
    return False


def scaled_batch(per_replica: float, dp: int, micro_batch: int) -> int:
    """The global batch keeping `per_replica` sequences per data-parallel replica, rounded to a multiple of
    micro batch x DP."""
    step = micro_batch * dp
    return max(1, round(per_replica * dp / step)) * step


def _virtuals(spec: RecipeSpec, p: int, m: int, slots: int, space: Space) -> list[Optional[int]]:
    """Interleaving choices for PP = p with m micro-batches: Megatron needs m a multiple of p."""
    if p < 2 or m % p or slots % p:
        return [None]
    divides = [v for v in divisors(slots // p) if v > 1]
    if space is Space.BEST:
        return [None, *divides]
    kept = [v for v in range(spec.virtual_pipeline or 1, 1, -1) if v in divides]
    return [kept[0] if kept else None]


def _micro_batches(spec: RecipeSpec, per_replica_batch: Optional[int], space: Space) -> list[int]:
    """Micro batches to try, largest first; `per_replica_batch` (sequences per replica and step) when it is fixed."""
    if space is Space.FIT or per_replica_batch is None:
        return list(range(spec.micro_batch_size, 0, -1))
    top = max(MAX_MICRO_BATCH, spec.micro_batch_size)
    return [b for b in reversed(divisors(per_replica_batch)) if b <= top]


def layouts(
    spec: RecipeSpec, cluster: Cluster, *, space: Space, per_replica: Optional[float] = None
) -> Iterator[RecipeSpec]:
    """Every (TP, PP, VP, micro batch, distributed optimizer) the space allows on `cluster`, recompute as the recipe's.
    `per_replica` (sequences per data-parallel replica) scales the global batch with DP; None keeps it."""
    for base, _ in _laid_out(spec, cluster, space=space, per_replica=per_replica):
        yield base


def _laid_out(
    spec: RecipeSpec, cluster: Cluster, *, space: Space, per_replica: Optional[float]
) -> Iterator[tuple[RecipeSpec, Layout]]:
    """`layouts`, each with its layout: one per VP, shared by both settings of the distributed optimizer (which does
    not change a layout), the interleaved ones derived from the layout without interleaving, and that from the
    layout of the same TP, PP and experts at the first micro batch (`Layout.batched`)."""
    needs = [need for need in shape_architecture(spec).split_needs() if need.group == "tp"]
    tps = [t for t in divisors(cluster.gpus_per_node) if all(need.met_by(t) for need in needs)]
    if spec.sequence_parallel is True:
        tps = [t for t in tps if t > 1]
    distributed = [True] if spec.distributed_optimizer else [False, True]
    world = cluster.world_size
    moe = Architecture.of(spec).moe  # the experts whose parallel sizes the search also chooses (None: dense)
    for t in tps:
        for p in pipeline_sizes(spec):
            model_parallel = t * p * spec.context_parallel
            if world % model_parallel:  # `Layout.world_divides`
                continue
            dp = world // model_parallel  # `Layout.dp` where the world divides
            fixed = None if per_replica is not None or spec.global_batch_size % dp else spec.global_batch_size // dp
            splits = expert_layouts(spec, cluster, t, p, moe)
            laid: dict[int, Layout] = {}  # each split's layout at the first micro batch: the others change its batch
            for b in _micro_batches(spec, fixed, space):
                gbs = spec.global_batch_size if per_replica is None else scaled_batch(per_replica, dp, b)
                for split, experts in enumerate(splits):
                    base = _with(
                        spec,
                        tensor_parallel=t,
                        pipeline_parallel=p,
                        virtual_pipeline=None,
                        micro_batch_size=b,
                        global_batch_size=gbs,
                        **experts,
                    )
                    if split in laid:
                        layout = laid[split].batched(base)
                    else:
                        layout = laid[split] = Layout.of(base, cluster)
                    if not layout.batch_divides:
                        continue
                    for v in _virtuals(spec, p, layout.microbatches, layout.pipeline_slots, space):
                        chunked = layout.interleaved_by(base, v) if v else layout
                        for dist in distributed:
                            yield _with(base, virtual_pipeline=v, distributed_optimizer=dist), chunked


def expert_layouts(spec: RecipeSpec, cluster: Cluster, tp: int, pp: int, moe: Optional[MoE]) -> list[dict[str, Any]]:
    """The expert-parallel sizes to try with TP `tp` and PP `pp` (a dense recipe: none to change): ETP among the
    divisors of a node that split each expert's width (unset where the recipe leaves it so and it equals TP), EP among
    the divisors of the routed experts whose EP x ETP divides the GPUs of a pipeline stage (the expert-data-parallel
    group, world / (PP x EP x ETP), is whole: parallel_state.initialize_model_parallel). `moe`: the recipe's
    experts (`Architecture.moe`)."""
    if moe is None:
        return [{}]
    stage = cluster.world_size // pp
    found = []
    for etp in divisors(cluster.gpus_per_node):
        if moe.expert_ffn % etp or stage % etp:
            continue
        for ep in divisors(moe.experts):
            if stage % (ep * etp) == 0:
                unset = etp == tp and spec.expert_tensor_parallel is None  # the recipe's way of saying it
                found.append({"expert_parallel": ep, "expert_tensor_parallel": None if unset else etp})
    return found


def _memory(
    spec: RecipeSpec,
    cluster: Cluster,
    layout: Layout,
    program: Program,
    terms: LayoutActivations,
    state: Optional[ModelState] = None,
) -> Optional[float]:
    """Total GiB when `spec` (whose layout, program and activation terms these are, and which `recompute_options`
    found free of the errors that do not depend on recomputation) has no error and fits (0.0 without a GPU type),
    else None."""
    if _errors(spec, layout, RECOMPUTE_RULES):
        return None
    if cluster.gpu is None:
        return 0.0
    total = total_gib(spec, layout, program, terms, state)
    return total if total <= cluster.gpu.memory_gib else None


def recompute_options(
    spec: RecipeSpec,
    base: RecipeSpec,
    cluster: Cluster,
    *,
    space: Space,
    stack: Optional[str],
    layout: Optional[Layout] = None,
    programs: Optional[dict[tuple, Program]] = None,
) -> Iterator[tuple[RecipeSpec, float, Layout, Program]]:
    """Each recompute mode that fits `base`'s layout, with full covering the fewest layers per chunk that fit; with
    its total GiB, and the layout and program it shares with `base`. `layout`: `base`'s on `cluster`, when at hand;
    `programs`: the programs of one search so far (see `_program`)."""
    floor = "none" if space is Space.BEST or spec.recompute == "none" else "selective"
    # Recomputation changes neither the layout nor the program: both are computed once for every mode tried.
    layout = layout or Layout.of(base, cluster)
    program = _program(base, cluster, stack, layout, programs)
    state = model_state(base, layout, program)
    # Where the model state alone overflows the GPU, no mode fits: most layouts of a large model end here, before
    # their rules and activations are worked out.
    if cluster.gpu is not None and state_floor_gib(state) > cluster.gpu.memory_gib:
        return
    # Nor do they change what every other rule and the stack say: an error there rules out every mode.
    if _errors(base, layout, LAYOUT_RULES) or program_problems(base, program):
        return
    terms = LayoutActivations.of(base, layout)
    for mode in _RECOMPUTE_ORDER[_RECOMPUTE_ORDER.index(floor) :]:
        if mode != "full":
            candidate = _with(base, recompute=mode, recompute_num_layers=None)
            total = _memory(candidate, cluster, layout, program, terms, state)
            if total is not None:
                yield candidate, total, layout, program
                if mode == "none":
                    return  # recomputing more of the same layout only adds time
            continue
        everything = _with(base, recompute="full", recompute_num_layers=None)
        # The total of the fewest layers found to fit.
        fitting = _memory(everything, cluster, layout, program, terms, state)
        if fitting is None:
            return
        chunk = layout.layers_per_chunk
        low, high = 1, chunk  # memory falls as more layers are recomputed: find the fewest that fit
        while low < high:
            mid = (low + high) // 2
            trial = _with(base, recompute="full", recompute_num_layers=mid)
            total = _memory(trial, cluster, layout, program, terms, state)
            if total is None:
                low = mid + 1
            else:
                high, fitting = mid, total
        best = everything if low == chunk else _with(base, recompute="full", recompute_num_layers=low)
        yield best, fitting, layout, program


def _program(
    base: RecipeSpec, cluster: Cluster, stack: Optional[str], layout: Layout, programs: Optional[dict[tuple, Program]]
) -> Program:
    """`program_for` of `base`, kept in `programs` for the rest of its search: the layouts of one search differ only
    in `PLAN_FIELDS`, of which the program reads TP (through sequence parallelism), the distributed optimizer and
    whether the schedule is interleaved."""
    programs = {} if programs is None else programs
    key = (base.tensor_parallel, base.distributed_optimizer, layout.interleaved)
    if key not in programs:
        programs[key] = program_for(base, cluster.gpu, stack, layout.interleaved)
    return programs[key]


def valid_plans(
    spec: RecipeSpec,
    cluster: Cluster,
    *,
    space: Space,
    stack: Optional[str] = None,
    per_replica: Optional[float] = None,
) -> Iterator[tuple[RecipeSpec, float]]:
    """Every valid plan of the space, with its total GiB (0.0 without a GPU type)."""
    for candidate, total, _, _ in _valid_plans(spec, cluster, space=space, stack=stack, per_replica=per_replica):
        yield candidate, total


def _valid_plans(
    spec: RecipeSpec, cluster: Cluster, *, space: Space, stack: Optional[str], per_replica: Optional[float]
) -> Iterator[tuple[RecipeSpec, float, Layout, Program]]:
    programs: dict[tuple, Program] = {}
    for base, layout in _laid_out(spec, cluster, space=space, per_replica=per_replica):
        yield from recompute_options(spec, base, cluster, space=space, stack=stack, layout=layout, programs=programs)


def evaluate(
    spec: RecipeSpec,
    cluster: Cluster,
    total: Optional[float],
    stack: Optional[str],
    layout_and_program: Optional[tuple[Layout, Program]] = None,
    shared: Optional[dict[tuple, Any]] = None,
) -> Candidate:
    """`spec` timed as a candidate; `layout_and_program`: its layout on `cluster` and its program, when at hand for a
    plan whose rules report no error (`throughput.step_time`'s `known`); `shared`: one search's (`step_time`)."""
    step_time_s, breakdown = step_time(spec, cluster, stack=stack, known=layout_and_program, shared=shared)
    return Candidate(
        spec=spec,
        step_time_s=step_time_s,
        total_gib=None if cluster.gpu is None else total,
        capacity_gib=None if cluster.gpu is None else cluster.gpu.memory_gib,
        breakdown=breakdown,
    )


def changed_fields(a: RecipeSpec, b: RecipeSpec) -> dict[str, object]:
    """The plan fields whose values differ, with `b`'s values."""
    return {f: getattr(b, f) for f in PLAN_FIELDS if getattr(a, f) != getattr(b, f)}


def rank(candidates: Iterable[Candidate], reference: RecipeSpec) -> list[Candidate]:
    """Fastest first; within `TIE` of the fastest, more headroom first (then fewer changes from `reference`); plans
    with under 5 % headroom after all others."""
    ordered = sorted(candidates, key=lambda c: (c.tight, c.step_time_s))
    if not ordered:
        return []
    lead = ordered[0]
    # Split in one pass: telling the rest by `c not in ties` compared candidates field by field (their specs' too).
    ties: list[Candidate] = []
    rest: list[Candidate] = []
    for c in ordered:
        (ties if c.tight == lead.tight and c.step_time_s <= lead.step_time_s * (1 + TIE) else rest).append(c)
    ties.sort(
        key=lambda c: (-(c.headroom_gib or 0.0), len(changed_fields(reference, c.spec)), -c.spec.micro_batch_size)
    )
    return ties + rest


def ranked_plans(
    spec: RecipeSpec,
    cluster: Cluster,
    *,
    space: Space,
    stack: Optional[str] = None,
    per_replica: Optional[float] = None,
) -> list[Candidate]:
    """The valid plans of the space, ranked (see `rank`)."""
    plans = _valid_plans(spec, cluster, space=space, stack=stack, per_replica=per_replica)
    return rank(_evaluated(plans, cluster, stack), spec)


def fastest_plan(
    spec: RecipeSpec, cluster: Cluster, *, space: Space, stack: Optional[str] = None
) -> Optional[Candidate]:
    """`ranked_plans(...)[0]` (None when no plan is valid), timing only the plans that can rank first: `rank` puts the
    tight ones after all others, so they are timed only when no other plan is valid."""
    plans = list(_valid_plans(spec, cluster, space=space, stack=stack, per_replica=None))
    capacity = None if cluster.gpu is None else cluster.gpu.memory_gib
    for tight in (False, True):
        ranking = rank(_evaluated([p for p in plans if _tight(p[1], capacity) is tight], cluster, stack), spec)
        if ranking:
            return ranking[0]
    return None


def _evaluated(
    plans: Iterable[tuple[RecipeSpec, float, Layout, Program]], cluster: Cluster, stack: Optional[str]
) -> list[Candidate]:
    candidates = []
    shared: dict[tuple, Any] = {}
    for candidate, total, layout, program in plans:
        try:
            candidates.append(evaluate(candidate, cluster, total, stack, (layout, program), shared))
        except InvalidInputError:  # a plan the throughput model refuses is not valid either
            continue
    return candidates


def summary(candidate: Candidate) -> str:
    """'1.23 s per step, 71.2 of 79.6 GiB'."""
    text = f"{candidate.step_time_s:.3g} s per step"
    if candidate.total_gib is not None:
        text += f", {candidate.total_gib:.1f} of {candidate.capacity_gib:g} GiB"
    return text


def explain(winner: Candidate, other: Optional[Candidate], *, other_name: str = "runner-up") -> str:
    """Why `winner` beats `other`: the other's step time and the parts of the step that differ most."""
    if other is None:
        return "the only valid plan in the search"
    slower = 100.0 * (other.step_time_s / winner.step_time_s - 1.0)
    deltas = sorted(
        (
            (other.breakdown.get(k, 0.0) - winner.breakdown.get(k, 0.0), k)
            for k in set(winner.breakdown) | set(other.breakdown)
        ),
        key=lambda d: (-abs(d[0]), d[1]),
    )
    parts = [f"{k.replace('_', ' ')} {d:+.3g} s" for d, k in deltas[:3] if abs(d) > 1e-4 * other.step_time_s]
    memory = "" if other.total_gib is None else f", {other.total_gib:.1f} GiB"
    text = f"{other_name} ({other.label()}) takes {other.step_time_s:.3g} s per step ({slower:+.1f} %){memory}"
    if parts:
        text += f", spending {', '.join(parts)}"
    if winner.headroom_gib is not None and other.headroom_gib is not None and abs(slower) < 100 * TIE:
        text += (
            f"; a tie within {100 * TIE:g} %, decided by memory headroom ({winner.headroom_gib:.1f} against "
            f"{other.headroom_gib:.1f} GiB)"
        )
    return text
