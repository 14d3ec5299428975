"""Issue 31: real bugs planted where NeMo, Megatron-Core or Lightning would have them (planted.py: monkeypatches of
their own functions, in every training process), each failing its own check of the smoke judge and no other:
the loss across the resume (compared with the first phase trained on past its stop), the optimizer and parameters
as built, the final checkpoint's files.

One bug per run, at the shortest smoke the judge allows (4 steps, stopped after 2); the tensor-parallel one needs
two processes."""

from __future__ import annotations

import pytest
from _smoke import explain as _explain

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from nemo_recipes.smoke_training import smoke  # noqa: E402
from nemo_recipes.smoke_training.resume_loss import RESUME_LOSS_CHECK  # noqa: E402

pytestmark = [pytest.mark.nemo, pytest.mark.slow]


def _failed(report) -> dict[str, str]:
    assert all(code == 0 for code in report.exit_codes.values()), _explain(report)
    return {c.name: c.detail for c in report.verdict.checks if not c.passed}


#: The shortest smoke the judge allows: 4 steps, stopped after 2 (the resumed losses are steps 3 and 4).
SHORT = {"steps": 4, "stop_step": 2, "progress": None}


@pytest.mark.parametrize(
    "fault, phases, check, says",
    [
        (
            "weight-decay-0",
            ("train", "resume"),
            "weight decay per parameter group",
            "linear_fc1.weight: 0.0 (expected 0.1)",
        ),
        ("no-clipping", ("train", "resume"), "optimizer as the recipe", "clip_grad 0.0 (recipe 1.0)"),
        ("frozen-attention", ("train", "resume"), "every parameter trains", "self_attention.linear_qkv.weight"),
        # Step 3's loss is taken before the update the zeroed moments spoil: step 4 departs.
        ("moments-zeroed-at-first-resumed-step", ("resume",), RESUME_LOSS_CHECK, "step 4"),
        ("truncated-final-checkpoint", ("resume",), "last checkpoint resumable", ".distcp holds 0 bytes"),
    ],
    ids=["weight-decay-0", "clipping-off", "frozen-attention", "moments-zeroed", "truncated-checkpoint"],
)
def test_a_planted_bug_fails_its_own_check_and_no_other(fault, phases, check, says, tmp_path):
    # max_lr 0.01: 4 steps at the recipe's rate learn too little for "model learned" (tests/test_smoke_fed.py alike).
    report = smoke("gpt_1_3b", {"max_lr": 0.01}, dir=str(tmp_path), faults=dict.fromkeys(phases, fault), **SHORT)
    failed = _failed(report)
    assert sorted(failed) == [check], _explain(report)
    assert says in failed[check], failed
    # The state digests were taken before anything was spoiled after the load: the resume restored everything.
    passed = {c.name for c in report.verdict.checks if c.passed}
    assert "resume restored the exact state" in passed, _explain(report)


def test_a_tensor_rank_reinitialised_at_the_first_resumed_step_fails_the_resumed_loss_only(tmp_path):
    report = smoke(
        "gpt_1_3b",
        {"tensor_parallel": 2},
        processes=2,
        steps=4,
        dir=str(tmp_path),
        progress=None,
        faults={"resume": "tp-rank-reinitialised-at-first-resumed-step"},
    )
    failed = _failed(report)
    assert sorted(failed) == [RESUME_LOSS_CHECK], _explain(report)
    # Step 3's loss is taken before its update (the one that re-initialised the shard): step 4 departs.
    assert failed[RESUME_LOSS_CHECK].startswith("step 4:"), failed
