"""Nothing a user sees of the existing recipes changes when the code under them does (issue 44, item 5): `show
--json`, `plan --json`, `export` with its model config class, and the tensors `hf export` writes, compared byte for
byte with tests/golden/recipes/ (`UPDATE_SNAPSHOTS=1` rewrites them: accept only a difference you intend, and name
it in the commit)."""

from __future__ import annotations

import difflib
import os

import pytest
from _recipe_outputs import GOLDEN, export_outputs, fast_outputs, hf_outputs

from nemo_recipes.catalog import RECIPES

UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"
#: The recipes recorded: every row there was when the record was made (a new family's rows have tests of their own).
RECORDED = ["gpt_1_3b", "gpt_7b", "gpt_13b", "gpt_70b", "gpt_175b", "llama_8b", "llama_70b", "llama_405b"]


def _compare(found: dict[str, bytes]) -> None:
    differing = []
    for name, data in sorted(found.items()):
        path = GOLDEN / name
        if UPDATE:
            GOLDEN.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            continue
        assert path.exists(), f"no golden {path}; record it with UPDATE_SNAPSHOTS=1"
        if path.read_bytes() != data:
            diff = difflib.unified_diff(
                path.read_text().splitlines(), data.decode().splitlines(), str(path), "now", lineterm="", n=1
            )
            differing.append("\n".join(list(diff)[:40]))
    assert not differing, "outputs differ from tests/golden/recipes/:\n" + "\n".join(differing)


def test_every_recorded_recipe_is_still_in_the_catalog():
    assert set(RECORDED) <= set(RECIPES)


def test_show_and_plan_of_every_recipe_are_unchanged():
    _compare(fast_outputs(RECORDED))


@pytest.mark.nemo
def test_export_and_model_config_of_every_recipe_are_unchanged():
    _compare(export_outputs(RECORDED))


@pytest.mark.nemo
def test_hf_export_tensors_of_each_family_are_unchanged(tmp_path):
    pytest.importorskip("torch")
    from test_hf_import import _model

    _compare(hf_outputs(tmp_path, _model))
