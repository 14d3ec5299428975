"""`key=value` overrides on the command line, turned into typed values for `RecipeSpec.replace`.

Values are read by the field's type (so `tensor_parallel=4` is an int and `tokenizer_path=4` stays a string);
a value that cannot be read is passed on as text, so that `RecipeSpec.replace` reports it with the field, the
expected type and the fix, in the same words as every other invalid value. Unknown keys pass through the same way
and get the catalog's "did you mean".
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Sequence

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.cli._output import parse_count
from nemo_recipes.errors import InvalidRecipeError, Problem

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null", "~"}


def split_overrides(items: Sequence[str]) -> tuple[dict[str, str], list[Problem]]:
    """['tensor_parallel=4', 'oops'] -> ({'tensor_parallel': '4'}, [problem with 'oops'])."""
    raw: dict[str, str] = {}
    problems = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(Problem("override", item, "is not of the form key=value.",
                                    "write it as key=value, for example tensor_parallel=4."))
            continue
        raw[key] = value.strip()
    return raw, problems


def parse_overrides(items: Sequence[str]) -> tuple[dict[str, Any], list[Problem]]:
    """Typed override values keyed by field name (unknown keys kept, for `replace` to report), and malformed items."""
    hints = typing.get_type_hints(RecipeSpec)
    raw, problems = split_overrides(items)
    return {key: _read(value, hints[key]) if key in hints else value for key, value in raw.items()}, problems


def apply_overrides(spec: RecipeSpec, items: Sequence[str], **more: Any) -> tuple[RecipeSpec, dict[str, Any]]:
    """`spec` with the command line's `key=value` items (and `more`, from flags) applied; every problem at once."""
    overrides, problems = parse_overrides(items)
    overrides.update(more)
    try:
        changed = spec.replace(**overrides) if overrides else spec
    except InvalidRecipeError as error:
        problems += error.problems
    if problems:
        raise InvalidRecipeError(problems, context=f"recipe {spec.name!r}")
    return changed, overrides


def _read(text: str, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in _NONE:
            return None
        for arg in args:
            if arg is not type(None):
                value = _read(text, arg)
                if value is not text or arg is str:
                    return value
        return text
    if origin is tuple:
        parts = [p.strip() for p in text.strip("[]()").split(",") if p.strip()]
        return tuple(_read(p, args[0]) for p in parts)
    if origin is Literal:
        return text
    try:
        if hint is bool:
            low = text.lower()
            return True if low in _TRUE else False if low in _FALSE else text
        if hint is int:
            return parse_count(text)  # 300B, 1_000, 4
        if hint is float:
            return float(text)
    except ValueError:
        return text  # reported by RecipeSpec with the expected type
    return text
