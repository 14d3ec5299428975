"""Layout invariance: a parallel layout computes the one-process model, so its loss curve equals the one-process
curve of the same recipe, seed and data; and data-parallel replicas end with identical weights.

Preconditions, which the comparison run sets in both runs: dropout off (NeMo's dropout streams differ per layout:
Megatron forks them per tensor-parallel rank and seeds them per pipeline stage), the same initial weights (the
layout-invariant start of replicas.py; Megatron's own initialisation depends on the pipeline split), the same
global batch and data (the reference takes the parallel run's shape and global batch; Megatron's sampler gives
every layout the same samples per step, DP ranks splitting them and one process accumulating them).

The constants both runs set are in preconditions.py. The judge's side (here) is standard library only; the
reference is trained by the runner (`runner.train_reference`), with its own phase machinery.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from nemo_recipes.smoke_training.judge import Check, step_ranges

#: BF16's unit roundoff (8 significant bits): the recipes train in BF16 mixed precision.
BF16_UNIT_ROUNDOFF = 2.0**-8

#: How many standard deviations of the rounding noise the comparison allows.
SIGMAS = 3.0


def tolerance(loss: float, tokens: int) -> float:
    """The largest difference allowed between the two curves at a step whose loss is `loss`, the mean over `tokens`
    tokens (global batch x sequence).

    Derived from the reduction order: a layout changes the order of the sums whose results are rounded to BF16
    (tensor parallelism splits each row-parallel matmul into partial sums all-reduced in BF16; data parallelism and
    accumulation add the micro-batches' gradients in another order; pipelining changes no arithmetic). A value
    rounded after a differently ordered sum differs by at most ~u relative, so each token's loss can move by about
    u x loss, with a sign independent from token to token; the step's loss is their mean, whose difference then has a
    standard deviation of about u x loss / sqrt(tokens). Through training these differences compound only through
    the weights' own BF16 rounding (Adam's steps are lr-sized whatever the gradient's rounding). Allowed:
    SIGMAS standard deviations. At the smoke shape (loss ~6.9, 256-512 tokens) that is 3.5e-3 to 5e-3 nats; measured
    over 20 steps: TP2 with sequence parallelism within 7e-4, PP2 6e-4, DP2 with the distributed optimizer 5e-4,
    while a DP2 run whose gradient all-reduce is off departs by 4e-3 at step 3, 9e-3 at step 4 and 0.04 by step 20."""
    return SIGMAS * BF16_UNIT_ROUNDOFF * abs(loss) / math.sqrt(max(1, tokens))


def reference_plan(plan: Any) -> Any:
    """The one-process plan with the parallel plan's shape, global batch, schedule and data."""
    from nemo_recipes.smoke_training.shape import SmokeShape

    spec = plan.spec.replace(
        tensor_parallel=1,
        pipeline_parallel=1,
        context_parallel=1,
        virtual_pipeline=None,
        num_nodes=1,
        num_gpus_per_node=1,
    )
    return SmokeShape(spec=spec, processes=1, steps=plan.steps, stop_step=plan.stop_step, full_size=plan.full_size)


def invariance_check(losses: list[tuple[int, float]], reference: list[tuple[int, float]], tokens: int) -> Check:
    """The parallel run's loss at every step within `tolerance` of the one-process reference's (`tokens` per step)."""
    mine, theirs = dict(losses), dict(reference)
    if not losses or sorted(mine) != sorted(theirs):
        return Check(
            "layout invariant",
            False,
            f"steps {step_ranges(sorted(mine))} do not match the one-process curve's {step_ranges(sorted(theirs))}",
        )
    allowed = {step: tolerance(theirs[step], tokens) for step in theirs}
    gaps = {step: abs(mine[step] - theirs[step]) for step in sorted(mine)}
    bad = [step for step, gap in gaps.items() if not (math.isfinite(gap) and gap <= allowed[step])]
    worst = max(gaps, key=lambda step: gaps[step] / allowed[step])
    detail = (
        f"largest difference from the one-process curve {gaps[worst]:.1e} at step {worst} (allowed "
        f"{allowed[worst]:.1e}: {SIGMAS:g} x BF16 roundoff x loss / sqrt({tokens} tokens))"
    )
    if bad:
        step = bad[0]
        detail = (
            f"loss {mine[step]:.4f} at step {step}, the one-process curve {theirs[step]:.4f}: difference "
            f"{gaps[step]:.1e}, allowed {allowed[step]:.1e}; {len(bad)} of {len(gaps)} steps off, the largest "
            f"{max(gaps.values()):.1e}"
        )
    return Check("layout invariant", not bad, detail)


def replicas_check(
    records: list[dict[str, Any]],
    *,
    name: str = "data-parallel replicas identical",
    coordinates: tuple[str, ...] = ("tp", "pp", "cp"),
    field: str = "digest",
    replicas: str = "DP",
) -> Optional[Check]:
    """Ranks at the same tensor/pipeline/context coordinates hold bit-identical weights at the end of training
    (None when the record has no data-parallel replicas). With expert parallelism the routed experts are judged apart
    (`field="expert_digest"`): the same experts are held by the ranks of one expert-parallel and expert-TP rank, the
    expert-data-parallel replicas, and differ across expert-parallel ranks by design."""
    ends = [r for r in records if r.get("event") == "replicas"]
    if not ends:
        return None
    ranks = [rank for rank in ends[-1].get("ranks") or [] if field in rank]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rank in ranks:
        groups.setdefault(tuple(rank.get(c) for c in coordinates), []).append(rank)
    replicated = {key: members for key, members in groups.items() if len(members) > 1}
    if not replicated:
        return None
    split = {
        key: sorted({m[field] for m in members})
        for key, members in replicated.items()
        if len({m[field] for m in members}) > 1
    }
    where = "/".join(c.upper() for c in coordinates)
    if split:
        key, digests = next(iter(split.items()))
        detail = (
            f"at step {ends[-1].get('step')}, {where} rank {key}: the {replicas} replicas hold different weights "
            f"(digests {', '.join(digests)}); {len(split)} of {len(replicated)} group(s) differ"
        )
    else:
        detail = (
            f"at step {ends[-1].get('step')}, {len(replicated)} group(s) of "
            f"{len(next(iter(replicated.values())))} {replicas} replicas, each bit-identical"
        )
    return Check(name, not split, detail)
