"""The verdict on a smoke run, from its record alone (standard library only).

A run passes when NeMo trained every step of both phases, the second phase resumed exactly where the first stopped
(global step and data position) with exactly the state the checkpoint was saved from (per-rank digests of weights,
main weights, Adam moments and step, schedule), the steps and consumed samples continue without a gap or a repeat,
the learning rate follows the recipe's schedule across the resume, every loss is finite and the model learned (below
the data's unigram entropy, or a fall no frozen model gives but once in a thousand runs), and the last checkpoint
holds the optimizer state that a further resume needs.

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

from nemo_recipes.smoke_training.checksums import COMPONENTS

#: Standard deviation (nats) of one step's loss when the model does not learn: a real gpt_1_3b smoke run with
#: max_lr 1e-12 (the scaled-down shape, global batch 4 x 64 tokens of the learnable corpus) gave 0.041 over 200
#: steps (mean 7.211; lag-1 autocorrelation -0.08, and the SD of 5-step means 0.017 against 0.041/sqrt(5) = 0.018:
#: steps draw fresh batches and their noise is independent). Rounded up to 0.045 (the estimate's standard error is
#: ~5 %). Larger batches (more data-parallel replicas or pipeline stages, a full-size run) are less noisy: the
#: thresholds are then conservative.
FROZEN_LOSS_SD = 0.045
#: Fewest steps "model learned" can judge: it compares the mean of the first steps with that of the last (at least
#: two each, not overlapping). A run with fewer is refused before it starts (shape.py), so the check is never left out.
MIN_STEPS = 4
#: One-sided normal quantile of a 0.1 % false-pass rate: P(Z > 3.09) = 0.1 %.
Z_FALSE_PASS = 3.09


def learning_thresholds(n: int, sd: float = FROZEN_LOSS_SD) -> tuple[float, float]:
    """(margin below the unigram entropy, least fall) for means over `n` steps, each passed by a model that does
    not learn with probability below 0.1 %:
    - a model that learned the token frequencies and nothing else has an expected loss equal to the unigram
      entropy; the mean of its last n steps has SD sd/sqrt(n), so it ends more than 3.09 sd/sqrt(n) below it with
      probability 0.1 %;
    - a frozen model's first-n and last-n means differ by a normal variable of SD sd*sqrt(2/n) (two independent
      means), which exceeds 3.09 sd*sqrt(2/n) with probability 0.1 %."""
    return Z_FALSE_PASS * sd / math.sqrt(n), Z_FALSE_PASS * sd * math.sqrt(2 / n)


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
    learning: Optional[dict[str, Any]] = None  # the learning check's numbers and the criterion that decided

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
            "steps": step_ranges(self.steps),
            "lost": step_ranges(self.lost),
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
    schedule: Optional[dict[str, Any]] = None,
    unigram_entropy: Optional[float] = None,
) -> Verdict:
    """`layout`: the parallel sizes the plan asked for ({"tp", "pp", "cp", "dp", "sequence_parallel"}), compared
    with the groups Megatron built in each phase. `checkpoint_every`: the recipe's step interval, against which a
    requeued run's resume point is judged (the last checkpoint its killed predecessor completed). `schedule`: the
    learning-rate schedule the recipe asked for (`expected_lr`'s arguments), against which every step's learning
    rate is judged. `unigram_entropy`: of the training data's tokens (nats), the baseline of the learning check."""
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
                f"steps {step_ranges(seen)} (expected 1-{steps})"
                if seen != expected
                else f"steps 1-{stop_step} then {stop_step + 1}-{steps}"
            )
            + (f"; steps {step_ranges(lost)} of a killed run trained again" if lost else ""),
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
    if finite and len(losses) >= MIN_STEPS:
        check, verdict.learning = _learning_check(losses, unigram_entropy)
        verdict.checks.append(check)
    elif finite:  # a run cut short (its phases' failures are reported too): the check is shown, not left out
        verdict.checks.append(
            Check("model learned", False, f"{len(losses)} step(s) trained; judging needs {MIN_STEPS} at least")
        )
    if schedule is not None:
        verdict.checks.append(_schedule_check(step_records, schedule, stop_step))
    verdict.checks.append(_state_check(records, phases))

    saved = [c for r in _phase(records, second, "checkpoints") for c in r.get("checkpoints", [])]
    last = max(saved, key=lambda c: c.get("step") or -1) if saved else None
    verdict.checkpoint = last
    loadable = (
        last is not None
        and "error" not in last
        and last.get("optimizer") is True
        and last.get("tensors", 0) > 0
        and bool(last.get("read"))
    )
    verdict.checks.append(
        Check(
            "last checkpoint resumable",
            loadable,
            "no checkpoint found"
            if not last
            else last.get("error")
            or f"{last.get('tensors')} tensors, optimizer state {'included' if last.get('optimizer') else 'MISSING'}"
            + (
                f"; every item read and loaded on the CPU ({read['items']} items, {read['bytes']:,} bytes in "
                f"{read['files']} files)"
                if (read := last.get("read"))
                else "; its files were not read"
            ),
        )
    )
    if last:
        held = (last.get("step") or -1) + 1
        verdict.checks.append(
            Check("final checkpoint at the last step", held == steps, f"it holds {held} step(s) of {steps}")
        )
    return verdict


