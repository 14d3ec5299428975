"""The package's records are the standard library's frozen dataclasses: compared and hashed by their fields, shown
with them, immutable, and read by `dataclasses.fields`, `replace` and `asdict` like any other."""

from __future__ import annotations

import dataclasses

import pytest

from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.errors import Problem
from nemo_recipes.plan.hardware import GPUS, Cluster
from nemo_recipes.plan.throughput import CONSTANTS


def test_the_package_records_compare_and_hash_by_their_fields():
    spec = RECIPES["gpt_7b"]
    assert spec == spec.replace(tensor_parallel=1) and spec != spec.replace(tensor_parallel=2)
    assert hash(spec) == hash(spec.replace()) and repr(spec).startswith("RecipeSpec(name='gpt_7b', size_label='7B'")
    assert {GPUS["h100-80gb"], GPUS["h100-80gb"]} == {GPUS["h100-80gb"]}
    problem = Problem("f", 1, "why", "fix")
    assert repr(problem) == "Problem(field='f', value=1, message='why', fix='fix', severity='error')"
    with pytest.raises(TypeError, match="missing 2 required"):
        Problem("f", 1)


def test_the_records_are_frozen_standard_dataclasses():
    spec = RECIPES["gpt_7b"]
    for record in (spec, Problem("f", 1, "why", "fix"), GPUS["h100-80gb"], Cluster.of(1, 8, "h100"), CONSTANTS):
        assert dataclasses.is_dataclass(record)
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.name = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional"):
        RecipeSpec(*dataclasses.astuple(spec))  # keyword-only: a row reads by its field names
    assert dataclasses.replace(spec, num_nodes=4) == spec.replace(num_nodes=4)
    assert dataclasses.asdict(CONSTANTS) == {f.name: getattr(CONSTANTS, f.name) for f in dataclasses.fields(CONSTANTS)}
