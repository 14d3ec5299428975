"""`nemo-recipes diff A B`: what differs between two recipes, or between a recipe and a file written by `export`.

Two recipe names compare catalog values (fields and derived values) and need no NeMo. A file is compared key by
key, as dotted paths of the NeMo-Run configuration (`trainer.strategy.tensor_model_parallel_size`); when the other
side is a recipe name, that recipe is first resolved the way `export` writes it, which imports NeMo (seconds).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from nemo_recipes import yaml_files
from nemo_recipes.catalog import DERIVED_SOURCES, RECIPES, field_names, fields_of, get_recipe
from nemo_recipes.cli import _output
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.plan.layout import derived_values
from nemo_recipes.text_table import human_value, render

HELP = VERBS["diff"].help
EXAMPLES = """\
  nemo-recipes diff gpt_13b gpt_70b             # catalog values, instant
  nemo-recipes export gpt_70b -o mine.yaml && $EDITOR mine.yaml
  nemo-recipes diff gpt_70b mine.yaml           # NeMo-Run configuration paths (imports NeMo)
  nemo-recipes diff old.yaml new.yaml --json"""

ABSENT = "(absent)"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ".",
        epilog=_output.epilog(EXAMPLES) + "\n\nA difference is not a failure: exit 0 whether or not the two differ.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", metavar="A", help="a recipe name or a .yaml/.yml/.json/.toml file from `export`")
    parser.add_argument("b", metavar="B", help="the same, compared with A")
    parser.add_argument(
        "--json", action="store_true", help="print JSON: {a, b, kind, differences: [{key, a, b, derived}], same}"
    )
    parser.set_defaults(run=run)


def _is_file(arg: str) -> bool:
    return arg not in RECIPES and (arg.lower().endswith(tuple(yaml_files.CONFIG_SUFFIXES)) or os.path.sep in arg)


def run(args: argparse.Namespace) -> int:
    if _is_file(args.a) or _is_file(args.b):
        # Files first: a missing file is reported before a recipe is resolved through NeMo (seconds).
        loaded = {arg: flatten(load_config_file(arg)) for arg in (args.a, args.b) if _is_file(arg)}
        a_values = loaded[args.a] if args.a in loaded else _recipe_config_values(args.a)
        b_values = loaded[args.b] if args.b in loaded else _recipe_config_values(args.b)
        kind = "config"
        derived: set[str] = set()
    else:
        kind = "recipes"
        a_spec, b_spec = get_recipe(args.a), get_recipe(args.b)
        # The expert fields where either recipe has experts (`fields_of`): two dense recipes compare as they did.
        shown = {*fields_of(a_spec), *fields_of(b_spec)}
        fields = [k for k in field_names() if k != "name" and k in shown]
        a_values = {**{k: getattr(a_spec, k) for k in fields}, **derived_values(a_spec)}
        b_values = {**{k: getattr(b_spec, k) for k in fields}, **derived_values(b_spec)}
        derived = set(DERIVED_SOURCES)

    keys = list(dict.fromkeys([*a_values, *b_values]))
    differences = [
        {"key": k, "a": a_values.get(k, ABSENT), "b": b_values.get(k, ABSENT), "derived": k in derived}
        for k in keys
        if a_values.get(k, ABSENT) != b_values.get(k, ABSENT)
    ]
    same = len(keys) - len(differences)

    if args.json:
        _output.print_json({"a": args.a, "b": args.b, "kind": kind, "differences": differences, "same": same})
        return _output.EXIT_OK
    if not differences:
        print(f"{args.a} and {args.b} are the same ({same} values compared)")
        return _output.EXIT_OK
    rows = [
        [d["key"] + (" (derived)" if d["derived"] else ""), human_value(d["a"]), human_value(d["b"])]
        for d in differences
    ]
    print(render(["field" if kind == "recipes" else "key", args.a, args.b], rows))
    print(f"\n{len(differences)} differ, {same} the same")
    return _output.EXIT_OK


# ---- files ----


def _recipe_config_values(name: str) -> dict[str, Any]:
    """A recipe resolved the way `export` writes it, as {dotted.path: value}; imports NeMo."""
    spec = get_recipe(name)
    from nemo_recipes.cli._recipe_config import resolved_dict  # imports NeMo only now, and only for this case

    return flatten(resolved_dict(spec))


def load_config_file(path: str) -> dict[str, Any]:
    """The plain data of an exported file (YAML through PyYAML, TOML through tomllib, JSON); no NeMo needed."""
    if not os.path.exists(path):  # anything else there (a pipe, a directory) is refused by read_file, never opened
        raise InvalidInputError(
            [
                Problem(
                    "file",
                    path,
                    "does not exist.",
                    f"give a recipe name ({', '.join(RECIPES)}) or an existing file written by `nemo-recipes export`.",
                )
            ]
        )
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in yaml_files.CONFIG_SUFFIXES:
        raise InvalidInputError(
            [Problem("file", path, f"has an unknown extension {suffix!r}.", "use a .yaml, .yml, .json or .toml file.")]
        )
    fix = "fix the file or export it again with `nemo-recipes export`."
    # YAML, JSON and TOML through the one bounded reader: size, depth, aliases, no key twice.
    data = yaml_files.read_file(path, field="file", fix=fix)
    if not isinstance(data, dict):
        raise InvalidInputError(
            [
                Problem(
                    "file",
                    path,
                    "does not hold a mapping at its top level.",
                    "give a file written by `nemo-recipes export`.",
                )
            ]
        )
    return data


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}, 'c': [2, 3]} -> {'a.b': 1, 'c.0': 2, 'c.1': 3}."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(data, list) and data:
        out = {}
        for index, value in enumerate(data):
            out.update(flatten(value, f"{prefix}{index}."))
        return out
    return {prefix[:-1]: data}