def _learning_check(losses: list[float], entropy: Optional[float]) -> tuple[Check, dict[str, Any]]:
    """The model learned: its final loss (mean of the last n steps) is below the data's unigram entropy by a
    margin, or else the loss fell by more than a frozen model's noise explains; each passed by a model that does not
    learn with probability below 0.1 % (`learning_thresholds`). A scaled-down model at the recipe's learning rate
    does not reach the unigram entropy in a smoke run's tens of steps; the fall then decides."""
    n = max(2, min(5, len(losses) // 4))
    head, tail = statistics.fmean(losses[:n]), statistics.fmean(losses[-n:])
    margin, least_fall = learning_thresholds(n)
    below = entropy is not None and tail < entropy - margin
    fell = head - tail > least_fall
    baseline = (
        f"final loss {tail:.3f} (mean of the last {n} steps) vs the data's unigram entropy {entropy:.3f}: "
        f"{abs(entropy - tail):.3f} {'below' if tail < entropy else 'above'} it ({margin:.3f} below needed)"
        if entropy is not None
        else f"final loss {tail:.3f} (mean of the last {n} steps), no unigram entropy of the data"
    )
    fall = (
        f"fall {head - tail:.3f} from the first {n} steps' mean {head:.3f} ({least_fall:.3f} needed: "
        f"{Z_FALSE_PASS} SD of a frozen model's noise)"
    )
    criterion = "unigram entropy" if below else "fall" if fell else None
    decided = f"decided by the {criterion}" if criterion else "neither is met"
    numbers = {
        "steps_averaged": n,
        "final_loss": tail,
        "unigram_entropy": entropy,
        "margin_below_entropy": margin,
        "fall": head - tail,
        "least_fall": least_fall,
        "frozen_loss_sd": FROZEN_LOSS_SD,
        "decided_by": criterion,
    }
    return Check("model learned", below or fell, f"{baseline}; {fall}; {decided}"), numbers


def expected_lr(
    step: int, *, max_lr: float, min_lr: float, warmup_steps: int, constant_steps: int, max_steps: int
) -> float:
    """The learning rate after `step` optimizer steps under NeMo's CosineAnnealing (nemo.core.optim.lr_scheduler,
    as CosineAnnealingScheduler builds it): with a constant tail, Megatron's linear warmup from 0, cosine decay to
    min_lr over max_steps - warmup - constant steps, then min_lr; without one, warmup (step+1)/(warmup+1) and a
    cosine over the steps after warmup."""
    decay_steps = max_steps - constant_steps - warmup_steps
    if constant_steps > 0:
        if warmup_steps > 0 and step <= warmup_steps:
            return max_lr * step / warmup_steps
        if step > warmup_steps + decay_steps:
            return min_lr
        ratio = (step - warmup_steps) / decay_steps
        return min_lr + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (max_lr - min_lr)
    if warmup_steps > 0 and step <= warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step > max_steps:
        return min_lr
    mult = 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / (max_steps - warmup_steps)))
    return (max_lr - min_lr) * mult + min_lr


