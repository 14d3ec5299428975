"""The judge's checks of every optimizer step (steps.py records them on every rank), one line each, from what any
correct run satisfies: the optimizer's own step counter equals the global step, every parameter group's learning rate
is the schedule's, and the first step of each process changed the sampled parameters by exactly the AdamW update of
that step's gradient and the moments it started from. Standard library only."""

from __future__ import annotations

import math
from typing import Any, Optional

from nemo_recipes.smoke_training.judge import LR_TOLERANCE, Check, expected_lr

STEP_COUNTER_CHECK = "optimizer step counter equals the global step"
GROUP_LR_CHECK = "every parameter group's learning rate follows the schedule"
ADAMW_CHECK = "the first step of each run is the AdamW update"

#: Relative tolerance of the recomputed update, moments and parameters: the optimizer computes in fp32 (its foreach
#: or fused kernels order the operations differently), the judge in float64 from the same fp32 inputs; fp32's
#: rounding is 6e-8 per operation, and a dozen operations stay far below 1e-4, while a wrong beta, eps, learning
#: rate, weight decay, moment or bias correction changes the update by percents.
UPDATE_TOLERANCE = 1e-4
#: Of a parameter: its fp32 rounding (half a unit in the last place, 2^-24 relative) where the update is below it.
FP32_ROUNDING = 2.0**-23


def _records(records: list[dict[str, Any]], event: str, phases: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == event and r.get("phase") in phases]


def _where(records: list[dict[str, Any]]) -> str:
    """'train steps 1-4 (2 ranks), resume steps 3-4 (2 ranks)': what a check compared, on which ranks."""
    from nemo_recipes.smoke_training.judge import step_ranges

    parts: dict[str, tuple[list[int], int]] = {}
    for r in records:
        steps, ranks = parts.get(r["phase"], ([], 0))
        parts[r["phase"]] = (sorted({*steps, r["step"]}), max(ranks, len(r.get("ranks") or [])))
    return ", ".join(f"{phase} steps {step_ranges(steps)} ({ranks} ranks)" for phase, (steps, ranks) in parts.items())


def _listed(wrong: list[str]) -> str:
    return "; ".join(wrong[:4]) + (f" (and {len(wrong) - 4} more)" if len(wrong) > 4 else "")


def step_checks(
    records: list[dict[str, Any]], phases: tuple[str, ...], schedule: dict[str, Any], adam: dict[str, float]
) -> list[Check]:
    """`schedule`: `judge.expected_lr`'s arguments; `adam`: the recipe's {"beta1", "beta2", "eps"}."""
    steps = _records(records, "steps", phases)
    return [_counter_check(steps), _group_lr_check(steps, schedule), _adamw_check(records, phases, adam)]


def _counter_check(steps: list[dict[str, Any]]) -> Check:
    wrong = [
        f"{r['phase']} rank {rank} at step {r['step']}: Adam's step {_span(mine.get('step'))}"
        for r in steps
        for rank, mine in enumerate(r.get("ranks") or [])
        if mine.get("step") != [r["step"], r["step"]]
    ]
    if not steps:
        return Check(STEP_COUNTER_CHECK, False, "no optimizer step counters recorded")
    return Check(
        STEP_COUNTER_CHECK,
        not wrong,
        _listed(wrong)
        if wrong
        else f"Adam's step of every parameter = the global step after each step: {_where(steps)}",
    )


def _span(counts: Optional[list[float]]) -> str:
    if not counts:
        return "none (the optimizer holds no state)"
    low, high = (int(c) if float(c).is_integer() else c for c in counts)
    return str(low) if low == high else f"{low} to {high} over the parameters"


def _group_lr_check(steps: list[dict[str, Any]], schedule: dict[str, Any]) -> Check:
    wrong, groups = [], 0
    for r in steps:
        want = expected_lr(r["step"], **schedule)
        for rank, mine in enumerate(r.get("ranks") or []):
            groups = max(groups, len(mine.get("lr") or {}))
            for group, got in (mine.get("lr") or {}).items():
                if abs(got - want) > LR_TOLERANCE * max(abs(want), 1e-300):
                    wrong.append(
                        f"{r['phase']} rank {rank} step {r['step']}: group {group} lr {got:.6g} (expected {want:.6g})"
                    )
    if not steps:
        return Check(GROUP_LR_CHECK, False, "no learning rates per parameter group recorded")
    return Check(
        GROUP_LR_CHECK,
        not wrong,
        _listed(wrong)
        if wrong
        else f"all {groups} groups within {LR_TOLERANCE:g} (relative) of the schedule after each step: {_where(steps)}",
    )


