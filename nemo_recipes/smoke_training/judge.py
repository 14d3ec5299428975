"""The verdict on a smoke run, from its record alone (standard library only).

A run passes when NeMo trained every step of both phases, the second phase resumed exactly where the first stopped
(global step and data position), the steps and consumed samples continue without a gap or a repeat, every loss is
finite and the loss fell, and the last checkpoint holds the optimizer state that a further resume needs.

A phase may run more than once: a Slurm job that is preempted or loses its node is requeued and starts again
(SLURM_RESTART_COUNT, recorded as `attempt`), resuming from the last checkpoint the killed run saved. The steps that
run trained after that checkpoint died with it; the history that counts is each run's steps up to where its
successor resumed (`committed`), and every step must appear in it exactly once.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

#: The loss must fall by at least this much (nats) between the first and the last steps' means: well above the
#: step-to-step noise of the scaled-down batch, well below what the learnable corpus gives in 20 steps.
MIN_LOSS_DROP = 0.05


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)
    resumed_at: Optional[int] = None
    resumed_from: Optional[str] = None
    seconds_per_step: Optional[float] = None
    checkpoint: Optional[dict[str, Any]] = None
    device: Optional[str] = None
    patches: list[str] = field(default_factory=list)
    parallel: Optional[dict[str, Any]] = None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)


@dataclass
class Attempt:
    """One run of a phase: from its start event to the next start (or the end of the record)."""

    phase: Optional[str]
    attempt: int
    started_at: int  # the global step it started from (0, or the resumed checkpoint's)
    resumed_from: Optional[str]
    consumed_at_start: Optional[int]
    steps: list[int] = field(default_factory=list)  # every step it trained
    lost: list[int] = field(default_factory=list)  # those its successor trained again (past the checkpoint)

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "resumed_from": self.resumed_from,
            "steps": _ranges(self.steps),
            "lost": _ranges(self.lost),
        }


def committed(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Attempt]]:
    """The step records that count, in order, and the runs that made them. A run that starts at global step G
    holds exactly the checkpoint's state: whatever earlier runs recorded past G is not in it, so it is dropped
    (and listed as `lost` on the run that trained it)."""
    history: list[dict[str, Any]] = []
    attempts: list[Attempt] = []
    owner: dict[int, Attempt] = {}  # id(step record) -> the run that trained it
    for record in records:
        if record.get("event") == "start":
            at = record.get("global_step") or 0
            for dropped in (r for r in history if r["step"] > at):
                owner[id(dropped)].lost.append(dropped["step"])
            history = [r for r in history if r["step"] <= at]
            attempts.append(
                Attempt(
                    record.get("phase"),
                    int(record.get("attempt") or 0),
                    at,
                    record.get("resumed_from"),
                    record.get("consumed_samples"),
                )
            )
        elif record.get("event") == "step" and attempts:
            history.append(record)
            attempts[-1].steps.append(record["step"])
            owner[id(record)] = attempts[-1]
    return history, attempts


def checkpoint_step(path: Optional[str]) -> Optional[int]:
    """The global step a checkpoint holds. NeMo names it by the 0-based index of its last step ("...-step=9-..."
    after 10 steps), so the count of steps it holds is that number + 1."""
    for part in (path or "").replace("/", "-").split("-"):
        if part.startswith("step=") and part[5:].isdigit():
            return int(part[5:]) + 1
    return None


def _phase(records: list[dict[str, Any]], phase: str, event: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("phase") == phase and r.get("event") == event]


def judge(
    records: list[dict[str, Any]],
    *,
    steps: int,
    stop_step: int,
    global_batch_size: int,
    layout: Optional[dict[str, Any]] = None,
    phases: tuple[str, str] = ("train", "resume"),
    checkpoint_every: Optional[int] = None,
) -> Verdict:
    """`layout`: the parallel sizes the plan asked for ({"tp", "pp", "cp", "dp", "sequence_parallel"}), compared
    with the groups Megatron built in each phase. `checkpoint_every`: the recipe's step interval, against which a
    requeued run's resume point is judged (the last checkpoint its killed predecessor completed)."""
    first, second = phases
    verdict = Verdict()
    launches = [r for r in records if r.get("event") == "launch"]
    if launches:
        verdict.device, verdict.patches = launches[-1].get("device"), launches[-1].get("patches", [])
    history, attempts = committed([r for r in records if r.get("phase") in phases])
    verdict.attempts = attempts
    step_records = history
    verdict.losses = [(r["step"], r["loss"]) for r in step_records]
    timed = [r["seconds"] for r in step_records[1:] if r.get("seconds") is not None]
    verdict.seconds_per_step = statistics.median(timed) if timed else None

    if layout is not None:
        built = [r.get("parallel") for r in records if r.get("event") == "start"]
        verdict.parallel = built[-1] if built else None
        as_planned = bool(built) and all(b == layout for b in built)
        verdict.checks.append(
            Check(
                "layout as planned",
                as_planned,
                f"Megatron built {verdict.parallel}" + ("" if as_planned else f"; the plan asked for {layout}"),
            )
        )

    seen = [r["step"] for r in step_records]
    expected = list(range(1, steps + 1))
    lost = [step for a in attempts for step in a.lost]
    verdict.checks.append(
        Check(
            "every step trained once",
            seen == expected,
            (
                f"steps {_ranges(seen)} (expected 1-{steps})"
                if seen != expected
                else f"steps 1-{stop_step} then {stop_step + 1}-{steps}"
            )
            + (f"; steps {_ranges(lost)} of a killed run trained again" if lost else ""),
        )
    )

    requeued = [
        (before, after) for before, after in zip(attempts, attempts[1:], strict=False) if after.phase == before.phase
    ]
    if requeued:
        verdict.checks.append(_requeue_check(requeued, global_batch_size, checkpoint_every))

    starts = _phase(records, second, "start")
    start = starts[-1] if starts else {}
    verdict.resumed_at, verdict.resumed_from = start.get("global_step"), start.get("resumed_from")
    resumed_ok = (
        verdict.resumed_at == stop_step
        and verdict.resumed_from is not None
        and start.get("consumed_samples") == stop_step * global_batch_size
    )
    verdict.checks.append(
        Check(
            "resumed where it stopped",
            resumed_ok,
            f"global step {verdict.resumed_at} (expected {stop_step}), consumed samples "
            f"{start.get('consumed_samples')} (expected {stop_step * global_batch_size}), from "
            f"{verdict.resumed_from or 'no checkpoint'}",
        )
    )

    wrong = [
        (r["step"], r["consumed_samples"])
        for r in step_records
        if r.get("consumed_samples") is not None and r["consumed_samples"] != r["step"] * global_batch_size
    ]
    verdict.checks.append(
        Check(
            "data position continuous",
            not wrong,
            "consumed samples = step x global batch at every step"
            if not wrong
            else f"consumed samples off at (step, samples) {wrong[:3]}",
        )
    )

    losses = [loss for _, loss in verdict.losses]
    finite = bool(losses) and all(isinstance(x, (int, float)) and math.isfinite(x) for x in losses)
    verdict.checks.append(
        Check(
            "loss finite",
            finite,
            "every step"
            if finite
            else f"non-finite or missing losses at steps "
            f"{[s for s, x in verdict.losses if not (isinstance(x, float) and math.isfinite(x))]}",
        )
    )
    if finite and len(losses) >= 4:
        k = max(2, min(5, len(losses) // 4))
        head, tail = statistics.fmean(losses[:k]), statistics.fmean(losses[-k:])
        verdict.checks.append(
            Check(
                "loss falling",
                head - tail >= MIN_LOSS_DROP,
                f"mean of first {k} steps {head:.3f} -> last {k} {tail:.3f} (drop {head - tail:.3f}, "
                f"at least {MIN_LOSS_DROP} needed)",
            )
        )

    saved = [c for r in _phase(records, second, "checkpoints") for c in r.get("checkpoints", [])]
    last = max(saved, key=lambda c: c.get("step") or -1) if saved else None
    verdict.checkpoint = last
    loadable = last is not None and "error" not in last and last.get("optimizer") is True and last.get("tensors", 0) > 0
    verdict.checks.append(
        Check(
            "last checkpoint resumable",
            loadable,
            "no checkpoint found"
            if not last
            else last.get("error")
            or f"{last.get('tensors')} tensors, optimizer state {'included' if last.get('optimizer') else 'MISSING'}",
        )
    )
    if last:
        held = (last.get("step") or -1) + 1
        verdict.checks.append(
            Check("final checkpoint at the last step", held == steps, f"it holds {held} step(s) of {steps}")
        )
    return verdict


def _requeue_check(
    requeued: list[tuple[Attempt, Attempt]], global_batch_size: int, checkpoint_every: Optional[int]
) -> Check:
    """Each requeued run resumed from the last checkpoint its killed predecessor completed: at that checkpoint's
    step, with its data position, and neither past the last step the killed run trained nor more than one
    interval behind it (a save cut short by the kill leaves the one before as the last complete checkpoint)."""
    wrong, told = [], []
    for before, after in requeued:
        last = max(before.steps, default=before.started_at)
        held = checkpoint_step(after.resumed_from)
        told.append(
            f"{before.phase} run {before.attempt} trained to step {last}, run {after.attempt} resumed at "
            f"{after.started_at} from {after.resumed_from or 'no checkpoint'}"
        )
        if held is None or held != after.started_at:
            wrong.append(f"run {after.attempt} started at {after.started_at} but its checkpoint holds {held}")
        if after.consumed_at_start != after.started_at * global_batch_size:
            wrong.append(
                f"run {after.attempt} started at consumed samples {after.consumed_at_start}, expected "
                f"{after.started_at * global_batch_size}"
            )
        if after.started_at > last or (
            checkpoint_every and (after.started_at % checkpoint_every or last - after.started_at > checkpoint_every)
        ):
            wrong.append(
                f"run {after.attempt} resumed at {after.started_at}, not at the last checkpoint before "
                f"step {last} (every {checkpoint_every or '?'} steps)"
            )
    return Check("requeued runs resumed from the last checkpoint", not wrong, "; ".join(wrong or told))


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    parts, start, previous = [], steps[0], steps[0]
    for step in steps[1:] + [None]:
        if step is not None and step == previous + 1:
            previous = step
            continue
        parts.append(f"{start}-{previous}" if start != previous else str(start))
        if step is not None:
            start = previous = step
    return ", ".join(parts)
