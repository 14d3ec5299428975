"""The judge's checks of the loss and the gradient against their plain-PyTorch reference (reference.py records it),
one line each. Standard library only."""

from __future__ import annotations

from typing import Any

from nemo_recipes.smoke_training.judge import Check

LOSS_REFERENCE_CHECK = "loss as recomputed from Megatron's logits"
GRADIENT_REFERENCE_CHECK = "gradient as recomputed from Megatron's logits"
#: The reported loss and the reference sum the same fp32 per-token losses in another order: a few ulps apart.
LOSS_TOLERANCE = 1e-4
#: The reference multiplies in fp32 (float64 sums); Megatron's weight gradient comes from bf16 logits' gradients
#: and a bf16 matrix product (2^-8 relative per element), summed in fp32; the norm of the difference stays within a
#: few per cent, a gradient scaled by 2 is 100 % off.
GRADIENT_TOLERANCE = 0.05


def _references(records: list[dict[str, Any]], phases: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == "reference" and r.get("phase") in phases]


def _measured(records: list[dict[str, Any]], phases: tuple[str, ...]) -> list[tuple[dict[str, Any], int, Any]]:
    return [
        (r, rank, mine)
        for r in _references(records, phases)
        for rank, mine in enumerate(r.get("ranks") or [])
        if mine.get("measured")
    ]


def _where(measured: list[tuple[dict[str, Any], int, Any]]) -> str:
    ranks: dict[str, list[int]] = {}
    for r, rank, _ in measured:
        ranks.setdefault(f"{r['phase']} step {r['step']}", []).append(rank)
    return "; ".join(f"{at} on ranks {', '.join(map(str, sorted(set(rs))))}" for at, rs in ranks.items())


def loss_reference_check(records: list[dict[str, Any]], phases: tuple[str, ...]) -> Check:
    """The loss NeMo reported for the first step of each phase equals the cross-entropy recomputed from the logits."""
    measured = _measured(records, phases)
    if not measured:
        return Check(LOSS_REFERENCE_CHECK, False, "no reference loss recorded (no rank held the output layer)")
    reported = {
        (r.get("phase"), r.get("step")): r.get("loss")
        for r in records
        if r.get("event") == "step" and r.get("phase") in phases
    }
    wrong, compared = [], []
    for r, rank, mine in measured:
        loss = reported.get((r["phase"], r["step"]))
        if loss is None:
            wrong.append(f"{r['phase']} step {r['step']}: no reported loss to compare")
            continue
        compared.append(f"{r['phase']} step {r['step']} {loss:.5f}")
        if abs(loss - mine["loss"]) > LOSS_TOLERANCE * abs(mine["loss"]):
            wrong.append(
                f"{r['phase']} step {r['step']} rank {rank}: reported loss {loss:.5f}, cross-entropy of the logits "
                f"{mine['loss']:.5f} over {mine['tokens']} tokens (ratio {loss / mine['loss']:.4g})"
            )
    return Check(
        LOSS_REFERENCE_CHECK,
        not wrong,
        "; ".join(wrong[:3])
        or f"reported {', '.join(sorted(set(compared)))}: the mean cross-entropy of the logits and labels of every "
        f"micro-batch and replica within {LOSS_TOLERANCE:g} (relative); {_where(measured)} (the output layer's ranks)",
    )


def gradient_reference_check(records: list[dict[str, Any]], phases: tuple[str, ...]) -> Check:
    """The output layer's gradient Megatron reduced equals d(mean cross-entropy)/d(weight) from the logits."""
    measured = [(r, rank, mine) for r, rank, mine in _measured(records, phases) if mine.get("gradient")]
    if not measured:
        return Check(GRADIENT_REFERENCE_CHECK, False, "no reference gradient recorded")
    wrong, elements, rows = [], 0, set()
    for r, rank, mine in measured:
        g = mine["gradient"]
        elements += g["elements"]
        rows.add(g["rows"])
        if g["elements"] and g["difference"] > GRADIENT_TOLERANCE * g["reference"]:
            wrong.append(
                f"{r['phase']} step {r['step']} rank {rank}: output layer gradient norm {g['norm']:.4g}, reference "
                f"{g['reference']:.4g} (difference {g['difference'] / g['reference']:.1%}, ratio "
                f"{g['norm'] / g['reference']:.3g})"
            )
    tied = any(mine["gradient"].get("tied") for _, _, mine in measured)
    if not wrong and not elements:
        wrong.append("every vocabulary row was fed as input: no row holds the output layer's gradient alone")
    return Check(
        GRADIENT_REFERENCE_CHECK,
        not wrong,
        "; ".join(wrong[:3])
        or f"the output layer's gradient as Megatron reduced it equals (softmax - one-hot) x hidden / tokens within "
        f"{GRADIENT_TOLERANCE:.0%} (norm of the difference) on {elements} elements of "
        + ("the rows no rank fed as input (embeddings tied: " if tied else "every row (")
        + f"{', '.join(map(str, sorted(rows)))} rows per rank); {_where(measured)}",
    )
