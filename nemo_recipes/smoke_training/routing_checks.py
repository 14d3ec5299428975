"""The judge's Mixture-of-Experts checks (issue 46 item 5), read from what routing.py and state.py recorded in the
ranks (standard library only). Each is derived from what a correct MoE step must satisfy, not from a known bug:

- every step routes each token to exactly top-k experts of every MoE layer (dropless routing), so the tokens the
  experts received add up to top-k x the step's tokens;
- routing not collapsed: with top-k of E experts an expert can receive at most one of each token's k assignments,
  so its share of a layer's assignments lies between 0 (dead) and 1/k (chosen by every token), 1/E when balanced.
  Routing collapsed onto one expert reaches the ceiling; collapsed onto a few, the others sit at the floor. A layer
  fails when an expert is chosen by every token of a step, or receives no token in a whole phase. How far from
  balanced a correct router may drift is the recipe's (a scaled Mixtral at 0.01 ends at 4.7 effective experts of 8,
  1 / sum(share^2), measured): the line reports the fewest, judged by no bound;
- the balancing loss Megatron logs is E/(k T^2) x sum_i P_i c_i (Switch Transformer's, divided by its coefficient;
  moe_utils.switch_load_balancing_loss_func), which lies in (0, E/k]: about 1 when balanced, E/k when k experts take
  every token with all the probability. Present at every step and layer where the recipe asks for it, finite, in
  range; or, with bias-based balancing, the expert bias finite and moved from its zeros;
- the expert and router tensors each rank loaded at the resume are bit-equal to those it saved, on every
  expert-parallel rank (each holds different experts); and expert-data-parallel replicas hold the same experts.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from nemo_recipes.smoke_training.invariance import replicas_check
from nemo_recipes.smoke_training.judge import Check, step_ranges

#: The tracker name of each balancing loss type Megatron-Core logs (moe/router.py).
TRACKED = {
    "aux_loss": "load_balancing_loss",
    "seq_aux_loss": "seq_load_balancing_loss",
    "global_aux_loss": "global_load_balancing_loss",
}
#: The checks' names (the tests and the report read them).
ROUTED_CHECK = "tokens routed per expert recorded"
COLLAPSE_CHECK = "routing not collapsed"
BALANCING_CHECK = "balancing loss present and finite"
EXPERT_STATE_CHECK = "expert weights restored on every expert-parallel rank"
EXPERT_REPLICAS_CHECK = "expert-data-parallel replicas identical"

#: Relative slack on the loss's upper bound E/k: it is computed in fp32 from probabilities that sum to 1 only to
#: rounding.
BOUND_SLACK = 1e-3


def moe_checks(
    records: list[dict[str, Any]], phases: tuple[str, ...], tokens_per_step: int, experts_expected: bool = False
) -> list[Check]:
    """The MoE checks of a run (none for a dense model, unless `experts_expected`: the recipe has experts and
    nothing was recorded)."""
    moe = [r for r in records if r.get("event") == "moe" and r.get("phase") in phases]
    if not moe:
        if experts_expected:
            return [Check(ROUTED_CHECK, False, "no router was found in the trained model")]
        return []
    config = moe[0]
    routing = [r for r in records if r.get("event") == "routing" and r.get("phase") in phases]
    checks = [
        _recorded_check(records, routing, phases, config, tokens_per_step),
        _collapse_check(routing, config),
        _balancing_check(routing, config),
        _expert_state_check(records, phases),
    ]
    replicas = replicas_check(
        records,
        name=EXPERT_REPLICAS_CHECK,
        coordinates=("etp", "pp", "ep"),
        field="expert_digest",
        replicas="expert-data-parallel",
    )
    return checks + ([replicas] if replicas else [])


def _recorded_check(
    records: list[dict[str, Any]],
    routing: list[dict[str, Any]],
    phases: tuple[str, ...],
    config: dict[str, Any],
    tokens_per_step: int,
) -> Check:
    name = ROUTED_CHECK
    wrong: list[str] = []
    layers = sorted({layer for r in routing for layer in r.get("tokens_per_expert", {})}, key=int)
    if not layers:
        return Check(name, False, "no step recorded the tokens routed to the experts")
    dropless = config.get("capacity_factor") is None
    expected = config["topk"] * tokens_per_step
    for phase in phases:
        trained = sorted(
            r["step"] for r in records if r.get("event") in ("step", "reference step") and r.get("phase") == phase
        )
        mine = [r for r in routing if r.get("phase") == phase]
        if sorted(r["step"] for r in mine) != trained:
            wrong.append(
                f"{phase}: routing recorded at steps {step_ranges(sorted(r['step'] for r in mine))}, "
                f"trained {step_ranges(trained)}"
            )
        for r in mine:
            counts = r.get("tokens_per_expert", {})
            if sorted(counts, key=int) != layers:
                wrong.append(f"{phase} step {r['step']}: layers {sorted(counts, key=int)}, not {layers}")
                continue
            for layer, values in counts.items():
                total = sum(values)
                if len(values) != config["experts"] or (total != expected if dropless else total > expected):
                    wrong.append(
                        f"{phase} step {r['step']} layer {layer}: {total:,} assignments over {len(values)} experts; "
                        f"top-{config['topk']} x {tokens_per_step:,} tokens = {expected:,} "
                        + ("expected (dropless)" if dropless else "at most")
                    )
    return Check(
        name,
        not wrong,
        "; ".join(wrong[:3]) + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
        if wrong
        else f"{len(routing)} step records, each with the tokens of all {config['experts']} experts in each of the "
        f"{len(layers)} MoE layers, summing to top-{config['topk']} x {tokens_per_step:,} tokens "
        + ("exactly (dropless)" if dropless else "at most (capacity factor)"),
    )


def effective_experts(counts: list[int]) -> float:
    """1 / sum(share^2) of a layer's assignments: E when balanced, k when k experts take them all."""
    total = sum(counts)
    return 1.0 / sum((c / total) ** 2 for c in counts) if total else 0.0


