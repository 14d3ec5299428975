"""The one-call planner: validation, memory, throughput and time to train in one report."""

import pytest

from nemo_recipes.catalog import RECIPES
from nemo_recipes.plan import Cluster, assess
from nemo_recipes.plan.throughput import estimate_throughput


@pytest.mark.parametrize("name", list(RECIPES))
def test_defaults_get_throughput_and_time_to_train(name):
    spec = RECIPES[name]
    cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, spec.default_gpu)
    report = assess(spec, cluster)
    assert report.valid
    expected = estimate_throughput(spec, cluster)
    data = report.to_dict()
    assert data["throughput"]["step_time_s"] == pytest.approx(expected.step_time_s)
    assert 0 < data["throughput"]["mfu"] < 1
    seconds = spec.train_tokens / (expected.tokens_per_s_per_gpu * cluster.world_size)
    assert data["time_to_train"]["days"] == pytest.approx(seconds / 86400)
    assert data["time_to_train"]["gpu_hours"] == pytest.approx(seconds * cluster.world_size / 3600)


def test_token_budget_scales_time_to_train():
    spec = RECIPES["gpt_1_3b"]
    cluster = Cluster.of(1, 8, "h100")
    assert assess(spec, cluster, tokens=600e9).time_to_train["days"] == pytest.approx(
        2 * assess(spec, cluster).time_to_train["days"]
    )


def test_invalid_or_gpu_less_plans_carry_no_estimates():
    invalid = assess(RECIPES["gpt_7b"].replace(recompute="selective"), Cluster.of(1, 8, "h100"))
    assert not invalid.valid and invalid.throughput is None and invalid.time_to_train is None
    no_gpu = assess(RECIPES["gpt_7b"], Cluster.of(1, 8))
    assert no_gpu.valid and no_gpu.throughput is None and no_gpu.to_dict()["time_to_train"] is None
