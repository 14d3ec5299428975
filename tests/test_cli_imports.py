"""`ls`, `show`, `plan` (and the other catalog-only paths) import no heavy module: no NeMo, torch, Megatron,
NeMo-Run, Lightning, matplotlib or rich. Checked in a fresh interpreter per command, through sys.modules after main()
returns. Speed itself is measured in benchmarks/cli_latency.py, not here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & set({sorted(HEAVY)!r}))
print(json.dumps({{"code": code, "heavy": loaded}}))
"""


def imported(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        ("ls",),
        ("ls", "--json"),
        ("show", "gpt_70b"),
        ("show", "gpt_70b", "tensor_parallel=4", "--json"),
        ("plan", "gpt_70b"),
        ("plan", "gpt_175b", "--nodes", "2", "--fit", "--json"),
        ("plan", "--custom", "--layers", "48", "--hidden", "6144", "--heads", "48", "--nodes", "4", "--tp", "4"),
        ("diff", "gpt_13b", "gpt_70b"),
        ("completion", "bash"),
    ],
    ids=lambda a: " ".join(a),
)
def test_fast_verbs_import_nothing_heavy(args):
    probe = imported(*args)
    assert probe["heavy"] == [], f"`nemo-recipes {' '.join(args)}` imported {probe['heavy']}"


def test_the_probe_sees_a_heavy_import_when_there_is_one(tmp_path):
    # --plot is the one fast-verb option that needs matplotlib: the probe must notice it (else the test above
    # could never fail).
    probe = imported("plan", "gpt_1_3b", "--plot", str(tmp_path / "p.png"))
    assert probe["code"] == 0 and "matplotlib" in probe["heavy"]
