"""The judge's check of the forward pass (causality.py records it on every rank), one line. Standard library only."""

from __future__ import annotations

from typing import Any

from nemo_recipes.smoke_training.judge import Check

CAUSALITY_CHECK = "changing token t changes no output before t"
#: The largest change allowed before t, relative to the change at t and after: none at all in exact arithmetic (a
#: masked score's softmax weight underflows to 0), kept as a ratio for kernels that round differently per call.
CAUSAL_RATIO = 1e-6


def causality_check(records: list[dict[str, Any]], phases: tuple[str, ...]) -> Check:
    probes = [r for r in records if r.get("event") == "causality" and r.get("phase") in phases]
    measured = [
        (r, rank, mine) for r in probes for rank, mine in enumerate(r.get("ranks") or []) if mine.get("measured")
    ]
    if not probes:
        return Check(CAUSALITY_CHECK, False, "no causality probe recorded")
    if not measured:
        return Check(CAUSALITY_CHECK, False, "no rank measured the outputs' change")
    wrong = [
        f"{r['phase']} rank {rank}: outputs change from position {mine['first']} when token {mine['t']} changes "
        f"(largest change before it {mine['before']:.3g}, at or after it {mine['from']:.3g})"
        if mine["before"] > CAUSAL_RATIO * mine["from"]
        else f"{r['phase']} rank {rank}: changing token {mine['t']} changed no output at all"
        for r, rank, mine in measured
        if mine["before"] > CAUSAL_RATIO * mine["from"] or mine["from"] == 0
    ]
    ranks: dict[str, list[int]] = {}
    for r, rank, _ in measured:
        ranks.setdefault(r["phase"], []).append(rank)
    where = ", ".join(f"{phase} (ranks {', '.join(map(str, sorted(set(rs))))})" for phase, rs in sorted(ranks.items()))
    worst = max(mine["before"] for _, _, mine in measured)
    return Check(
        CAUSALITY_CHECK,
        not wrong,
        "; ".join(wrong[:3])
        or f"token {measured[0][2]['t']} of {measured[0][2]['length']} changed: outputs before it unchanged "
        f"(largest change {worst:.3g}), changed from it on (each rank's last model chunk: logits, or the hidden "
        f"states it hands on); measured at the start of {where}",
    )
