"""The judge's view of the data fed (`fed.py`'s "fed" records): the samples each rank trained on against the order
Megatron's sampler defines, and the labels against the tokens. Standard library only.

Megatron's `MegatronPretrainingSampler` (NeMo's dataloader_type "single") walks the dataset indices from the consumed
samples onwards in runs of micro batch x DP size, and gives DP rank r the r-th micro batch of each run. Uninterrupted,
the i-th micro-batch of global step s (1-based) on DP rank r therefore holds the indices from
(s - 1) x global batch + i x micro batch x DP + r x micro batch, micro batch of them. A resume that restarts the loader,
skips, or repeats, or DP replicas that read the same micro-batches, depart from that order.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Optional

from nemo_recipes.smoke_training.judge import Check, committed, step_ranges

FED_CHECK = "samples fed in the sampler's order"
LABELS_CHECK = "labels are the next tokens"
POSITIONS_CHECK = "position ids are 0..s-1 in every sequence"
BLEND_CHECK = "samples drawn from each source in the blend's shares"
#: Binomial standard errors allowed between a source's count and its share of the samples drawn (plus one sample:
#: Megatron's blend draws in whole samples).
BLEND_STANDARD_ERRORS = 4.0


def expected_batches(step: int, dp_rank: int, dp_size: int, micro: int, global_batch: int) -> list[list[int]]:
    """The micro-batches (dataset indices) DP rank `dp_rank` trains on at global step `step`, uninterrupted."""
    per_run = micro * dp_size
    return [
        list(range(start, start + micro))
        for start in ((step - 1) * global_batch + i * per_run + dp_rank * micro for i in range(global_batch // per_run))
    ]


def _committed_fed(records: list[dict[str, Any]], phases: tuple[str, str]) -> list[dict[str, Any]]:
    """The "fed" records of the committed history (a killed run's steps past its successor's resume dropped, as
    `judge.committed` drops their step records)."""
    ordered = [r for r in records if r.get("phase") in phases and r.get("event") in ("start", "fed")]
    as_steps = [{**r, "event": "step"} if r.get("event") == "fed" else r for r in ordered]
    history, _ = committed(as_steps)
    return history


def fed_checks(
    records: list[dict[str, Any]],
    *,
    steps: int,
    stop_step: int,
    global_batch_size: int,
    phases: tuple[str, str] = ("train", "resume"),
    blend: Optional[tuple[float, ...]] = None,
) -> list[Check]:
    """The order, label and position checks, and with `blend` (the shares the recipe asks of its sources, in the
    order of its data_paths) the blend's; none where the run recorded nothing of what it was fed (a record written
    before fed.py existed)."""
    fed = _committed_fed(records, phases)
    if not any(r.get("event") == "fed" for r in records):
        return []
    checks = [_order_check(fed, steps, stop_step, global_batch_size), _labels_check(fed), _positions_check(fed)]
    return checks + ([_blend_check(fed, blend)] if blend and len(blend) > 1 else [])


def _blend_check(fed: list[dict[str, Any]], blend: tuple[float, ...]) -> Check:
    """The samples each source gave (one rank per DP replica: the others read the same), against its share of all
    samples drawn, within the binomial sampling error of a draw with those shares."""
    drawn: Counter[int] = Counter()
    for record in fed:
        replicas = {rank["dp"]: rank.get("sources") for rank in record.get("ranks", [])}
        for sources in replicas.values():
            drawn.update({int(k): v for k, v in (sources or {}).items()})
    total = sum(drawn.values())
    if not total:
        return Check(BLEND_CHECK, False, "no sources of the samples recorded (the training data is not a blend)")
    shares = [w / math.fsum(blend) for w in blend]
    off, told = [], []
    for source, share in enumerate(shares):
        want, got = total * share, drawn.get(source, 0)
        allowed = BLEND_STANDARD_ERRORS * math.sqrt(total * share * (1 - share)) + 1
        told.append(f"source {source}: {got} ({want:.1f} expected)")
        if abs(got - want) > allowed:
            off.append(
                f"source {source} gave {got} of {total} samples, its share {share:.3g} expects {want:.1f} "
                f"(+- {allowed:.1f})"
            )
    strays = sorted(set(drawn) - set(range(len(shares))))
    if strays:
        off.append(f"samples from sources {strays}, which the recipe does not name")
    return Check(
        BLEND_CHECK,
        not off,
        "; ".join(off)
        or f"{total} samples: " + ", ".join(told) + f", each within {BLEND_STANDARD_ERRORS:g} binomial standard errors",
    )


def _order_check(fed: list[dict[str, Any]], steps: int, stop_step: int, global_batch: int) -> Check:
    wrong: list[str] = []
    counts: Counter[int] = Counter()
    first_off: Optional[str] = None
    overlap: list[int] = []
    seen_steps = [r["step"] for r in fed]
    if seen_steps != list(range(1, steps + 1)):
        wrong.append(f"recorded steps {step_ranges(seen_steps)} (expected 1-{steps})")
    types = {r.get("dataloader_type") for r in fed}
    # Only the pretraining sampler's order is arithmetic; a random ("cyclic") loader is judged for repeats alone.
    ordered = types <= {"single"} and all(r.get("micro_batch_size") for r in fed)
    for record in fed:
        step, micro = record["step"], record.get("micro_batch_size") or 0
        in_step: Counter[int] = Counter()
        replicas: dict[int, list[list[int]]] = {}  # DP rank -> its micro-batches (every TP/PP rank reads the same)
        for rank in record.get("ranks", []):
            got = rank.get("batches", [])
            held = replicas.setdefault(rank["dp"], got)
            if held != got:
                wrong.append(f"step {step}: ranks of DP rank {rank['dp']} fed different samples")
            want = expected_batches(step, rank["dp"], rank["dp_size"], micro, global_batch)
            if ordered and got != want and first_off is None:
                first_off = f"step {step}, global rank {rank['rank']} (DP {rank['dp']}): {got} (expected {want})"
        for batches in replicas.values():
            in_step.update(i for batch in batches for i in batch)
        overlap += [step] if any(n > 1 for n in in_step.values()) else []
        counts.update(in_step)
    repeated = sorted(i for i, n in counts.items() if n > 1)
    whole = set(range(steps * global_batch))
    skipped = sorted(whole - set(counts)) if ordered else []
    if overlap:
        wrong.append(f"DP replicas fed the same samples at steps {step_ranges(overlap)}")
    if repeated:
        wrong.append(f"{len(repeated)} samples fed more than once ({_ids(repeated)})")
    if skipped:
        wrong.append(f"{len(skipped)} samples of the first {len(whole)} never fed ({_ids(skipped)})")
    if first_off:
        wrong.append(f"departs from the uninterrupted order at {first_off}")
    total = sum(counts.values())
    dp = max((rank["dp_size"] for r in fed for rank in r.get("ranks", [])), default=1)
    told = (
        f"{total} samples over {len(fed)} steps, each once, in the order of Megatron's pretraining sampler "
        f"uninterrupted (indices 0-{steps * global_batch - 1}) across the resume after step {stop_step}, "
        f"{dp} DP replica(s) disjoint"
        if ordered
        else f"{total} samples over {len(fed)} steps, none repeated (dataloader {sorted(map(str, types))}: its "
        "order is not judged)"
    )
    return Check(FED_CHECK, bool(fed) and not wrong, "; ".join(wrong) or told)


def _labels_check(fed: list[dict[str, Any]]) -> Check:
    positions = [p for r in fed for rank in r.get("ranks", []) for batch in rank.get("labels", []) for p in batch]
    off = [
        (r["step"], rank["rank"], t, label, token)
        for r in fed
        for rank in r.get("ranks", [])
        for batch in rank.get("labels", [])
        for t, label, token in batch
        if label != token
    ]
    detail = (
        f"{len(off)} of {len(positions)} positions: label[t] != token[t+1], e.g. (step, rank, t, label, next token) "
        f"{off[:3]}"
        if off
        else f"label[t] = token[t+1] at all {len(positions)} positions sampled (first sample of every micro-batch, "
        "every rank and step)"
    )
    return Check(LABELS_CHECK, bool(positions) and not off, detail)


def _positions_check(fed: list[dict[str, Any]]) -> Check:
    """Every micro-batch of every rank and step was fed position ids 0..s-1 in each sequence (what the model's
    positional embedding or rotary phases are computed from)."""
    fed_to = [
        (r["step"], rank["rank"], p) for r in fed for rank in r.get("ranks", []) for p in rank.get("positions", [])
    ]
    off = [
        f"step {step} rank {rank}: " + (p if isinstance(p, str) else f"sequence {p[0]} position {p[1]} fed id {p[2]}")
        for step, rank, p in fed_to
        if p is not None
    ]
    return Check(
        POSITIONS_CHECK,
        bool(fed_to) and not off,
        "; ".join(off[:3]) + (f" (and {len(off) - 3} more micro-batches)" if len(off) > 3 else "")
        if off
        else f"{len(fed_to)} micro-batches (every rank and step)"
        if fed_to
        else "no position ids recorded",
    )


def _ids(ids: list[int]) -> str:
    return step_ranges(ids) if len(ids) < 40 else f"{step_ranges(ids[:40])}, ..."
