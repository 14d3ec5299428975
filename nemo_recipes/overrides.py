"""`key=value` items from a command line: the one parser behind recipe overrides (`nemo-recipes show|plan|export|
launch NAME key=value`, `examples/pretrain_gpt.py --set key=value`) and executor arguments (`launch -E key=value`).

Splitting is shared: an item without '=' or without a key, and a key given twice with different values, are
problems (field, value, fix), never a silent choice. Values are then read by what they are for:

* recipe fields by the field's type (so `tensor_parallel=4` is an int and `tokenizer_path=4` stays a string); a value
  that cannot be read is passed on as text, so that `RecipeSpec.replace` reports it with the field, the expected
  type and the fix, in the same words as every other invalid value. Unknown keys pass through the same way and get
  the catalog's "did you mean";
* executor arguments as YAML numbers, booleans and flow lists (8 -> int, [a, b] -> list, true -> bool), as a
  profile file reads; any other value is the text exactly as written (never a YAML comment or quote dropped).

Standard library only (PyYAML is imported for executor arguments alone), so the fast CLI verbs stay fast.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from typing import Any, Literal, Mapping, Optional, Sequence

from nemo_recipes.catalog import RecipeSpec, data_problems, field_types
from nemo_recipes.counts import parse_count
from nemo_recipes.errors import InvalidInputError, Problem

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null", "~"}


def split_key_values(
    items: Sequence[str],
    *,
    field: str = "override",
    flag: str = "",
    example: str = "tensor_parallel=4",
    strip: bool = True,
) -> tuple[dict[str, str], list[Problem]]:
    """['tensor_parallel=4', 'oops'] -> ({'tensor_parallel': '4'}, [problem with 'oops']).

    `field` names a malformed item in its problem, `flag` is what precedes each item on the command line ('-E ')
    and `example` one well-formed item, for the fix. Repeating a key with the same value is harmless and accepted.
    `strip=False` keeps a value exactly as written (the spaces around it too).
    """
    raw: dict[str, str] = {}
    problems = []
    for item in items:
        key, sep, value = str(item).partition("=")
        key, value = key.strip(), value.strip() if strip else value
        if not sep or not key:
            problems.append(
                Problem(
                    field,
                    item,
                    "is not of the form key=value.",
                    f"write it as {flag}key=value, for example {flag}{example}.",
                )
            )
        elif key in raw and raw[key] != value:
            problems.append(
                Problem(
                    key,
                    value,
                    f"is given twice, as {flag}{key}={raw[key]} and {flag}{key}={value}.",
                    f"give {key} once.",
                )
            )
        else:
            raw[key] = value
    return raw, problems


def parse_overrides(items: Sequence[str]) -> tuple[dict[str, Any], list[Problem]]:
    """Typed override values keyed by field name (unknown keys kept, for `replace` to report), and malformed items."""
    hints = field_types(RecipeSpec)
    raw, problems = split_key_values(items)
    return {key: read_value(value, hints[key]) if key in hints else value for key, value in raw.items()}, problems


def apply_overrides(
    spec: RecipeSpec, items: Sequence[str], flags: Optional[Mapping[str, tuple[str, Any]]] = None, **more: Any
) -> tuple[RecipeSpec, dict[str, Any]]:
    """`spec` with the command line's `key=value` items applied, and the values of option flags: `flags` maps a
    field to (the flag as typed, its value), e.g. {'tensor_parallel': ('--tp', 8)}; `more` are further field values.
    A field set both by a flag and by an item, to different values, is a problem. Every problem at once."""
    overrides, problems = parse_overrides(items)
    given = {field: (f"{field}={value}", value) for field, value in more.items()}
    given.update({field: (f"{flag} {value}", value) for field, (flag, value) in (flags or {}).items()})
    for field, (text, value) in given.items():
        if field in overrides and overrides[field] != value:
            problems.append(
                Problem(
                    field,
                    overrides[field],
                    f"is given twice, as {field}={overrides[field]} and {text}.",
                    f"give {field} once.",
                )
            )
        overrides[field] = value
    try:
        changed = spec.replace(**overrides) if overrides else spec
        problems += data_problems(changed)  # the blend's shape, so that `show` refuses what the factory refuses
    except InvalidInputError as error:
        problems += error.problems
    if problems:
        raise InvalidInputError(problems, context=f"recipe {spec.name!r}")
    return changed, overrides


def read_yaml_values(items: Sequence[str], *, field: str, flag: str, example: str) -> dict[str, Any]:
    """`key=value` items, each value taken as written or refused, never losing a character: a number, true/false,
    null or a flow list/mapping ([a, b], {k: v}) is read as YAML; any other text stays exactly the text given, since
    YAML would drop a '#' comment, quotes or what follows a newline (`account=$'ci\\n#SBATCH --wrap=id'` would be
    'ci'). A control character (newline, tab, ...) is refused: no executor argument may span lines. Every malformed
    or repeated item in one InvalidInputError."""
    raw, problems = split_key_values(items, field=field, flag=flag, example=example, strip=False)
    values: dict[str, Any] = {}
    for key, text in raw.items():
        if any(ord(c) < 32 or ord(c) == 127 for c in text):
            problems.append(
                Problem(
                    key,
                    text,
                    "contains a newline or another control character; an executor argument is one line.",
                    f"remove it, or set {key} in a cluster profile file if it really needs one.",
                )
            )
            continue
        values[key] = _yaml_value(text)
    if problems:
        raise InvalidInputError(problems, context=f"{field}s")
    return values


#: The YAML values an executor argument may be: decimal numbers, booleans, null and flow collections. Anything else
#: is text, so that `time=04:00:00` (a base-60 integer to YAML 1.1) or `0x10` keeps its characters.
_YAML_SHAPES = (
    r"[-+]?[0-9]+|[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?|true|false|yes|no|on|off|null|~|\[.*\]|\{.*\}"
)


@functools.cache
def _yaml_shapes() -> re.Pattern[str]:
    # Compiled at first use: compiling it case-insensitively takes 2 ms, and `plan` imports this module but reads
    # no executor argument.
    return re.compile(_YAML_SHAPES, re.IGNORECASE)


def _yaml_value(text: str) -> Any:
    """`text` read as YAML when it is a number, boolean, null or flow collection and YAML keeps every character
    (no comment); otherwise `text` itself."""
    import yaml

    stripped = text.strip()
    if not stripped:
        return text
    if "#" in text or not _yaml_shapes().fullmatch(stripped):
        return text
    try:
        value = yaml.safe_load(stripped)
    except yaml.YAMLError:
        return text
    return text if isinstance(value, str) else value


def read_value(text: str, hint: Any) -> Any:
    """`text` as a value of type `hint` (a RecipeSpec field's type), or `text` itself when it is not one."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in _NONE:
            return None
        for arg in args:
            if arg is not type(None):
                value = read_value(text, arg)
                if value is not text or arg is str:
                    return value
        return text
    if origin is tuple:
        parts = [p.strip() for p in text.strip("[]()").split(",") if p.strip()]
        return tuple(read_value(p, args[0]) for p in parts)
    if origin is Literal:
        return text
    try:
        if hint is bool:
            low = text.lower()
            return True if low in _TRUE else False if low in _FALSE else text
        if hint is int:
            return parse_count(text)  # 300B, 1_000, 4
        if hint is float:
            return float(text)  # 'inf' and 'nan' are read, and refused by the catalog as not finite
    except ValueError:
        return text  # reported by RecipeSpec with the expected type
    return text
