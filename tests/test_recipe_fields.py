"""Tier (a): the table of recipe fields (`recipe_fields`), without NeMo: one entry per RecipeSpec field, each with a
bound or a type that checks it, a help, a source (or no default: its rows give it) and a NeMo path (or the reason it
has none); and the checks of `recipe_checks` are the table's bounds."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from nemo_recipes import catalog
from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.errors import InvalidInputError
from nemo_recipes.recipe_fields import FIELDS, RECIPE_FIELDS, SECTIONS, fields_in

HINTS = typing.get_type_hints(RecipeSpec)


def _checked_by_type(hint) -> bool:
    """Whether the type alone checks a value fully: a choice, a flag, a name or path, a list of them."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) is typing.Union else []
    hint = args[0] if len(args) == 1 else hint
    return typing.get_origin(hint) in (typing.Literal, tuple) or hint in (bool, str)


def test_every_spec_field_has_exactly_one_entry_in_spec_order():
    names = [f.name for f in RECIPE_FIELDS]
    assert names == [f.name for f in dataclasses.fields(RecipeSpec)]
    assert len(FIELDS) == len(names)


@pytest.mark.parametrize("entry", RECIPE_FIELDS, ids=lambda f: f.name)
def test_each_entry_declares_bound_help_source_and_nemo_path(entry):
    assert entry.section in SECTIONS
    assert entry.help.strip() and entry.help == entry.help.strip()
    # A bound where the type alone does not check the value (a number), the type where it does.
    assert entry.limits or _checked_by_type(HINTS[entry.name]), f"{entry.name}: a number without bounds"
    for limit in entry.limits:
        assert limit.why.endswith(".") and limit.fix.format(name=entry.name).endswith(".")
    # A source where the field has a default; without one, every row's value has its family's source.
    has_default = next(f for f in dataclasses.fields(RecipeSpec) if f.name == entry.name).default is not (
        dataclasses.MISSING
    )
    if has_default:
        assert entry.source
    elif entry.section != "row":
        assert entry.source is None
        for spec in RECIPES.values():
            assert catalog.source(spec, entry.name), (spec.name, entry.name)
    # A NeMo path, or the reason there is none; a value written but not read back says why.
    assert bool(entry.nemo) != bool(entry.not_in_nemo)
    assert all(path.split(".")[0] in ("model", "trainer", "optim", "data", "log", "resume") for path in entry.nemo)
    assert entry.not_read_back is None or entry.nemo


def test_catalog_sources_are_the_table_and_the_rows():
    assert {k: v for k, v in catalog.SOURCES.items() if k in FIELDS and FIELDS[k].source} == {
        f.name: f.source for f in RECIPE_FIELDS if f.source
    }
    assert set(catalog.SOURCES) == {f.name for f in RECIPE_FIELDS if f.section != "row"}


def test_the_judged_sections_list_their_fields_with_nemo_paths():
    judged = fields_in("model", "precision", "optimizer")
    assert {"num_layers", "activation", "precision", "max_lr", "adam_eps", "distributed_optimizer"} <= {
        f.name for f in judged
    }
    assert all(f.nemo for f in judged)
    assert FIELDS["num_layers"].nemo == ("model.config.num_layers",)
    assert FIELDS["max_lr"].nemo == ("optim.config.lr",)
    assert FIELDS["tensor_parallel"].nemo == ("trainer.strategy.tensor_model_parallel_size",)


def _beyond(limit, integer: bool):
    """A value just outside `limit`."""
    step = 1 if integer else 1e-9 * max(1.0, abs(limit.value))
    return {">=": limit.value - step, ">": limit.value, "<=": limit.value + step, "<": limit.value}[limit.op]


CASES = [
    pytest.param(entry, limit, id=f"{entry.name}{limit.op}{limit.value}")
    for entry in RECIPE_FIELDS
    for limit in entry.limits
]


@pytest.mark.parametrize("entry,limit", CASES)
def test_recipe_checks_refuse_a_value_beyond_each_bound_of_the_table(entry, limit):
    """The checks are the table's: a value just beyond each declared limit is refused with that limit's words."""
    integer = HINTS[entry.name] in (int, typing.Optional[int])
    value = _beyond(limit, integer)
    value = int(value) if integer else float(value)
    with pytest.raises(InvalidInputError) as raised:
        RECIPES["gpt_7b"].replace(**{entry.name: value})
    problems = [p for p in raised.value.problems if p.field == entry.name]
    assert [(p.message, p.fix) for p in problems] == [(limit.why, limit.fix.format(name=entry.name))]
    # ... and a value on the limit itself (where the limit includes it) passes that check.
    if limit.op in (">=", "<="):
        try:
            RECIPES["gpt_7b"].replace(**{entry.name: int(limit.value) if integer else float(limit.value)})
        except InvalidInputError as error:
            assert limit.why not in [p.message for p in error.problems if p.field == entry.name]
