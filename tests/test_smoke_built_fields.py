"""Issue 46, item 1: every field of the recipe's model, precision and optimizer sections is compared with the model
and optimizer Megatron built, or compared by another of the judge's checks, or explained (built_fields.py); a field
the table gains and the judge does not place fails here. The judge's line itself, from records (the training side
is proven by tests/test_smoke_built.py's planted norm eps)."""

from __future__ import annotations

from nemo_recipes.recipe_fields import fields_in
from nemo_recipes.smoke_training import built_fields
from nemo_recipes.smoke_training.built_fields import BUILT_FIELDS_CHECK, built_fields_check
from nemo_recipes.smoke_training.module_fields import MEASURES


def test_every_field_of_the_sections_is_compared_or_explained_once():
    names = [f.name for f in fields_in(*built_fields.SECTIONS)]
    assert built_fields.unplaced() == []
    placed = [*built_fields.MEASURED, *built_fields.ELSEWHERE, *built_fields.NOT_COMPARED]
    assert sorted(placed) == sorted(names)  # each once, and nothing the table does not hold
    assert set(MEASURES) == set(built_fields.MEASURED)  # a measure for every field said to be measured


def _records(fields_per_rank):
    return [{"event": "built", "phase": "train", "ranks": [{"fields": f} for f in fields_per_rank]}]


def _all():
    return {name: [1, 1] for name in built_fields.MEASURED}


def test_the_line_names_the_field_the_rank_and_both_values():
    good = _all()
    check = built_fields_check(_records([good, good]), ("train",))
    assert check.passed and check.name == BUILT_FIELDS_CHECK and "every rank (train: 2)" in check.detail, check
    bad = {**good, "norm_epsilon": [0.01, 1e-5]}
    check = built_fields_check(_records([good, bad]), ("train",))
    assert not check.passed and check.detail == "train rank 1: norm_epsilon 0.01 (recipe 1e-05)", check


def test_a_field_no_rank_shows_or_the_table_gains_fails(monkeypatch):
    partial = {k: v for k, v in _all().items() if k != "rotary_base"}
    check = built_fields_check(_records([partial]), ("train",))
    assert not check.passed and "rotary_base not shown by any rank's modules" in check.detail, check
    monkeypatch.delitem(built_fields.ELSEWHERE, "clip_grad")
    check = built_fields_check(_records([_all()]), ("train",))
    assert not check.passed and "clip_grad: neither compared nor explained" in check.detail, check
    monkeypatch.setitem(built_fields.NOT_COMPARED, "clip_grad", "a reason")
    check = built_fields_check(_records([_all()]), ("train",))
    assert check.passed and "not compared: clip_grad: a reason" in check.detail, check
