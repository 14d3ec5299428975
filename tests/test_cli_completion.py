"""`nemo-recipes completion`: the bash script, sourced in a real bash, completes verbs, recipes, GPUs and options."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from _cli import cli

from nemo_recipes.catalog import RECIPES
from nemo_recipes.plan.hardware import GPUS

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    result = cli("completion", "bash")
    assert result.returncode == 0
    path = tmp_path_factory.mktemp("completion") / "nemo-recipes.bash"
    path.write_text(result.stdout)
    return path


def complete(script, line: str) -> list[str]:
    """What Tab offers after `line` (the last word is the one being completed)."""
    words = line.split(" ")
    program = (
        f'source "{script}"; COMP_WORDS=({" ".join(repr(w) for w in words)}); '
        f"COMP_CWORD={len(words) - 1}; _nemo_recipes; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    result = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return [w for w in result.stdout.splitlines() if w]


def test_completes_verbs(script):
    assert complete(script, "nemo-recipes ") == [
        "ls",
        "show",
        "plan",
        "diff",
        "export",
        "launch",
        "smoke",
        "watch",
        "hf",
        "data",
        "completion",
        "--help",
        "--version",
    ]
    assert complete(script, "nemo-recipes sh") == ["show"]


def test_completes_recipe_names(script):
    assert complete(script, "nemo-recipes show ") == list(RECIPES)
    assert complete(script, "nemo-recipes plan gpt_1") == ["gpt_1_3b", "gpt_13b", "gpt_175b"]


def test_completes_gpus_formats_and_options(script):
    assert complete(script, "nemo-recipes plan gpt_70b --gpu ") == list(GPUS)
    assert complete(script, "nemo-recipes export gpt_70b --format ") == ["yaml", "json", "toml"]
    assert "--gpus-per-node" in complete(script, "nemo-recipes plan gpt_70b --gp")
    assert complete(script, "nemo-recipes ls --n") == ["--names"]


def test_zsh_and_fish_scripts_name_the_same_recipes():
    zsh = cli("completion", "zsh").stdout
    assert zsh.startswith("#compdef nemo-recipes\n") and "bashcompinit" in zsh and " ".join(RECIPES) in zsh
    fish = cli("completion", "fish").stdout
    assert f"-a '{' '.join(RECIPES)}'" in fish and "-l gpu -x -a" in fish


def test_completion_json_lists_what_can_be_completed():
    data = json.loads(cli("completion", "bash", "--json").stdout)
    assert list(data) == ["shell", "verbs", "recipes", "gpus", "options", "values"]
    assert data["recipes"] == list(RECIPES)
    assert data["values"]["--format"] == ["yaml", "json", "toml"]