def _collapse_check(routing: list[dict[str, Any]], config: dict[str, Any]) -> Check:
    """Per layer: no step in which one expert was chosen by every token (its share at the ceiling 1/k), and in each
    phase every expert chosen at least once (a share of 0 over the phase: dead)."""
    name = COLLAPSE_CHECK
    experts, topk = config["experts"], config["topk"]
    if topk >= experts:
        return Check(name, True, f"top-{topk} of {experts} experts: every token goes to every expert")
    totals: dict[tuple[str, str], list[int]] = {}
    hot_lines, dead_lines = [], []
    for r in routing:
        for layer, counts in r.get("tokens_per_expert", {}).items():
            key = (r["phase"], layer)
            totals[key] = [a + b for a, b in zip(totals.get(key, [0] * len(counts)), counts, strict=True)]
            tokens = sum(counts) / topk  # each token is assigned k times
            hot = [e for e, c in enumerate(counts) if tokens and c >= tokens]
            if hot:
                hot_lines.append(
                    f"{r['phase']} step {r['step']} layer {layer}: expert(s) {hot} chosen by every token {counts}"
                )
    if not totals:
        return Check(name, False, "no tokens routed were recorded")
    for (phase, layer), counts in totals.items():
        dead = [e for e, c in enumerate(counts) if c == 0]
        if dead:
            dead_lines.append(f"{phase} layer {layer}: expert(s) {dead} received no token {counts}")
    worst = min(totals, key=lambda key: effective_experts(totals[key]))
    wrong = dead_lines[:2] + hot_lines[:2]  # a few of each kind
    more = len(dead_lines) + len(hot_lines) - len(wrong)
    return Check(
        name,
        not wrong,
        "; ".join(wrong) + (f" (and {more} more)" if more else "")
        or f"no expert chosen by every token at any step, none left without tokens in a phase, in all "
        f"{len({layer for _, layer in totals})} layers; fewest effective experts (1 / sum(share^2), {topk} when "
        f"collapsed onto the top-{topk}, {experts} when balanced): {effective_experts(totals[worst]):.2f} "
        f"({worst[0]} layer {worst[1]}: {totals[worst]})",
    )


