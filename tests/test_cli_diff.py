"""`nemo-recipes diff` between recipes (catalog only) and between exported files (no NeMo needed)."""

from __future__ import annotations

import json

import pytest
from _cli import cli


def test_diff_of_two_recipes_lists_fields_then_derived_values():
    result = cli("diff", "gpt_13b", "gpt_70b")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["field", "gpt_13b", "gpt_70b"]
    assert lines[1].split() == ["size_label", "13B", "70B"]
    assert ["tensor_parallel", "2", "8"] in [line.split() for line in lines]
    assert ["data_parallel_size", "(derived)", "4", "1"] in [line.split() for line in lines]
    assert lines[-1] == "19 differ, 52 the same"


def test_diff_json_has_stable_keys():
    data = json.loads(cli("diff", "gpt_1_3b", "gpt_7b", "--json").stdout)
    assert list(data) == ["a", "b", "kind", "differences", "same"]
    assert data["kind"] == "recipes"
    assert {"key": "recompute", "a": "selective", "b": "full", "derived": False} in data["differences"]


def test_a_recipe_has_no_difference_with_itself():
    result = cli("diff", "gpt_7b", "gpt_7b")
    assert result.stdout == "gpt_7b and gpt_7b are the same (71 values compared)\n"


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".toml"])
def test_diff_of_two_files_compares_dotted_paths(tmp_path, suffix):
    texts = {
        ".yaml": (
            "trainer:\n  num_nodes: 4\n  strategy:\n    tensor_model_parallel_size: 8\n",
            "trainer:\n  num_nodes: 8\n  strategy:\n    tensor_model_parallel_size: 8\n",
        ),
        ".json": (
            '{"trainer": {"num_nodes": 4, "strategy": {"tensor_model_parallel_size": 8}}}',
            '{"trainer": {"num_nodes": 8, "strategy": {"tensor_model_parallel_size": 8}}}',
        ),
        ".toml": (
            "[trainer]\nnum_nodes = 4\n[trainer.strategy]\ntensor_model_parallel_size = 8\n",
            "[trainer]\nnum_nodes = 8\n[trainer.strategy]\ntensor_model_parallel_size = 8\n",
        ),
    }[suffix]
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    a.write_text(texts[0])
    b.write_text(texts[1])
    data = json.loads(cli("diff", str(a), str(b), "--json").stdout)
    assert data["kind"] == "config"
    assert data["differences"] == [{"key": "trainer.num_nodes", "a": 4, "b": 8, "derived": False}]
    assert data["same"] == 1


def test_diff_with_a_missing_file_says_so(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    result = cli("diff", "gpt_70b", missing)
    assert result.returncode == 2
    assert result.stderr == (
        f"nemo-recipes diff: error: file={missing!r}: does not exist. Fix: give a recipe name (gpt_1_3b, gpt_7b, "
        "gpt_13b, gpt_70b, gpt_175b, llama_8b, llama_70b, llama_405b, qwen3_dense_8b, qwen3_dense_32b, "
        "mixtral_moe_8x7b, mixtral_moe_8x22b, "
        "qwen3_moe_30b_a3b, qwen3_moe_235b_a22b) or an "
        "existing file written by `nemo-recipes export`.\n"
    )