#: Relative tolerance of a step's learning rate: both sides compute the same float64 formula, so only the last
#: bits of the arithmetic (and the record's decimal round trip) may differ.
LR_TOLERANCE = 1e-9


def _schedule_check(step_records: list[dict[str, Any]], schedule: dict[str, Any], stop_step: int) -> Check:
    """Every step's learning rate (as the optimizer held it after the step) is the schedule's, on both sides of the
    resume: a restored step count with a restarted or shifted scheduler shows here."""
    off = []
    for r in step_records:
        want, got = expected_lr(r["step"], **schedule), r.get("lr")
        if not isinstance(got, (int, float)) or abs(got - want) > LR_TOLERANCE * max(abs(want), 1e-300):
            off.append(f"step {r['step']}: {got} (expected {want:.6g})")
    return Check(
        "learning rate follows the schedule across the resume",
        bool(step_records) and not off,
        (
            f"{len(step_records)} steps within {LR_TOLERANCE:g} (relative) of warmup {schedule['warmup_steps']}, "
            f"cosine to {schedule['min_lr']:.3g} by step {schedule['max_steps'] - schedule['constant_steps']}, "
            f"constant to {schedule['max_steps']}; resumed after step {stop_step}"
        )
        if step_records and not off
        else "; ".join(off[:4]) + (f" (and {len(off) - 4} more)" if len(off) > 4 else "") or "no steps",
    )


def _state_check(records: list[dict[str, Any]], phases: tuple[str, str]) -> Check:
    """Each run that resumed from a checkpoint (the second phase, and any requeued run) loaded exactly the state
    the checkpoint was saved from: per rank and per component, the digest recorded right after the load equals the
    one recorded when the checkpoint at that step was saved (the last such save before the load)."""
    states = [r for r in records if r.get("event") == "state" and r.get("phase") in phases]
    loads = [i for i, r in enumerate(states) if r.get("when") == "loaded" and (r.get("step") or 0) > 0]
    if not loads:
        return Check("resume restored the exact state", False, "no state digests recorded after a resume's load")
    told, wrong = [], []
    for i in loads:
        loaded = states[i]
        saved = [r for r in states[:i] if r.get("when") == "saved" and r.get("step") == loaded["step"]]
        if not saved:
            wrong.append(f"no digest recorded when the checkpoint at step {loaded['step']} was saved")
            continue
        before, after = saved[-1]["ranks"], loaded["ranks"]
        if len(before) != len(after):
            wrong.append(f"step {loaded['step']}: saved by {len(before)} ranks, loaded by {len(after)}")
            continue
        differ = {
            name: [rank for rank, (b, a) in enumerate(zip(before, after, strict=True)) if b.get(name) != a.get(name)]
            for name in COMPONENTS
        }
        bad = [f"{name} (rank {', '.join(map(str, ranks))})" for name, ranks in differ.items() if ranks]
        if bad:
            wrong.append(f"after the load at step {loaded['step']}, differs from the save: {'; '.join(bad)}")
        else:
            told.append(f"step {loaded['step']} ({loaded.get('phase')})")
    return Check(
        "resume restored the exact state",
        not wrong,
        "; ".join(wrong)
        or "weights, main weights, Adam moments, Adam step and schedule of every rank bit-equal to the save at "
        + ", ".join(told),
    )


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


def step_ranges(steps: list[int]) -> str:
    """Sorted steps as ranges, for a message: [1, 2, 3, 5] is "1-3, 5"; none is "none"."""
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