def adamw(
    before: dict[str, Any], g: float, i: int, lr: float, weight_decay: float, adam: dict[str, float]
) -> dict[str, float]:
    """Element `i` after one AdamW step (torch's AdamW, Apex's and Transformer Engine's FusedAdam in AdamW mode):
    moments from `before` (none: zero) and gradient `g`, bias corrections at the step after `before`'s."""
    b1, b2, eps = adam["beta1"], adam["beta2"], adam["eps"]
    step = (before.get("step") or 0) + 1
    m = b1 * (before["m"][i] if before.get("m") else 0.0) + (1 - b1) * g
    v = b2 * (before["v"][i] if before.get("v") else 0.0) + (1 - b2) * g * g
    p = before["p"][i] * (1 - lr * weight_decay)
    p -= lr / (1 - b1**step) * m / (math.sqrt(v) / math.sqrt(1 - b2**step) + eps)
    return {"p": p, "m": m, "v": v, "step": step}


def _off(got: float, want: float, scale: float) -> float:
    """|got - want| in units of the tolerance allowed at `scale` (<= 1: within it)."""
    allowed = UPDATE_TOLERANCE * abs(scale) + FP32_ROUNDING * abs(want) + 1e-30
    return abs(got - want) / allowed


def _adamw_check(records: list[dict[str, Any]], phases: tuple[str, ...], adam: dict[str, float]) -> Check:
    updates = _records(records, "update", phases)
    if not updates:
        return Check(ADAMW_CHECK, False, "no optimizer update recorded")
    wrong, compared, worst = [], 0, 0.0
    for r in updates:
        where = f"{r['phase']} step {r['step']}"
        stepped = 0
        for rank, mine in enumerate(r.get("ranks") or []):
            for sample in mine:
                before, after, grads = sample["before"], sample.get("after"), sample.get("g")
                if grads is None:  # no gradient (a frozen parameter: "every parameter trains" says so)
                    continue
                if after is None:
                    wrong.append(f"{where} rank {rank}: parameter {sample['key']} was given a gradient, not stepped")
                    continue
                stepped += 1
                for i, g in enumerate(grads):
                    want = adamw(before, g, i, sample["lr"], sample["weight_decay"], adam)
                    update = want["p"] - before["p"][i]
                    offs = {
                        "parameter": _off(after["p"][i], want["p"], update),
                        "first moment": _off(after["m"][i], want["m"], want["m"]),
                        "second moment": _off(after["v"][i], want["v"], want["v"]),
                    }
                    compared += 1
                    worst = max(worst, *offs.values())
                    name, off = max(offs.items(), key=lambda item: item[1])
                    if after.get("step") != want["step"]:
                        got = after.get("step")
                        wrong.append(f"{where} rank {rank}: {sample['key']} Adam step {got} (expected {want['step']})")
                    elif off > 1:
                        key = {"parameter": "p", "first moment": "m", "second moment": "v"}[name]
                        wrong.append(
                            f"{where} rank {rank}: {sample['key']}[{i}] {name} {after[key][i]:.6g}, AdamW gives "
                            f"{want[key]:.6g} (update {update:.3g}, lr {sample['lr']:.3g})"
                        )
                        break
        if not stepped:
            wrong.append(f"{where}: no sampled parameter was stepped")
    return Check(
        ADAMW_CHECK,
        not wrong,
        _listed(wrong)
        if wrong
        else f"{compared} sampled elements (parameters, both moments, step) of the first step equal AdamW's from "
        f"its gradient, the moments it started from and betas ({adam['beta1']}, {adam['beta2']}), eps {adam['eps']}, "
        f"within {UPDATE_TOLERANCE:g} of the update (the largest difference {worst:.2g} of that): {_where(updates)}",
    )