def _balancing_check(routing: list[dict[str, Any]], config: dict[str, Any]) -> Check:
    name = BALANCING_CHECK
    kinds = config.get("load_balancing")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    coeffs = config.get("aux_loss_coeff")
    coeffs = coeffs if isinstance(coeffs, list) else [coeffs] * len(kinds)
    asked = [TRACKED[k] for k, c in zip(kinds, coeffs, strict=False) if k in TRACKED and c]
    if not asked and not config.get("expert_bias"):
        return Check(name, True, "the recipe balances by neither an auxiliary loss nor an expert bias")
    experts, topk = config["experts"], config["topk"]
    bound = experts / topk * (1 + BOUND_SLACK)
    wrong, seen = [], []
    for r in routing:
        layers = sorted(r.get("tokens_per_expert", {}), key=int)
        for tracked in asked:
            values = r.get("losses", {}).get(tracked, {})
            missing = [layer for layer in layers if layer not in values]
            if missing:
                wrong.append(f"{r['phase']} step {r['step']}: no {tracked} logged for layer(s) {missing}")
            for layer, value in values.items():
                seen.append(value)
                in_range = value <= bound if tracked == TRACKED["aux_loss"] else True
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0 and in_range):
                    wrong.append(
                        f"{r['phase']} step {r['step']} layer {layer}: {tracked} {value} (per micro-batch, divided "
                        f"by its coefficient; must be finite, in (0, E/k = {experts / topk:g}])"
                    )
        if config.get("expert_bias"):
            bias = r.get("expert_bias", {})
            if sorted(bias, key=int) != layers or not all(math.isfinite(v) for b in bias.values() for v in b):
                wrong.append(f"{r['phase']} step {r['step']}: expert bias {bias} (every MoE layer, finite)")
    if config.get("expert_bias") and routing and not wrong:
        last = routing[-1].get("expert_bias", {})
        if all(v == 0 for b in last.values() for v in b):
            wrong.append(f"the expert bias is still all zeros after step {routing[-1]['step']}: never updated")
    detail = "; ".join(wrong[:3]) + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
    if not wrong:
        parts = []
        if asked:
            parts.append(
                f"{', '.join(asked)} logged at every step and layer, finite, between {min(seen):.4f} and "
                f"{max(seen):.4f} per micro-batch (divided by its coefficient; 1 when balanced, at most E/k = "
                f"{experts / topk:g})"
            )
        if config.get("expert_bias"):
            parts.append("the expert bias finite at every step and moved from zero")
        detail = "; ".join(parts)
    return Check(name, not wrong, detail)


def _expert_state_check(records: list[dict[str, Any]], phases: tuple[str, ...]) -> Check:
    """Per rank, the expert and router tensors after the resume's load equal those saved at that step."""
    name = EXPERT_STATE_CHECK
    states = [r for r in records if r.get("event") == "state" and r.get("phase") in phases]
    loads = [i for i, r in enumerate(states) if r.get("when") == "loaded" and (r.get("step") or 0) > 0]
    if not loads:
        return Check(name, False, "no state digests recorded after a resume's load")
    wrong, told = [], []
    for i in loads:
        loaded = states[i]
        saved: Optional[dict[str, Any]] = next(
            (r for r in reversed(states[:i]) if r.get("when") == "saved" and r.get("step") == loaded["step"]), None
        )
        if saved is None:
            wrong.append(f"no digest recorded when the checkpoint at step {loaded['step']} was saved")
            continue
        before, after = saved["ranks"], loaded["ranks"]
        if any("expert weights" not in rank for rank in before + after):
            wrong.append(f"step {loaded['step']}: a rank recorded no expert digest")
            continue
        differ = [
            f"rank {n} (EP rank {a.get('ep')})"
            for n, (b, a) in enumerate(zip(before, after, strict=False))
            if b["expert weights"] != a["expert weights"] or b.get("ep") != a.get("ep")
        ]
        if len(before) != len(after) or differ:
            wrong.append(f"after the load at step {loaded['step']}: {', '.join(differ) or 'rank count'} differ")
        else:
            eps = sorted({rank.get("ep") for rank in after})
            told.append(f"step {loaded['step']} on EP rank(s) {', '.join(map(str, eps))} ({len(after)} ranks)")
    return Check(
        name,
        not wrong,
        "; ".join(wrong) or "routed experts and routers of every rank bit-equal to the save at " + ", ".join(told),
    )
