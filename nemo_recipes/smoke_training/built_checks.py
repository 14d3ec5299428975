"""The judge's checks of the optimizer and parameters as built (built.py records them on every rank), one line each.
Standard library only."""

from __future__ import annotations

import math
from typing import Any, Optional

from nemo_recipes.smoke_training.judge import Check


def _latest(records: list[dict[str, Any]], event: str, phases: tuple[str, ...], **match: Any) -> list[dict[str, Any]]:
    return [
        r
        for r in records
        if r.get("event") == event and r.get("phase") in phases and all(r.get(k) == v for k, v in match.items())
    ]


def _per_rank(built: list[dict[str, Any]], key: str) -> list[str]:
    """'phase rank N: first wrong things' for every rank of every phase that found something wrong under `key`."""
    found = []
    for record in built:
        for rank, mine in enumerate(record.get("ranks") or []):
            wrong = mine.get(key) or []
            if wrong:
                more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
                found.append(f"{record.get('phase')} rank {rank}: {'; '.join(wrong[:3])}{more}")
    return found


def built_checks(
    records: list[dict[str, Any]], phases: tuple[str, str], restored_from: Optional[str] = None
) -> list[Check]:
    """The optimizer and parameters as Megatron built them, against the recipe; `restored_from`: the checkpoint the
    first phase's weights were loaded from (`restore_from`), whose step-0 weights are no initialisation."""
    built = _latest(records, "built", phases)
    if not built:
        return [Check("optimizer as the recipe", False, "no record of the optimizer as built")]
    ranks = sum(len(r.get("ranks") or []) for r in built)
    seen = (built[0].get("ranks") or [{}])[0].get("seen", {})
    checks = []
    config = _per_rank(built, "config")
    checks.append(
        Check(
            "optimizer as the recipe",
            not config,
            "; ".join(config)
            or f"on {ranks} rank-phases: lr {seen.get('lr')}, min lr {seen.get('min_lr')}, betas "
            f"({seen.get('adam_beta1')}, {seen.get('adam_beta2')}), eps {seen.get('adam_eps')}, clip_grad "
            f"{seen.get('clip_grad')}, distributed optimizer {seen.get('distributed optimizer')}",
        )
    )
    decay = _per_rank(built, "weight_decay")
    checks.append(
        Check(
            "weight decay per parameter group",
            not decay,
            "; ".join(decay)
            or f"{seen.get('weight_decay')} on matrices, 0 on biases and norms (Megatron's rule), every rank",
        )
    )
    precision = _per_rank(built, "precision")
    checks.append(
        Check(
            "gradients and main parameters in fp32",
            not precision,
            "; ".join(precision)
            or f"main params {seen.get('main params', 'the model')}, gradients {seen.get('grads')}",
        )
    )
    frozen = _per_rank(built, "frozen")
    checks.append(
        Check(
            "every parameter trains",
            not frozen,
            ("requires_grad False: " + "; ".join(frozen))
            if frozen
            else f"requires_grad on all {built[0]['ranks'][0].get('parameters')} parameters (rank 0)",
        )
    )
    checks.append(_moved_check(records, phases))
    checks.append(_init_check(records, phases, restored_from))
    return checks


INIT_CHECK = "initialisation as the recipe"
#: Standard errors of the measured std allowed (a sample std of n normal draws has a relative standard error of
#: 1 / sqrt(2n)), plus bf16's rounding (2^-8 relative per element, which moves the std by far less).
INIT_STANDARD_ERRORS = 5.0


def _init_check(records: list[dict[str, Any]], phases: tuple[str, str], restored_from: Optional[str]) -> Check:
    """Every weight matrix's standard deviation at step 0, on every rank, is the recipe's within sampling error."""
    if restored_from:
        return Check(INIT_CHECK, True, f"not measured: the weights at step 0 are restore_from's ({restored_from})")
    measured = _latest(records, "initial std", phases[:1])
    if not measured:
        return Check(INIT_CHECK, False, "no standard deviations recorded at step 0")
    wrong, count = [], 0
    for rank, mine in enumerate(measured[0].get("ranks") or []):
        for name, (n, got, want) in mine.items():
            count += 1
            allowed = INIT_STANDARD_ERRORS / math.sqrt(2 * n) + 2.0**-8
            if abs(got / want - 1) > allowed:
                wrong.append(f"rank {rank}: {name} std {got:.4g} (recipe {want:.4g}, within {allowed:.1%})")
    return Check(
        INIT_CHECK,
        not wrong,
        "; ".join(wrong[:3]) + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
        if wrong
        else f"std of all {count} weight matrices (all ranks) at step 0 within {INIT_STANDARD_ERRORS:g} standard "
        "errors of the recipe's init_method_std (/ sqrt(2 x layers) for the attention and MLP output projections)",
    )


def _moved_check(records: list[dict[str, Any]], phases: tuple[str, str]) -> Check:
    """Each parameter's fingerprint at the end of the last phase differs from the one at step 0, on every rank; a
    frozen parameter (reported by "every parameter trains") is left to that check."""
    initial = _latest(records, "parameters", phases[:1], when="initial")
    final = _latest(records, "parameters", phases[1:], when="end")
    if not initial or not final:
        return Check("every parameter moved", False, "no fingerprints of the parameters at the start and the end")
    frozen = {n for r in _latest(records, "built", phases) for mine in r.get("ranks") or [] for n in mine["frozen"]}
    start, end = initial[0]["ranks"], final[-1]["ranks"]
    if len(start) != len(end):
        return Check("every parameter moved", False, f"{len(start)} ranks at the start, {len(end)} at the end")
    still = [
        f"rank {rank}: {name}"
        for rank, (a, b) in enumerate(zip(start, end, strict=True))
        for name in a
        if name not in frozen and a[name] == b.get(name)
    ]
    count = sum(len(a) for a in start)
    return Check(
        "every parameter moved",
        not still,
        f"unchanged from step 0: {'; '.join(still[:4])}" + (f" (and {len(still) - 4} more)" if len(still) > 4 else "")
        if still
        else f"all {count} parameter tensors (all ranks) differ from step 0 at step {final[-1].get('step')}",
    )
