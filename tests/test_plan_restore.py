"""`restore_from=PATH` is checked when the run is planned, before any process starts: a path that is missing, not a
checkpoint, a run directory, a torn checkpoint or a checkpoint of another shape is refused by `plan` and `smoke`
(exit 2, field, value, fix), reading the checkpoint's index without importing torch. The checkpoint is a real one:
`hf import` of a tiny GPT-2 model, the shape of `gpt_1_3b` given by the fields the import prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import cli

pytestmark = [pytest.mark.nemo]

GPT2 = dict(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new")


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, list[str]]:
    """(an imported checkpoint, the key=value items that give its shape)."""
    torch = pytest.importorskip("torch")
    from transformers import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("restore")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(**GPT2)).to(torch.bfloat16).save_pretrained(root / "hf")
    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.conversion.hf_import import import_hf

    report = import_hf(str(root / "hf"), get_recipe("gpt_1_3b"), str(root / "ckpt"))
    items = report.continue_with().split()
    return root / "ckpt", [i for i in items if not i.startswith("restore_from=")]


def _plan(*items: str) -> subprocess.CompletedProcess:
    return cli("plan", "gpt_1_3b", *items, "--json", timeout=120)


def _refused(result: subprocess.CompletedProcess, value: str, why: str) -> str:
    assert result.returncode == 2, result.stderr
    problems = [p for p in json.loads(result.stdout)["problems"] if p["field"] == "restore_from"]
    assert len(problems) == 1 and problems[0]["severity"] == "error", problems
    assert value in str(problems[0]["value"]) and why in problems[0]["message"] and problems[0]["fix"], problems[0]
    return problems[0]["fix"]


def test_the_imported_checkpoint_of_the_same_shape_plans(imported):
    ckpt, shape = imported
    result = _plan(*shape, f"restore_from={ckpt}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert not [p for p in json.loads(result.stdout)["problems"] if p["field"] == "restore_from"]


def test_a_missing_path_is_refused(tmp_path):
    fix = _refused(_plan(f"restore_from={tmp_path / 'nope'}"), "nope", "does not exist")
    assert "hf import --out" in fix


def test_a_directory_that_is_not_a_checkpoint_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    _refused(_plan(f"restore_from={tmp_path}"), str(tmp_path), "holds no Megatron checkpoint")


def test_a_run_directory_is_refused_naming_its_checkpoint(imported, tmp_path):
    import shutil

    ckpt, shape = imported
    shutil.copytree(ckpt, tmp_path / "run" / "checkpoints" / "step=4-last")
    fix = _refused(_plan(*shape, f"restore_from={tmp_path / 'run'}"), "run", "not one checkpoint")
    assert f"restore_from={tmp_path / 'run' / 'checkpoints' / 'step=4-last'}" in fix


def test_a_torn_checkpoint_is_refused(imported, tmp_path):
    import shutil

    ckpt, shape = imported
    shutil.copytree(ckpt, tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "weights"
    (weights / ".metadata").rename(weights / "metadata.saved")
    _refused(_plan(*shape, f"restore_from={tmp_path / 'ckpt'}"), "ckpt", "has no index (.metadata)")
    (weights / "metadata.saved").rename(weights / ".metadata")
    part = sorted(weights.glob("*.distcp"))[0]
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    _refused(_plan(*shape, f"restore_from={tmp_path / 'ckpt'}"), part.name, "torn or truncated")


@pytest.mark.parametrize("where", ["index", "common.pt", "object"])
def test_a_checkpoint_whose_pickles_would_run_code_is_refused_and_runs_nothing(where, imported, tmp_path):
    """Issue 47: each pickle NeMo's restore would load (the index, common.pt, an object among the tensors) is read
    through the restricted reader first: one that names a callable no checkpoint holds is refused, and not run."""
    import shutil

    from _pickles import PLANTS

    ckpt, shape = imported
    shutil.copytree(ckpt, tmp_path / "ckpt")
    planted = PLANTS[where](tmp_path / "ckpt" / "weights", tmp_path / "ran", "subprocess.call")
    result = _plan(*shape, f"restore_from={tmp_path / 'ckpt'}")
    fix = _refused(result, str(planted), "names subprocess.call, which no checkpoint holds")
    assert "a checkpoint you trust" in fix and "Traceback" not in result.stderr
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_of_another_shape_is_refused_with_the_shape_it_needs(imported):
    ckpt, shape = imported
    fix = _refused(_plan(f"restore_from={ckpt}"), str(ckpt), "another shape than the recipe's")
    assert " ".join(shape) in fix  # the fields the import printed


def test_smoke_refuses_before_any_process_starts(imported, tmp_path):
    ckpt, _ = imported
    # (smoke's scaled-down gpt_1_3b is the imported shape itself; four layers are not)
    run = tmp_path / "run"
    result = cli("smoke", "gpt_1_3b", "num_layers=4", f"restore_from={ckpt}", "--dir", str(run), timeout=120)
    assert result.returncode == 2, result.stderr
    assert "restore_from=" in result.stderr and "another shape than the recipe's" in result.stderr
    assert "Fix:" in result.stderr and "Traceback" not in result.stderr
    assert not (run / "metrics.jsonl").exists()  # no training phase began


def test_the_index_is_read_without_torch(imported):
    ckpt, shape = imported
    code = (
        "import sys; from nemo_recipes.catalog import get_recipe; from nemo_recipes.overrides import apply_overrides;"
        "from nemo_recipes.plan.restore import restore_problems;"
        f"spec, _ = apply_overrides(get_recipe('gpt_1_3b'), {[*shape, f'restore_from={ckpt}']!r});"
        "assert restore_problems(spec) == [], restore_problems(spec);"
        "assert restore_problems(spec.replace(hidden_size=128)), 'another shape';"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'nemo')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_launch_plugin_refuses_it_before_submitting(tmp_path):
    """`launch` and NeMo-Run's own CLI attach the recipe to the executor through RecipePlugin, which reads
    restore_from back from the built recipe (NeMo's RestoreConfig) and checks it as plan does."""
    import nemo_recipes
    from nemo_recipes.errors import ERROR, InvalidRecipeError
    from nemo_recipes.executors import RecipePlugin, local

    recipe = nemo_recipes.gpt_1_3b(restore_from=str(tmp_path / "gone"))
    with pytest.raises(InvalidRecipeError, match="not submitted") as error:
        RecipePlugin().setup(recipe, local(devices=8))
    found = [(p.field, p.value) for p in error.value.problems if p.severity == ERROR]
    assert found == [("restore_from", str(tmp_path / "gone"))]
