"""`frozen_dataclass` behaves as `dataclass(frozen=True)`: the same `__init__` (signature, defaults, factories,
`__post_init__`), equality, hash, repr, immutability and fields, on classes with every kind of field, and on the
package's own classes."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import pytest

from nemo_recipes import frozen_dataclass as ours
from nemo_recipes.catalog import RECIPES
from nemo_recipes.errors import Problem
from nemo_recipes.frozen_dataclass import frozen_dataclass
from nemo_recipes.plan.hardware import GPUS


def _body(doc: bool = True) -> dict[str, Any]:
    """A class with a required, a plain, a hidden, an uncompared, an unhashed, a factory, an outside-__init__ and a
    keyword-only field; `__post_init__` records that it ran through object.__setattr__ as frozen classes must."""

    def __post_init__(self: Any) -> None:
        object.__setattr__(self, "posted", (self.a, len(self.made)))

    annotations = {"a": "int", "b": "Any", "hidden": "int", "loose": "float", "extra": "Optional[int]"}
    annotations.update(made="list", fixed="dict", _=KW_ONLY, key="str", keyed="list")
    return {
        "__annotations__": annotations,
        "b": None,
        "hidden": field(default=0, repr=False),
        "loose": field(default=0.0, compare=False),
        "extra": field(default=None, hash=False),
        "made": field(default_factory=list, hash=False),
        "fixed": field(default_factory=dict, init=False, hash=False),
        "key": "k",
        "keyed": field(default_factory=lambda: [1], hash=False),
        "__post_init__": __post_init__,
        "__module__": __name__,
        **({"__doc__": "A shape."} if doc else {}),
    }


def _pair(kw_only: bool = False, doc: bool = True) -> tuple[type, type]:
    return (
        dataclass(frozen=True, kw_only=kw_only)(type("Shape", (), _body(doc))),
        frozen_dataclass(kw_only=kw_only)(type("Shape", (), _body(doc))),
    )


@pytest.mark.parametrize("kw_only", [False, True])
def test_same_behaviour_as_the_standard_frozen_dataclass(kw_only):
    standard_cls, ours_cls = _pair(kw_only)
    assert [f.name for f in dataclasses.fields(ours_cls)] == [f.name for f in dataclasses.fields(standard_cls)]
    assert str(inspect.signature(ours_cls)) == str(inspect.signature(standard_cls))  # <factory>: each its own
    assert ours_cls.__match_args__ == standard_cls.__match_args__
    assert ours_cls.__dataclass_params__.frozen and ours_cls.__dataclass_params__.eq
    standard, ours = (
        [
            cls(a=1, b=(2, "x"), hidden=3, loose=0.5, extra=None),
            cls(a=1, b=(2, "x"), hidden=3, loose=0.5, extra=7, key="z", keyed=[2]),
            cls(a=1, b=(2, "x"), loose=9.0, made=[5]),
        ]
        for cls in (standard_cls, ours_cls)
    )
    for mine, theirs in zip(ours, standard, strict=True):
        assert repr(mine) == repr(theirs)
        assert "hidden" not in repr(mine)
        assert hash(mine) == hash(theirs)
        assert mine.posted == theirs.posted and mine.fixed == theirs.fixed == {}
        assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)
        for frozen in (mine, theirs):
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'a'"):
                frozen.a = 2
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'b'"):
                del frozen.b
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
                frozen.other = 1
    assert repr(ours[0]) == "Shape(a=1, b=(2, 'x'), loose=0.5, extra=None, made=[], fixed={}, key='k', keyed=[1])"
    assert ours[0].made is not ours_cls(a=1).made and ours[0].fixed is not ours[1].fixed  # a new one each
    assert [[x == y for y in ours] for x in ours] == [[x == y for y in standard] for x in standard]
    assert ours[0] != dataclasses.replace(ours[0], extra=7)  # `extra` is compared, though not hashed
    assert ours[0] == dataclasses.replace(ours[0], loose=1.5)  # `loose` is not compared
    assert ours[0] != standard[0] and ours[0].__eq__(object()) is NotImplemented
    for cls in (standard_cls, ours_cls):
        with pytest.raises(TypeError, match="missing 1 required"):
            cls()
        with pytest.raises(TypeError, match="unexpected keyword argument 'fixed'"):
            cls(a=1, fixed={})
        if not kw_only:
            assert cls(1, 2).b == 2
            with pytest.raises(TypeError, match="positional"):
                cls(1, 2, 3, 4.0, 5, [], "key")


def test_a_subclass_may_set_its_own_attributes_and_the_docstring_is_the_signature():
    standard_cls, ours_cls = _pair(doc=False)
    assert ours_cls.__doc__ == standard_cls.__doc__ and ours_cls.__doc__.startswith("Shape(a: 'int', b: 'Any' = None")
    for cls in (standard_cls, ours_cls):
        child = type("Child", (cls,), {})(a=1)
        child.note = "set"  # not a field, not the frozen class itself
        assert child.note == "set"
        with pytest.raises(dataclasses.FrozenInstanceError):
            child.a = 2
    frozen_child = dataclass(frozen=True)(type("Child", (ours_cls,), {"__annotations__": {"c": "int"}, "c": 0}))
    assert frozen_child(a=1, c=2).c == 2


def test_recursive_repr_and_one_or_no_field():
    standard, ours = _pair()
    theirs, mine = standard(a=1, b=[]), ours(a=1, b=[])
    theirs.b.append(theirs)
    mine.b.append(mine)
    assert repr(mine) == repr(theirs) and repr(mine).startswith("Shape(a=1, b=[...], loose=0.0")
    for unhashable in (mine, theirs):  # a list in a hashed field
        with pytest.raises(TypeError, match="unhashable type: 'list'"):
            hash(unhashable)

    one_standard = dataclass(frozen=True)(type("One", (), {"__annotations__": {"x": "int"}, "__doc__": "."}))
    one = frozen_dataclass(type("One", (), {"__annotations__": {"x": "int"}, "__doc__": "."}))
    none = frozen_dataclass(type("Empty", (), {"__doc__": "."}))
    assert hash(one(4)) == hash(one_standard(4)) and one(4) == one(4) != one(5)
    assert repr(one(4)) == repr(one_standard(4)) == "One(x=4)"
    assert none() == none() and repr(none()) == "Empty()" and hash(none()) == hash(())


def test_refuses_what_it_does_not_build():
    with pytest.raises(TypeError, match="__eq__"):
        frozen_dataclass(type("Own", (), {"__eq__": lambda self, other: True}))
    with pytest.raises(TypeError, match="InitVar"):
        frozen_dataclass(type("Init", (), {"__annotations__": {"x": dataclasses.InitVar[int]}}))
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        frozen_dataclass(type("Order", (), {"__annotations__": {"x": "int", "y": "int"}, "x": 0}))


def test_the_package_classes_compare_and_hash_by_their_fields():
    spec = RECIPES["gpt_7b"]
    assert spec == spec.replace(tensor_parallel=1) and spec != spec.replace(tensor_parallel=2)
    assert hash(spec) == hash(spec.replace()) and repr(spec).startswith("RecipeSpec(name='gpt_7b', size_label='7B'")
    assert {GPUS["h100-80gb"], GPUS["h100-80gb"]} == {GPUS["h100-80gb"]}
    problem = Problem("f", 1, "why", "fix")
    assert repr(problem) == "Problem(field='f', value=1, message='why', fix='fix', severity='error')"
    with pytest.raises(TypeError, match="missing 2 required"):
        Problem("f", 1)


def test_its_own_fields_replace_and_asdict_give_what_the_standard_ones_give():
    standard_cls, ours_cls = _pair()
    theirs, mine = standard_cls(a=1, b=(2, [3], {"k": [4]})), ours_cls(a=1, b=(2, [3], {"k": [4]}))

    def described(f, missing):
        return (f.name, f.type, f.default is missing, f.init, f.repr, f.hash, f.compare, f.kw_only)

    assert [described(f, ours.MISSING) for f in ours.fields(mine)] == [
        described(f, dataclasses.MISSING) for f in dataclasses.fields(theirs)
    ]
    assert repr(ours.replace(mine, extra=7, made=[1])) == repr(dataclasses.replace(theirs, extra=7, made=[1]))
    assert ours.asdict(mine) == dataclasses.asdict(theirs)
    assert ours.asdict(mine)["b"][1] is not mine.b[1]  # copied, as the standard one copies
    for replace in (ours.replace, dataclasses.replace):
        with pytest.raises(ValueError, match="init=False"):
            replace(mine, fixed={})
    with pytest.raises(TypeError, match="frozen_dataclass"):
        ours.fields(object())
