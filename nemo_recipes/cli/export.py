"""`nemo-recipes export NAME`: the resolved recipe as NeMo-Run writes it (YAML, JSON or TOML), loadable again.

Writing goes through NeMo-Run's own `ConfigSerializer` (the machinery behind `nemo llm pretrain --to-yaml`).
Reading back (`load`) uses NeMo-Run's reader for the three formats and rebuilds the configuration from the
`_target_` markers NeMo-Run wrote; every export is checked that way before it is written (`--no-check` skips it).
This verb imports NeMo (seconds); it does so inside `run`, never when the CLI starts."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

from nemo_recipes.catalog import get_recipe, plain_name_problems
from nemo_recipes.cli import _output
from nemo_recipes.cli._recipe_config import build_partial, load, quiet_stdout, serialize
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import WARNING, InvalidInputError, Problem, raise_if_any
from nemo_recipes.overrides import apply_overrides
from nemo_recipes.user_paths import output_problems
from nemo_recipes.yaml_files import CONFIG_FORMATS, CONFIG_SUFFIXES

HELP = VERBS["export"].help
EXAMPLES = """\
  nemo-recipes export gpt_70b -o gpt_70b.yaml                     # format from the extension
  nemo-recipes export gpt_70b --format toml num_nodes=8 > gpt_70b_8n.toml
  nemo-recipes export gpt_1_3b --format json --name run1 --dir /results
  # load it back in Python: nemo_recipes.cli.export.load("gpt_70b.yaml") -> run.Partial"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Imports NeMo (several seconds).",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _output.recipe_arguments(parser, "change recipe fields first, e.g. num_nodes=8 (names as in `nemo-recipes show`)")
    parser.add_argument(
        "--format", choices=CONFIG_FORMATS, help="output format (default: from the -o extension, else yaml)"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--name", default=None, help="experiment name in the log configuration (default: NAME)")
    parser.add_argument("--dir", default=None, help="log/checkpoint directory in the configuration")
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip loading the written configuration back and comparing it with the recipe",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON: {recipe, format, output, bytes, overrides, round_trip, content (without -o)}",
    )
    parser.set_defaults(run=run)


def _loads_back_equal(text: str, fmt: str, partial: Any) -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"recipe.{fmt}")
        with open(path, "w") as handle:
            handle.write(text)
        try:
            return load(path) == partial
        except Exception:  # any failure to read or rebuild means the file is not loadable: reported by the caller
            return False


def relative_paths(spec: Any, log_dir: Optional[str]) -> list[Problem]:
    """A warning for each relative path the exported configuration carries: NeMo-Run writes it as given, and the job
    reads it against its own working directory (a Slurm job's experiment directory, a pod's image), where it names
    another file or none. `launch` makes them absolute; an export is run elsewhere."""
    from nemo_recipes.plan.data import job_paths

    found = job_paths(spec) + ([("dir", log_dir)] if log_dir else [])
    return [
        Problem(
            field,
            path,
            "is relative: the configuration keeps it as given, and a job reads it from its own working directory (a "
            "Slurm job's experiment directory, a pod's image), where it names another file or none.",
            f"give it as an absolute path ({'--dir' if field == 'dir' else field}={os.path.abspath(path)}).",
            WARNING,
        )
        for field, path in found
        if not os.path.isabs(os.path.expanduser(path))
    ]


def _unwritable(output: str, why: str) -> Problem:
    return Problem("output", output, f"cannot be written ({why}).", "give -o a file in a directory you can write.")


def _refuse_unwritable(output: Optional[str]) -> None:
    """An -o that cannot be written, refused before NeMo is imported (seconds): its directory missing or not one."""
    if output is None:
        return
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise InvalidInputError([_unwritable(output, f"{folder} is not a directory")], context="export")


def run(args: argparse.Namespace) -> int:
    fmt = args.format
    if args.output:
        suffix = os.path.splitext(args.output)[1].lower()
        implied = CONFIG_SUFFIXES.get(suffix)
        if fmt is None:
            if implied is None:
                raise InvalidInputError(
                    [
                        Problem(
                            "output",
                            args.output,
                            f"has no known extension ({suffix or 'none'}).",
                            "end it in .yaml, .json or .toml, or give --format.",
                        )
                    ]
                )
            fmt = implied
        elif implied is not None and implied != fmt:
            raise InvalidInputError(
                [
                    Problem(
                        "format",
                        fmt,
                        f"disagrees with the extension of {args.output!r}.",
                        f"use --format {implied} or name the file *.{fmt}.",
                    )
                ]
            )
    fmt = fmt or "yaml"

    if args.name is not None:
        raise_if_any(plain_name_problems("name", args.name), context="export")
    spec, overrides = apply_overrides(get_recipe(args.recipe), args.overrides)
    if args.output:  # a pipe would block the write; the recipe's own files are not overwritten
        raise_if_any(output_problems(args.output, spec.input_paths, "output"), context="export")
    _refuse_unwritable(args.output)
    for problem in relative_paths(spec, args.dir):
        print(f"{_output.PROG} export: {problem}", file=sys.stderr)
    partial = build_partial(spec, name=args.name, dir=args.dir)
    with quiet_stdout():
        text = serialize(partial, fmt)
    if not text.endswith("\n"):
        text += "\n"

    round_trip = None
    if args.check:
        with quiet_stdout():
            round_trip = _loads_back_equal(text, fmt, partial)
        if not round_trip:
            raise _output.CLIError(
                f"the {fmt} configuration of {spec.name} does not load back equal to the recipe; "
                "nothing written. Try another --format, or --no-check to write it anyway."
            )
    if args.output:
        try:
            with open(args.output, "w") as handle:
                handle.write(text)
        except OSError as error:
            problem = _unwritable(args.output, error.strerror or str(error))
            raise InvalidInputError([problem], context="export") from None
    if args.json:
        payload = {
            "recipe": spec.name,
            "format": fmt,
            "output": args.output,
            "bytes": len(text.encode()),
            "overrides": overrides,
            "round_trip": round_trip,
        }
        if not args.output:
            payload["content"] = text
        _output.print_json(payload)
    elif args.output:
        checked = "; it loads back equal to the recipe" if round_trip else ""
        print(
            f"wrote {args.output} ({fmt}, {len(text.encode()):,} bytes){checked}. Load it in Python with "
            f"nemo_recipes.cli.export.load({args.output!r})",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return _output.EXIT_OK
