"""What each command line imports, checked in a fresh interpreter per command through sys.modules after main()
returns: the structure that keeps the CLI fast, rather than the clock (benchmarks/cli_latency.py measures speed).

- `ls`, `show`, `plan` (and the other catalog-only paths) import no heavy module: no NeMo, torch, Megatron,
  NeMo-Run, Lightning, matplotlib or rich; nor does any verb's `--help` or any verb refusing its input.
- Only the chosen verb's module is imported (`cli/verbs.py`); the top-level `--help` imports none.
- `ls` imports no planner module and `show` only the layout it shows (with the GPU table the layout reads).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_recipes.cli.main import build_parser
from nemo_recipes.cli.verbs import VERBS

HEAVY = {
    "nemo",
    "torch",
    "megatron",
    "nemo_run",
    "lightning",
    "pytorch_lightning",
    "matplotlib",
    "rich",
    "numpy",
    "fiddle",
    "omegaconf",
    "transformers",
    "typer",
    "yaml",
}

PROBE = f"""
import contextlib, io, json, sys
from nemo_recipes.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as stop:  # --help and --version end in argparse's exit
        code = stop.code
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & set({sorted(HEAVY)!r}))
ours = sorted(name for name in sys.modules if name.startswith("nemo_recipes."))
print(json.dumps({{"code": code, "heavy": loaded, "ours": ours}}))
"""

VERB_MODULES = {verb.module for verb in VERBS.values()}


def imported(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def planner_modules(probe: dict) -> set[str]:
    return {name for name in probe["ours"] if name == "nemo_recipes.plan" or name.startswith("nemo_recipes.plan.")}


def verb_modules(probe: dict) -> set[str]:
    return set(probe["ours"]) & VERB_MODULES


def assert_light(probe: dict, args: tuple[str, ...]) -> None:
    assert probe["heavy"] == [], f"`nemo-recipes {' '.join(args)}` imported {probe['heavy']}"


# Each command line is probed once: the tests below check the heavy modules too.
@pytest.mark.parametrize(
    "args",
    [
        ("plan", "gpt_175b", "--nodes", "2", "--fit", "--json"),
        ("plan", "--custom", "--layers", "48", "--hidden", "6144", "--heads", "48", "--nodes", "4", "--tp", "4"),
        ("diff", "gpt_13b", "gpt_70b"),
        ("completion", "bash"),
        ("--version",),
        # The verbs that need NeMo refuse bad input before they import it.
        ("export", "gpt_nope"),
        ("export", "gpt_7b", "tensor_parallel=x"),
        ("launch", "gpt_nope", "--dryrun"),
        ("smoke", "gpt_nope"),
        # watch reads a whole run (its recipe, FLOPs per token, figures) as text.
        ("watch", str(Path(__file__).parent / "data" / "watch" / "smoke_gpt_1_3b"), "--json"),
    ],
    ids=lambda a: " ".join(a),
)
def test_fast_verbs_import_nothing_heavy(args):
    assert_light(imported(*args), args)


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_verb_imports_its_own_module_and_nothing_heavy(verb):
    probe = imported(verb, "--help")
    assert probe["code"] == 0
    assert verb_modules(probe) == {VERBS[verb].module}
    assert_light(probe, (verb, "--help"))


@pytest.mark.parametrize("args", [("--help",), ("plna", "gpt_70b")], ids=" ".join)
def test_the_verb_list_and_a_mistyped_verb_import_no_verb(args):
    probe = imported(*args)
    assert probe["code"] in (0, 2) and verb_modules(probe) == set()
    assert_light(probe, args)


# The planner modules each verb uses: `show` prints the derived DP and gradient accumulation, which the layout
# computes (from the GPU table's Cluster); `ls` prints catalog values only.
PLANNER_USED = {
    ("ls",): set(),
    ("ls", "--json"): set(),
    ("show", "gpt_70b"): {"nemo_recipes.plan", "nemo_recipes.plan.layout", "nemo_recipes.plan.hardware"},
    ("show", "gpt_7b", "tensor_parallel=4", "--json"): {
        "nemo_recipes.plan",
        "nemo_recipes.plan.layout",
        "nemo_recipes.plan.hardware",
    },
}


@pytest.mark.parametrize("args", list(PLANNER_USED), ids=" ".join)
def test_ls_and_show_import_no_planner_module_they_do_not_use(args):
    probe = imported(*args)
    assert probe["code"] == 0
    unused = planner_modules(probe) - PLANNER_USED[args]
    assert not unused, f"`nemo-recipes {' '.join(args)}` imported {sorted(unused)}, which it does not use"
    assert_light(probe, args)


def test_the_probe_sees_the_planner_when_a_verb_loads_it():
    # `plan` uses the throughput model and the search (its advice line): the probe must see them, else the test
    # above could never fail.
    probe = imported("plan", "gpt_70b")
    assert {"nemo_recipes.plan.throughput", "nemo_recipes.plan.search"} <= planner_modules(probe)
    assert verb_modules(probe) == {VERBS["plan"].module}
    assert_light(probe, ("plan", "gpt_70b"))


def test_plan_imports_no_planner_module_it_does_not_use():
    # Start-up is `plan`'s budget (issue 44: within 3x `python -c pass`): without a calibration file or --plot it
    # loads neither the calibration reader (json, the refit) nor the plot module, and no verb's module but its own.
    probe = imported("plan", "gpt_70b")
    assert probe["code"] == 0
    unused = planner_modules(probe) & {"nemo_recipes.plan.calibration", "nemo_recipes.plan.plot"}
    assert not unused, f"`nemo-recipes plan gpt_70b` imported {sorted(unused)}, which it does not use"
    assert "nemo_recipes.conversion" not in {name.rsplit(".", 1)[0] for name in probe["ours"]}


def test_the_probe_sees_a_heavy_import_when_there_is_one(tmp_path):
    # --plot is the one fast-verb option that needs matplotlib: the probe must notice it (else the test above
    # could never fail).
    probe = imported("plan", "gpt_1_3b", "--plot", str(tmp_path / "p.png"))
    assert probe["code"] == 0 and "matplotlib" in probe["heavy"]


def _listed(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(action.dest, str(action.help)) for action in sub._choices_actions]


def test_the_verb_table_is_what_every_parser_lists():
    # The lazy parser lists each verb from the table; the full one from the verb's own module. They must agree, in
    # the table's order, whichever verb was chosen.
    table = [(name, verb.help) for name, verb in VERBS.items()]
    assert _listed(build_parser()) == table
    for name in VERBS:
        assert _listed(build_parser(name)) == table


def test_plan_with_a_calibration_imports_nothing_heavy(tmp_path):
    # The calibration is JSON read by the standard library (not YAML), so `plan` stays instant with one loaded.
    from nemo_recipes.plan.calibration import Calibration, write_calibration
    from nemo_recipes.plan.throughput import CONSTANTS

    path = write_calibration(
        tmp_path / "c.json",
        Calibration(CONSTANTS.replace(matmul=0.7), ("h100-80gb",), "transformer-engine", ("bf16",), (), {}),
    )
    args = ("plan", "gpt_7b", "--gpu", "h100", "--calibration", str(path))
    probe = imported(*args)
    assert probe["code"] == 0
    assert "nemo_recipes.plan.calibration" in probe["ours"]
    assert_light(probe, args)
