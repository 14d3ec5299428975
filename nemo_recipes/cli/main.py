"""The `nemo-recipes` command: one small module per verb, dispatched here.

Only argparse and the standard library are imported at start-up; verbs that need NeMo (`export`, `launch`, and
`diff` against a file) import it inside the verb, so `ls`, `show` and `plan` answer in a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import NoReturn, Optional, Sequence

from nemo_recipes import __version__
from nemo_recipes.cli import _output, completion, diff, export, launch, ls, plan, show, smoke
from nemo_recipes.errors import InvalidRecipeError, RecipeError, did_you_mean

VERB_MODULES = (ls, show, plan, diff, export, launch, smoke, completion)

DESCRIPTION = """\
GPT pretraining recipes for NVIDIA NeMo 2 / Megatron: browse them, check them against your cluster before you spend
GPU hours, export them as NeMo-Run configuration, and launch them through a NeMo-Run executor."""

EXAMPLES = """\
  nemo-recipes ls
  nemo-recipes show gpt_70b
  nemo-recipes plan gpt_70b --nodes 8 --gpu h100 --tokens 1T --plot plan.png
  nemo-recipes diff gpt_13b gpt_70b
  nemo-recipes export gpt_70b --format yaml -o gpt_70b.yaml
  nemo-recipes launch gpt_1_3b --executor local --dryrun
  nemo-recipes smoke gpt_70b --processes 2
  eval "$(nemo-recipes completion bash)"

Run `nemo-recipes VERB --help` for the options and examples of each verb."""


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped verb or choice (Python 3.11's argparse has none)."""

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            message += did_you_mean(match.group(1), choices)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_output.PROG, description=DESCRIPTION, epilog=_output.epilog(EXAMPLES),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"{_output.PROG} {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True
    for module in VERB_MODULES:
        module.register(verbs)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """parse_args, except that `key=value` overrides may also come after options (`plan gpt_70b --nodes 8 tp=...`).

    argparse stops filling a `nargs="*"` positional at the first option, and its intermixed mode refuses
    sub-commands, so the leftovers that look like overrides are appended here.
    """
    args, extra = parser.parse_known_args(argv)
    overrides = [e for e in extra if "=" in e and not e.startswith("-")]
    if overrides and hasattr(args, "overrides"):
        args.overrides = [*args.overrides, *overrides]
        extra = [e for e in extra if e not in overrides]
    if extra:
        verb_parser = _verb_parsers(parser).get(getattr(args, "verb", None), parser)
        options = [o for a in verb_parser._actions for o in a.option_strings]
        hint = did_you_mean(extra[0].split("=")[0], options) if extra[0].startswith("-") else ""
        verb_parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _verb_parsers(parser: argparse.ArgumentParser) -> dict:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(build_parser(), argv)
    as_json = getattr(args, "json", False)
    try:
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows up here, inside the try, rather than at interpreter exit
        return code
    except InvalidRecipeError as error:
        head = str(error).splitlines()[0]
        _output.report_error(args.verb, head, error.problems, as_json=as_json)
        return _output.EXIT_INVALID
    except RecipeError as error:
        _output.report_error(args.verb, str(error), [], as_json=as_json)
        return _output.EXIT_INVALID
    except _output.CLIError as error:
        _output.report_error(args.verb, error.message, error.problems, as_json=as_json)
        return error.code
    except BrokenPipeError:
        # `nemo-recipes show gpt_70b | head -1`: the reader left; not an error worth a traceback. Point stdout at
        # /dev/null so that Python's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _output.EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
