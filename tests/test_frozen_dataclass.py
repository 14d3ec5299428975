"""`frozen_dataclass` behaves as `dataclass(frozen=True)`: the same equality, hash, repr, immutability and fields, on
a class with excluded fields and a recursive value, and on the package's own classes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from nemo_recipes.catalog import RECIPES
from nemo_recipes.errors import Problem
from nemo_recipes.frozen_dataclass import frozen_dataclass
from nemo_recipes.plan.hardware import GPUS


def _pair(kw_only: bool = False) -> tuple[type, type]:
    def body() -> dict[str, Any]:
        return {
            "__annotations__": {"a": "int", "b": "Any", "hidden": "int", "loose": "float", "extra": "Optional[int]"},
            "hidden": field(default=0, repr=False),
            "loose": field(default=0.0, compare=False),
            "extra": field(default=None, hash=False),
            "__module__": __name__,
        }

    return (
        dataclass(frozen=True, kw_only=kw_only)(type("Shape", (), body())),
        frozen_dataclass(kw_only=kw_only)(type("Shape", (), body())),
    )


@pytest.mark.parametrize("kw_only", [False, True])
def test_same_behaviour_as_the_standard_frozen_dataclass(kw_only):
    for cls in _pair(kw_only):
        assert [f.name for f in dataclasses.fields(cls)] == ["a", "b", "hidden", "loose", "extra"]
    standard, ours = (
        [cls(a=1, b=(2, "x"), hidden=3, loose=0.5, extra=e) for e in (None, 7)] + [cls(a=1, b=(2, "x"), loose=9.0)]
        for cls in _pair(kw_only)
    )
    for mine, theirs in zip(ours, standard, strict=True):
        assert repr(mine) == repr(theirs)
        assert "hidden" not in repr(mine)
        assert hash(mine) == hash(theirs)
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'a'"):
            mine.a = 2  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del mine.b
    assert repr(ours[0]) == "Shape(a=1, b=(2, 'x'), loose=0.5, extra=None)"
    equal_ours = [[x == y for y in ours] for x in ours]
    assert equal_ours == [[x == y for y in standard] for x in standard]
    assert ours[0] != ours[1]  # `extra` is compared, though not hashed
    assert ours[0] == dataclasses.replace(ours[2], hidden=3)  # `loose` is not compared
    assert ours[0] != standard[0] and ours[0].__eq__(object()) is NotImplemented
    assert dataclasses.asdict(ours[1]) == dataclasses.asdict(standard[1])


def test_recursive_repr_and_one_or_no_field():
    standard, ours = _pair()
    theirs, mine = standard(a=1, b=[]), ours(a=1, b=[])
    theirs.b.append(theirs)
    mine.b.append(mine)
    assert repr(mine) == repr(theirs) == "Shape(a=1, b=[...], loose=0.0, extra=None)"

    one_standard = dataclass(frozen=True)(type("One", (), {"__annotations__": {"x": "int"}, "__doc__": "."}))
    one = frozen_dataclass(type("One", (), {"__annotations__": {"x": "int"}, "__doc__": "."}))
    none = frozen_dataclass(type("Empty", (), {"__doc__": "."}))
    assert hash(one(4)) == hash(one_standard(4)) and one(4) == one(4) != one(5)
    assert repr(one(4)) == repr(one_standard(4)) == "One(x=4)"
    assert none() == none() and repr(none()) == "Empty()" and hash(none()) == hash(())


def test_refuses_a_class_with_its_own_comparison():
    with pytest.raises(TypeError, match="__eq__"):
        frozen_dataclass(type("Own", (), {"__eq__": lambda self, other: True}))


def test_the_package_classes_compare_and_hash_by_their_fields():
    spec = RECIPES["gpt_7b"]
    assert spec == spec.replace(tensor_parallel=1) and spec != spec.replace(tensor_parallel=2)
    assert hash(spec) == hash(spec.replace()) and repr(spec).startswith("RecipeSpec(name='gpt_7b', size_label='7B'")
    assert {GPUS["h100-80gb"], GPUS["h100-80gb"]} == {GPUS["h100-80gb"]}
    problem = Problem("f", 1, "why", "fix")
    assert repr(problem) == "Problem(field='f', value=1, message='why', fix='fix', severity='error')"
