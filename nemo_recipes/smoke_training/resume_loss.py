"""The loss across the resume: the resumed phase's losses against the first phase's own, trained on past the stop
without a break (straight_through.py). Same shape, data, seed and processes, so the only difference allowed is the
arithmetic's: on the CPU the two are bit-identical (measured), on GPUs the BF16 rounding of a differently ordered
reduction (invariance.tolerance). A state that a hook spoils after the resume's load (Adam moments zeroed at the
first resumed step, one tensor-parallel shard re-initialised) passes the state digests and shows here.
Standard library only."""

from __future__ import annotations

from typing import Any

from nemo_recipes.smoke_training.invariance import tolerance
from nemo_recipes.smoke_training.judge import Check

RESUME_LOSS_CHECK = "loss after the resume equals the uninterrupted run"


def resume_loss_check(
    records: list[dict[str, Any]], resumed: list[tuple[int, float]], stop_step: int, tokens: int, phase: str = "train"
) -> Check:
    """`resumed`: the run's (step, loss) as the judge committed them; its steps after `stop_step` are compared with
    the `phase`'s "reference step" records."""
    reference = {
        r["step"]: r.get("loss") for r in records if r.get("event") == "reference step" and r.get("phase") == phase
    }
    after = [(s, x) for s, x in resumed if s > stop_step]
    name = RESUME_LOSS_CHECK
    if not reference or not after:
        return Check(name, False, f"{len(after)} resumed step(s), {len(reference)} uninterrupted step(s) recorded")
    off, worst = [], 0.0
    for step, loss in after:
        want = reference.get(step)
        if not isinstance(want, (int, float)) or not isinstance(loss, (int, float)):
            off.append(f"step {step}: {loss} vs {want}")
            continue
        allowed = tolerance(want, tokens)
        worst = max(worst, abs(loss - want))
        if abs(loss - want) > allowed:
            off.append(f"step {step}: {loss:.4f} vs {want:.4f} (off {abs(loss - want):.2g}, allowed {allowed:.2g})")
    missing = sorted(set(reference) - {s for s, _ in after})
    if missing:
        off.append(f"steps {missing} trained only without the stop")
    return Check(
        name,
        not off,
        "; ".join(off[:4]) + (f" (and {len(off) - 4} more)" if len(off) > 4 else "")
        if off
        else f"{len(after)} resumed steps within BF16 rounding noise of the run trained on without stopping "
        f"(largest difference {worst:.2g} nats" + (", bit-identical)" if worst == 0 else ")"),
    )
