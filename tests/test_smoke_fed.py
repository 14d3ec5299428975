"""The data fed, judged from what reached the model: planted bugs in NeMo's and Megatron-Core's own data functions
(tests/_faults.py, each a replacement of their function in every training process) run through NeMo's real loop, and
each must fail "samples fed in the sampler's order" or "labels are the next tokens", and no other check.

The shortest smoke the proof allows: 4 steps (the fewest "model learned" judges), stopped after 2, at max_lr 0.01 so
that 4 steps learn; one process except for the data-parallel fault. The good runs (tests/test_smoke_training.py,
test_smoke_layouts.py) pass both checks."""

from __future__ import annotations

import pytest
from _faults import planted
from _smoke import explain as _explain

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from nemo_recipes.smoke_training import smoke  # noqa: E402
from nemo_recipes.smoke_training.fed_checks import FED_CHECK, LABELS_CHECK, expected_batches  # noqa: E402
from nemo_recipes.smoke_training.resume_loss import RESUME_LOSS_CHECK  # noqa: E402

pytestmark = [pytest.mark.nemo, pytest.mark.slow]

SHORT = {"steps": 4, "stop_step": 2, "progress": None}


def _failed(report) -> list[str]:
    assert all(code == 0 for code in report.exit_codes.values()), _explain(report)
    return [c.name for c in report.verdict.checks if not c.passed]


def _detail(report, name: str) -> str:
    return next(c.detail for c in report.verdict.checks if c.name == name)


def test_the_sampler_order_is_megatrons_arithmetic():
    """Global batch 8, micro batch 2, DP 2: each step's 8 indices in runs of 4, DP rank r the r-th pair of each."""
    assert expected_batches(1, 0, 2, 2, 8) == [[0, 1], [4, 5]]
    assert expected_batches(1, 1, 2, 2, 8) == [[2, 3], [6, 7]]
    assert expected_batches(3, 0, 1, 2, 4) == [[8, 9], [10, 11]]


# A fault of the resumed phase's data also changes what it trains on after the stop: its losses then depart from the
# first phase's, trained on without the stop (resume_loss.py), and that check must fail too.
@pytest.mark.parametrize(
    "fault, phases, checks, why",
    [
        ("loader-restarts-at-zero", ("resume",), [FED_CHECK, RESUME_LOSS_CHECK], "8 samples fed more than once (0-7)"),
        (
            "loader-skips-a-batch",
            ("resume",),
            [FED_CHECK, RESUME_LOSS_CHECK],
            "4 samples of the first 16 never fed (8-11)",
        ),
        # Both phases: a model taught to copy in one phase only unlearns it in the other ("model learned" fails).
        ("labels-not-shifted", ("train", "resume"), [LABELS_CHECK], "label[t] != token[t+1]"),
    ],
    ids=["restart-at-0", "skipped-batch", "unshifted-labels"],
)
def test_a_planted_data_bug_fails_its_check_and_no_other(fault, phases, checks, why, tmp_path):
    faults = dict.fromkeys(phases, planted(fault))
    report = smoke("gpt_1_3b", {"max_lr": 0.01}, dir=str(tmp_path), faults=faults, **SHORT)
    assert sorted(_failed(report)) == sorted(checks), _explain(report)
    check = checks[0]
    assert why in _detail(report, check), _explain(report)


def test_dp_replicas_fed_the_same_micro_batches_fail_the_order_check(tmp_path):
    """Both DP ranks' samplers are told they are rank 0 (in both phases): each replica trains on the same half of
    every global batch, and the other half is never read. Their weights stay identical (the gradients are still
    averaged), so only the sample ids show it."""
    faults = dict.fromkeys(("train", "resume"), planted("replicas-read-the-same-data"))
    report = smoke("gpt_1_3b", {"max_lr": 0.01}, processes=2, dir=str(tmp_path), faults=faults, **SHORT)
    assert _failed(report) == [FED_CHECK], _explain(report)
    assert "DP replicas fed the same samples at steps 1-4" in _detail(report, FED_CHECK), _explain(report)


@pytest.fixture(scope="module")
def two_tokenizers(tmp_path_factory):
    """Macbeth prepared with tokenizer A (trained on it), its manifest removed; tokenizer B of the same size trained
    on The Tempest."""
    from pathlib import Path

    from nemo_recipes.data.prepare import prepare

    corpus = Path(__file__).resolve().parent.parent / "examples" / "data" / "shakespeare"
    root = tmp_path_factory.mktemp("tokenizers")
    for name, play in (("a", "macbeth"), ("b", "the-tempest")):
        prepare([str(corpus / f"{play}.jsonl")], root / name, train_tokenizer=True, vocab_size=512, progress="none")
    (root / "a" / "macbeth.manifest.json").unlink()
    return root / "a" / "macbeth", root / "a" / "tokenizer", root / "b" / "tokenizer"


def test_data_without_a_manifest_read_by_another_tokenizer_of_the_same_size_is_refused(two_tokenizers):
    """No training: the smoke refuses before any process starts (exit 2, field, value, fix); with the tokenizer
    that wrote the data it only warns that there is no manifest, and the warning is printed."""
    import subprocess
    import sys

    from nemo_recipes.data import tokenizers

    prefix, right, wrong = two_tokenizers
    assert tokenizers.describe(right).vocab_size == tokenizers.describe(wrong).vocab_size
    command = [sys.executable, "-m", "nemo_recipes.cli.main", "smoke", "gpt_1_3b", f"data_paths=[{prefix}]"]
    refused = subprocess.run([*command, f"tokenizer_path={wrong}"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert f"error: data_paths='{prefix}': (no manifest) only 0 of 16 documents decoded by" in refused.stderr
    assert "encode back to the same ids" in refused.stderr and "Fix: give the tokenizer that wrote" in refused.stderr
    # The right tokenizer: only the warning, printed; 64 processes are then refused on this machine (exit 2, no run).
    warned = subprocess.run(
        [*command, f"tokenizer_path={right}", "--processes", "64"], capture_output=True, text=True, timeout=120
    )
    assert warned.returncode == 2, warned.stderr
    assert f"warning: data_paths='{prefix}': has no manifest" in warned.stderr, warned.stderr
    assert "were checked against the tokenizer" in warned.stderr and "encode back" not in warned.stderr
