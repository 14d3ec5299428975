"""Issue 31: real bugs planted where NeMo, Megatron-Core or Lightning would have them (planted.py: monkeypatches of
their own functions, in every training process), each failing its own check of the smoke judge and no other:
the loss across the resume (compared with the first phase trained on past its stop), the optimizer and parameters
as built, the final checkpoint's files.

Each bug's check is its own: the optimizer's config (clip_grad), the weight decay per group, requires_grad, the
resumed losses, the files. So the one-process bugs share one run (CI time), and the test asserts that exactly
their checks fail, each naming its own bug; the tensor-parallel one needs two processes and has its own run, at the
shortest smoke the judge allows (4 steps)."""

from __future__ import annotations

import pytest
from _smoke import explain as _explain

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from nemo_recipes.smoke_training import smoke  # noqa: E402

pytestmark = [pytest.mark.nemo, pytest.mark.slow]

RESUMED_LOSS = "loss after the resume equals the uninterrupted run"


def _failed(report) -> dict[str, str]:
    assert all(code == 0 for code in report.exit_codes.values()), _explain(report)
    return {c.name: c.detail for c in report.verdict.checks if not c.passed}


def test_planted_optimizer_parameter_resume_and_checkpoint_bugs_fail_their_own_checks(tmp_path):
    built = "weight-decay-0,no-clipping,frozen-attention"
    report = smoke(
        "gpt_1_3b",
        dir=str(tmp_path),
        progress=None,
        faults={"train": built, "resume": f"{built},moments-zeroed-at-first-resumed-step,truncated-final-checkpoint"},
    )
    failed = _failed(report)
    assert sorted(failed) == sorted(
        [
            "optimizer as the recipe",
            "weight decay per parameter group",
            "every parameter trains",
            RESUMED_LOSS,
            "last checkpoint resumable",
        ]
    ), _explain(report)
    assert "clip_grad 0.0 (recipe 1.0)" in failed["optimizer as the recipe"], failed
    assert "lr" not in failed["optimizer as the recipe"].replace("clip_grad", ""), failed
    assert "linear_fc1.weight: 0.0 (expected 0.1)" in failed["weight decay per parameter group"], failed
    assert "self_attention.linear_qkv.weight" in failed["every parameter trains"], failed
    assert "mlp" not in failed["every parameter trains"], failed
    assert failed[RESUMED_LOSS].startswith("step 1"), failed
    assert ".distcp holds 0 bytes" in failed["last checkpoint resumable"], failed
    # The state digests were taken before the moments were spoiled: the resume itself restored everything.
    passed = {c.name: c.detail for c in report.verdict.checks if c.passed}
    assert "bit-equal to the save at step 10" in passed["resume restored the exact state"]


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
    assert sorted(failed) == [RESUMED_LOSS], _explain(report)
    # Step 3's loss is taken before its update (the one that re-initialised the shard): step 4 departs.
    assert failed[RESUMED_LOSS].startswith("step 4:"), failed
