"""Every `--help` of the installed `nemo-recipes`, compared with a snapshot (see tests/snapshots/README.md)."""

from __future__ import annotations

import pytest
from _cli import check_snapshot, cli

VERBS = ["ls", "show", "plan", "diff", "export", "launch", "smoke", "watch", "hf", "data", "completion"]


def test_top_level_help_matches_snapshot():
    result = cli("--help")
    assert result.returncode == 0, result.stderr
    check_snapshot("help_main.txt", result.stdout)


@pytest.mark.parametrize("verb", VERBS)
def test_verb_help_matches_snapshot(verb):
    result = cli(verb, "--help")
    assert result.returncode == 0, result.stderr
    check_snapshot(f"help_{verb}.txt", result.stdout)


@pytest.mark.parametrize("verb", VERBS)
def test_every_help_has_examples_exit_codes_and_json(verb):
    text = cli(verb, "--help").stdout
    assert "examples:\n  nemo-recipes " + verb in text
    assert "exit codes:\n  0  success\n  1  failure" in text
    assert "--json" in text


@pytest.mark.parametrize("subverb", ["prepare", "inspect"])
def test_data_subverb_help_matches_snapshot(subverb):
    result = cli("data", subverb, "--help")
    assert result.returncode == 0, result.stderr
    check_snapshot(f"help_data_{subverb}.txt", result.stdout)


def test_hf_export_help_matches_snapshot():
    result = cli("hf", "export", "--help")
    assert result.returncode == 0, result.stderr
    check_snapshot("help_hf_export.txt", result.stdout)


def test_hf_import_help_matches_snapshot():
    result = cli("hf", "import", "--help")
    assert result.returncode == 0, result.stderr
    check_snapshot("help_hf_import.txt", result.stdout)


def test_snapshots_cover_every_verb():
    # A new verb without a snapshot would otherwise go unreviewed.
    text = cli("--help").stdout
    listed = [
        line.split()[0]
        for line in text.split("positional arguments:")[1].split("options:")[0].splitlines()
        if line.startswith("    ") and not line.startswith("      ")
    ]
    assert listed == VERBS


def _examples(verb: str) -> list[str]:
    text = cli(verb, "--help").stdout
    block = text.split("examples:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip().startswith("nemo-recipes ")]


# The catalog/planner verbs' examples are run as written (those needing jq, an editor, NeMo or a file of the user's,
# a card or a calibration, are left out).
@pytest.mark.parametrize("verb", ["ls", "show", "plan", "diff"])
def test_fast_verbs_examples_really_work(verb, tmp_path):
    import shlex

    runnable = [
        e for e in _examples(verb) if not any(c in e for c in "|$&>") and not any(s in e for s in (".yaml", ".json"))
    ]
    assert runnable, f"no runnable example in `{verb} --help`"
    for example in runnable:
        result = cli(*shlex.split(example)[1:], cwd=tmp_path)
        assert result.returncode == 0, f"{example}\n{result.stderr}"
