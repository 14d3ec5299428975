"""The GPU catalog and clusters: names, aliases, errors that list the known GPUs, user-described GPUs."""

from __future__ import annotations

import dataclasses

import pytest

from nemo_recipes.catalog import RECIPES
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan import GPU, GPUS, Cluster, estimate_memory, get_gpu


def test_the_issue_names_are_the_catalog_names():
    # Issue 45 adds the Blackwell Ultra GPUs the published MoE tables ran on.
    assert set(GPUS) == {"a100-40gb", "a100-80gb", "h100-80gb", "h200", "b200", "gb200", "b300", "gb300"}


@pytest.mark.parametrize(
    "alias, name",
    [
        ("h100", "h100-80gb"),
        ("A100", "a100-80gb"),
        ("H100_SXM", "h100-80gb"),
        ("gb200-nvl72", "gb200"),
        ("h200", "h200"),
    ],
)
def test_aliases_and_case(alias, name):
    assert get_gpu(alias) is GPUS[name]


def test_unknown_gpu_lists_the_known_ones_and_suggests_a_close_name():
    with pytest.raises(InvalidRecipeError) as raised:
        get_gpu("h300")
    problem = raised.value.problems[0]
    assert problem.field == "gpu" and all(name in problem.fix for name in GPUS)
    assert "did you mean" in problem.message


def test_fp8_support_follows_the_fp8_peak():
    assert not GPUS["a100-80gb"].supports_fp8 and not GPUS["a100-40gb"].supports_fp8
    assert all(GPUS[n].supports_fp8 for n in ("h100-80gb", "h200", "b200", "gb200"))


def test_a_user_described_gpu_plans_like_a_known_one():
    mine = GPU(
        name="my-gpu",
        memory_gib=96.0,
        bf16_tflops=800.0,
        fp8_tflops=None,
        hbm_tb_s=4.0,
        nvlink_gb_s=400.0,
        network_gb_s=50.0,
        nvlink_domain=8,
    )
    assert get_gpu(mine) is mine
    memory = estimate_memory(RECIPES["gpt_7b"], Cluster.of(1, 8, mine))
    assert memory.capacity == 96.0


def test_a_gpu_power_limit_must_be_a_positive_number_of_watts():
    with pytest.raises(InvalidRecipeError) as raised:
        dataclasses.replace(get_gpu("h100"), name="bad-power", tdp_w=-700.0)
    assert [(p.field, p.value) for p in raised.value.problems] == [("tdp_w", -700.0)]
    assert get_gpu("b200").tdp_w == 1000.0 and get_gpu("gb200").tdp_w == 1200.0


def test_cluster_of_reports_every_bad_size_at_once():
    with pytest.raises(InvalidRecipeError) as raised:
        Cluster.of(0, -1, "h100")
    assert {p.field for p in raised.value.problems} == {"nodes", "gpus_per_node"}
    assert Cluster.of(4, 8, "h100").world_size == 32
