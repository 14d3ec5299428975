"""Layout invariance: a parallel layout computes the one-process model, so its loss curve equals the one-process
curve of the same recipe, seed and data; and data-parallel replicas end with identical weights.

Preconditions, which the comparison run sets in both runs: dropout off (NeMo's dropout streams differ per layout:
Megatron forks them per tensor-parallel rank and seeds them per pipeline stage), the same initial weights (the
layout-invariant start of replicas.py; Megatron's own initialisation depends on the pipeline split), the same
global batch and data (the reference takes the parallel run's shape and global batch; Megatron's sampler gives
every layout the same samples per step, DP ranks splitting them and one process accumulating them).

The judge's side is standard library only; the reference is trained by the runner's own phase machinery.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from nemo_recipes.smoke_training.judge import Check

#: Seed of the layout-invariant start (replicas.py).
INIT_SEED = 1234

#: What the comparison changes in both runs (module docstring).
NO_DROPOUT = {"hidden_dropout": 0.0, "attention_dropout": 0.0}

#: Tolerance of the loss comparison (nats), from the reduction order. The recipes train in BF16 (8 significant
#: bits, unit roundoff u = 2^-8 ~ 3.9e-3). A layout changes the order of the sums whose results are rounded to BF16:
#: tensor parallelism splits every row-parallel matmul into partial sums all-reduced in BF16, data parallelism and
#: accumulation add the micro-batches' gradients in another order, pipelining does not change the arithmetic. Each
#: such sum can differ by ~u relative per element; the loss is a mean over B x S = 8-16 x 64 tokens, so per-element
#: rounding differences largely average out, and the first step (identical weights, forward only) measured 1e-4 to
#: 2e-3 nats of difference. Adam then turns the gradients' rounding differences into weight differences of up to
#: ~u x lr per step, which compound: measured differences grow to ~0.01-0.02 nats by step 20 (README, issue 20 report).
#: The tolerance is 0.05 + 0.005 per step... see TOLERANCE_* below; a broken gradient all-reduce departs by more
#: than ten times the measured noise within a few steps.
TOLERANCE_FIRST = 0.01
TOLERANCE_PER_STEP = 0.002


def tolerance(step: int) -> float:
    """The largest difference allowed at `step` (1-based): the first step's rounding, plus the compounding."""
    return TOLERANCE_FIRST + TOLERANCE_PER_STEP * (step - 1)


def reference_plan(plan: Any) -> Any:
    """The one-process plan with the parallel plan's shape, global batch, schedule and data."""
    from nemo_recipes.smoke_training.shape import SmokePlan

    spec = plan.spec.replace(
        tensor_parallel=1,
        pipeline_parallel=1,
        context_parallel=1,
        virtual_pipeline=None,
        num_nodes=1,
        num_gpus_per_node=1,
    )
    return SmokePlan(spec=spec, processes=1, steps=plan.steps, stop_step=plan.stop_step, full_size=plan.full_size)


def train_reference(plan: Any, root: str) -> list[tuple[int, float]]:
    """Train the one-process reference of `plan` straight through (no stop) on this machine; its (step, loss)."""
    from nemo_recipes.smoke_training.launchers import local_processes
    from nemo_recipes.smoke_training.runner import run_phase, workspace

    space = workspace(reference_plan(plan), root, name="reference")
    space.invariant_init = True
    code, _, log = run_phase(space, "reference", None, local_processes)
    if code != 0:
        from nemo_recipes.smoke_training.launchers import SmokeError

        raise SmokeError(f"the one-process reference failed (status {code}); log: {log}")
    return [(r["step"], r["loss"]) for r in space.records() if r.get("event") == "step"]


def invariance_check(losses: list[tuple[int, float]], reference: list[tuple[int, float]]) -> Check:
    """The parallel run's loss at every step within `tolerance(step)` of the one-process reference's."""
    mine, theirs = dict(losses), dict(reference)
    if not losses or sorted(mine) != sorted(theirs):
        return Check(
            "layout invariant",
            False,
            f"steps {sorted(mine)[:3]}... do not match the reference's {sorted(theirs)[:3]}...",
        )
    gaps = [(step, abs(mine[step] - theirs[step])) for step in sorted(mine)]
    bad = [(s, g) for s, g in gaps if not (math.isfinite(g) and g <= tolerance(s))]
    worst_step, worst = max(gaps, key=lambda item: item[1] / tolerance(item[0]))
    detail = (
        f"largest difference from the one-process curve {worst:.2e} at step {worst_step} (allowed "
        f"{tolerance(worst_step):.3f} there: {TOLERANCE_FIRST} + {TOLERANCE_PER_STEP} per step)"
    )
    if bad:
        step, gap = bad[0]
        detail = (
            f"loss {mine[step]:.4f} at step {step}, the one-process curve {theirs[step]:.4f} (difference {gap:.3f}, "
            f"allowed {tolerance(step):.3f}); {len(bad)} step(s) off"
        )
    return Check("layout invariant", not bad, detail)


def replicas_check(records: list[dict[str, Any]]) -> Optional[Check]:
    """Ranks at the same tensor/pipeline/context coordinates hold bit-identical weights at the end of training
    (None when the record has no data-parallel replicas)."""
    ends = [r for r in records if r.get("event") == "replicas"]
    if not ends:
        return None
    ranks = ends[-1].get("ranks") or []
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rank in ranks:
        groups.setdefault((rank.get("tp"), rank.get("pp"), rank.get("cp")), []).append(rank)
    replicated = {key: members for key, members in groups.items() if len(members) > 1}
    if not replicated:
        return None
    split = {
        key: sorted({m["digest"] for m in members})
        for key, members in replicated.items()
        if len({m["digest"] for m in members}) > 1
    }
    if split:
        key, digests = next(iter(split.items()))
        detail = (
            f"at step {ends[-1].get('step')}, TP/PP/CP rank {key}: the DP replicas hold different weights "
            f"(digests {', '.join(digests)}); {len(split)} of {len(replicated)} group(s) differ"
        )
    else:
        detail = (
            f"at step {ends[-1].get('step')}, {len(replicated)} group(s) of "
            f"{len(next(iter(replicated.values())))} DP replicas, each bit-identical"
        )
    return Check("data-parallel replicas identical", not split, detail)
