"""`nemo-recipes ls` and `show`, run as the installed console script."""

from __future__ import annotations

import json

from _cli import cli

from nemo_recipes.catalog import DERIVED_SOURCES, RECIPES, SOURCES, field_names, fields_of
from nemo_recipes.catalog import source as source_of


def test_ls_prints_one_row_per_recipe_with_the_seed_columns():
    result = cli("ls")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "recipe",
        "parameters",
        "active",
        "layers",
        "hidden",
        "heads",
        "TP",
        "PP",
        "CP",
        "micro",
        "BS",
        "global",
        "BS",
        "seq",
        "experts",
        "default",
        "GPUs",
    ]
    assert [line.split()[0] for line in lines[1:]] == list(RECIPES)
    # The seed's 70B row, and its derived size and default cluster.
    assert lines[4].split() == [
        "gpt_70b",
        "64.9B",
        "64.9B",
        "80",
        "8192",
        "64",
        "8",
        "4",
        "1",
        "1",
        "1024",
        "4096",
        "-",
        "4",
        "x",
        "8",
        "h100-80gb",
    ]
    # A Mixture of Experts: its active count and its experts' routing and layout.
    mixtral = next(line for line in lines if line.startswith("mixtral_moe_8x7b "))
    assert mixtral.split()[1:3] == ["46.7B", "12.9B"] and "top-2 of 8, EP 8 x ETP 1" in mixtral


def test_ls_names_is_one_name_per_line():
    assert cli("ls", "--names").stdout == "".join(f"{name}\n" for name in RECIPES)


def test_ls_json_has_stable_keys_and_catalog_values():
    data = json.loads(cli("ls", "--json").stdout)
    assert list(data) == ["recipes"]
    first = data["recipes"][0]
    assert list(first) == [
        "name",
        "size_label",
        "num_parameters",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "tensor_parallel",
        "pipeline_parallel",
        "context_parallel",
        "micro_batch_size",
        "global_batch_size",
        "seq_length",
        "num_nodes",
        "num_gpus_per_node",
        "default_gpu",
    ]
    for row in data["recipes"]:
        spec = RECIPES[row["name"]]
        assert row["num_parameters"] == spec.num_parameters
        assert row["global_batch_size"] == spec.global_batch_size
        moe = spec.num_moe_experts is not None  # a Mixture of Experts adds its active count and expert layout
        assert ("active_parameters" in row) == moe and row.get("active_parameters", 0) in (0, spec.active_parameters)
    qwen3_moe = next(row for row in data["recipes"] if row["name"] == "qwen3_moe_30b_a3b")
    assert [qwen3_moe[k] for k in ("num_moe_experts", "moe_router_topk", "expert_parallel")] == [128, 8, 4]


def test_show_lists_every_field_and_derived_value_with_its_source():
    result = cli("show", "gpt_13b")
    assert result.returncode == 0 and result.stderr == ""
    out = result.stdout
    assert out.splitlines()[0] == (
        "gpt_13b: GPT 13B, 12.9B parameters (12,864,768,000), default cluster 1 x 8 h100-80gb"
    )
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line and not line.startswith(" ")}
    for name in field_names():
        if name not in ("name", "size_label"):
            # Expert fields (MoE rows only) and multi-latent attention's (MLA rows only) are not shown.
            assert (name in rows) == (name in fields_of(RECIPES["gpt_13b"])), name
    assert "kv_lora_rank" not in rows and "num_moe_experts" not in rows
    for name in DERIVED_SOURCES:
        assert name in rows, name
    assert rows["tensor_parallel"].split()[:2] == ["tensor_parallel", "2"]
    assert rows["tensor_parallel"].split()[2:] == ["same", "as", "num_layers"]
    assert "seed table (megatron-recipes.txt" in rows["num_layers"]
    assert rows["grad_accumulation_steps"].split()[:2] == ["grad_accumulation_steps", "128"]


def test_show_of_a_mixture_of_experts_prints_both_counts_the_expert_layout_and_its_fields():
    out = cli("show", "qwen3_moe_30b_a3b").stdout.splitlines()
    assert out[0].startswith("qwen3_moe_30b_a3b: Qwen3MoE 30B-A3B, 30.5B parameters (30,532,122,624)")
    assert out[1] == (
        "  Mixture of Experts: 3.35B active parameters a token (3,353,032,704), top-8 of 128 experts; EP 4 x ETP 1 "
        "(32 experts per GPU), expert-data-parallel 1"
    )
    rows = {line.split()[0]: line.split()[1] for line in out[3:] if line and not line.startswith(" ")}
    assert (rows["num_moe_experts"], rows["moe_router_topk"], rows["moe_ffn_hidden_size"]) == ("128", "8", "768")
    assert (rows["expert_parallel"], rows["expert_tensor_parallel"], rows["moe_grouped_gemm"]) == ("4", "1", "true")


def test_show_json_matches_the_catalog():
    data = json.loads(cli("show", "gpt_175b", "--json").stdout)
    assert list(data) == ["recipe", "size_label", "overrides", "fields", "derived"]
    assert data["overrides"] == {}
    assert data["fields"]["max_lr"] == {"value": 6e-05, "source": SOURCES["max_lr"], "overridden": False}
    assert data["derived"]["data_parallel_size"] == {"value": 1, "how": DERIVED_SOURCES["data_parallel_size"]}
    assert data["derived"]["num_parameters"]["value"] == RECIPES["gpt_175b"].num_parameters


def test_show_applies_typed_overrides_and_marks_them():
    result = cli(
        "show",
        "gpt_70b",
        "tensor_parallel=4",
        "train_tokens=1T",
        "sequence_parallel=none",
        "data_paths=/data/a,/data/b",
        "--json",
    )
    data = json.loads(result.stdout)
    assert data["overrides"] == {
        "tensor_parallel": 4,
        "train_tokens": 10**12,
        "sequence_parallel": None,
        "data_paths": ["/data/a", "/data/b"],
    }
    assert data["fields"]["tensor_parallel"] == {"value": 4, "source": "override (recipe: 8)", "overridden": True}
    assert data["derived"]["train_steps"]["value"] == 238419  # 1e12 / (1024 x 4096), rounded up
    text = cli("show", "gpt_70b", "tensor_parallel=4").stdout
    assert "* tensor_parallel" in text and text.endswith("* overridden on the command line\n")


def test_show_prints_a_source_once_for_the_fields_it_covers():
    out = cli("show", "llama_70b").stdout
    spec = RECIPES["llama_70b"]
    shape_source = source_of(spec, "num_layers")
    assert source_of(spec, "hidden_size") == shape_source  # one source covers the whole shape
    text = " ".join(out.split())  # the source column is folded over several lines
    assert text.count(" ".join(shape_source.split())) == 1
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line and not line.startswith(" ")}
    assert rows["hidden_size"].split()[1:] == ["8192", "same", "as", "num_layers"]
    assert rows["num_attention_heads"].split()[2:] == ["same", "as", "num_layers"]
