"""The judge's MoE checks on records written by hand (standard library: no NeMo), at their bounds: the assignments
top-k x tokens, the collapse bounds (a dead expert, an expert chosen by every token), the balancing loss's range
(0, E/k], the expert digests per EP rank; and the two checks of a dense design that expert parallelism misled (the
chained optimizer's keys, replica digests of experts)."""

from __future__ import annotations

import math

from nemo_recipes.smoke_training.invariance import replicas_check
from nemo_recipes.smoke_training.routing_checks import (
    BALANCING_CHECK,
    COLLAPSE_CHECK,
    EXPERT_REPLICAS_CHECK,
    EXPERT_STATE_CHECK,
    ROUTED_CHECK,
    effective_experts,
    moe_checks,
)
from nemo_recipes.smoke_training.worker import is_optimizer_key

MOE = {"event": "moe", "phase": "train", "experts": 4, "topk": 2, "layers": 1, "load_balancing": "aux_loss",
       "aux_loss_coeff": 0.01, "expert_bias": False, "capacity_factor": None}  # fmt: skip
TOKENS = 8


def _run(counts: list[int], loss: float = 1.05, expert: str = "b", replicas: list[dict] | None = None) -> list[dict]:
    """Two steps of one phase each (stopped after step 1), layer 1 routed as `counts` every step."""
    records: list[dict] = [MOE, {**MOE, "phase": "resume"}]
    for phase, step in (("train", 1), ("resume", 2)):
        records.append({"event": "step", "phase": phase, "step": step})
        records.append({"event": "routing", "phase": phase, "step": step, "tokens_per_expert": {"1": counts},
                        "losses": {"load_balancing_loss": {"1": loss}}, "expert_bias": {}})  # fmt: skip
    records.append({"event": "state", "when": "saved", "phase": "train", "step": 1,
                    "ranks": [{"expert weights": "a", "ep": 0}, {"expert weights": "b", "ep": 1}]})  # fmt: skip
    records.append({"event": "state", "when": "loaded", "phase": "resume", "step": 1,
                    "ranks": [{"expert weights": "a", "ep": 0}, {"expert weights": expert, "ep": 1}]})  # fmt: skip
    if replicas:
        records.append({"event": "replicas", "phase": "resume", "step": 2, "ranks": replicas})
    return records


def _checks(records: list[dict]) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.passed, c.detail) for c in moe_checks(records, ("train", "resume"), TOKENS)}


def test_a_balanced_run_passes_every_moe_check():
    checks = _checks(_run([4, 4, 4, 4]))
    assert all(passed for passed, _ in checks.values()), checks
    assert set(checks) == {ROUTED_CHECK, COLLAPSE_CHECK, BALANCING_CHECK, EXPERT_STATE_CHECK}
    assert "EP rank(s) 0, 1" in checks[EXPERT_STATE_CHECK][1]


def test_the_bounds_of_each_check():
    assert effective_experts([4, 4, 4, 4]) == 4 and effective_experts([8, 8, 0, 0]) == 2
    assert not _checks(_run([4, 4, 4, 3]))[ROUTED_CHECK][0]  # 15 assignments, not 2 x 8
    assert not _checks(_run([8, 8, 0, 0]))[COLLAPSE_CHECK][0]  # collapsed onto the top-2
    assert "chosen by every token" in _checks(_run([8, 3, 3, 2]))[COLLAPSE_CHECK][1]  # onto one expert
    assert "received no token" in _checks(_run([6, 6, 4, 0]))[COLLAPSE_CHECK][1]
    assert _checks(_run([7, 7, 1, 1]))[COLLAPSE_CHECK][0]  # imbalanced (2.46 effective experts), not collapsed
    assert _checks(_run([4, 4, 4, 4], loss=2.0))[BALANCING_CHECK][0]  # E/k: the largest the loss can be
    for loss in (2.01, 0.0, math.nan):
        assert not _checks(_run([4, 4, 4, 4], loss=loss))[BALANCING_CHECK][0], loss
    assert not _checks(_run([4, 4, 4, 4], expert="c"))[EXPERT_STATE_CHECK][0]
    assert (
        _checks([]) == {}
        and not _checks([])
        and moe_checks([], ("train",), 1, experts_expected=True)[0].passed is False
    )


def test_experts_are_compared_across_expert_data_parallel_replicas_only():
    # EP2 x EDP2 on 4 ranks: experts differ across EP ranks by design, equal within each EDP pair
    ranks = [{"tp": 0, "pp": 0, "cp": 0, "dp": d, "ep": e, "etp": 0, "edp": d // 2, "digest": "dense",
              "expert_digest": f"experts{e}"} for d, e in ((0, 0), (1, 1), (2, 0), (3, 1))]  # fmt: skip
    checks = _checks(_run([4, 4, 4, 4], replicas=ranks))
    assert checks[EXPERT_REPLICAS_CHECK] == (
        True,
        "at step 2, 2 group(s) of 2 expert-data-parallel replicas, each bit-identical",
    )
    dense = replicas_check(_run([4, 4, 4, 4], replicas=ranks))
    assert dense is not None and dense.passed
    ranks[3]["expert_digest"] = "spoiled"
    assert not _checks(_run([4, 4, 4, 4], replicas=ranks))[EXPERT_REPLICAS_CHECK][0]


def test_the_chained_optimizers_keys_are_optimizer_state():
    assert is_optimizer_key("optimizer.state.exp_avg.module.decoder.layers.0.weight")
    assert is_optimizer_key("chained_1.optimizer.distributed.dp_group_idx_0.gbuf_idx_0.bucket_idx_0.exp_avg")
    assert not is_optimizer_key("module.decoder.layers.mlp.experts.experts.linear_fc1.weight")
    assert not is_optimizer_key("chained_0.module.weight")
