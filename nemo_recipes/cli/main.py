"""The `nemo-recipes` command: one small module per verb (`verbs.VERBS`), dispatched here.

Start-up imports argparse and the verb table, then the chosen verb's module only: `ls` never loads the planner, and
verbs that need NeMo (`export`, `launch`, `smoke`, and `diff` against a file) import it inside the verb, so `ls`,
`show` and `plan` answer in a fraction of a second. The top-level `--help` lists the verbs from the table alone.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import os
import re
import sys
from typing import Any, NoReturn, Optional, Sequence, cast

from nemo_recipes._version import __version__
from nemo_recipes.cli import _output, _signals
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import (
    InputError,
    InvalidInputError,
    Problem,
    RunFailedError,
    did_you_mean,
    redact_text,
    secret_value_problems,
)

DEBUG_ENV = "NEMO_RECIPES_DEBUG"
# Verbs that print and end: run as the command, their objects are frozen out of the interpreter's garbage collections
# at exit once the output is flushed (see `main`).
_FREEZE_AT_EXIT = frozenset({"ls", "show", "plan", "data"})

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


class UsageError(Exception):
    """A command line argparse cannot read; reported by `main` (with JSON where --json was asked for)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped verb or choice (Python 3.11's argparse has none), whose errors
    return to `main` instead of exiting, so that they are reported like every other error."""

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            message += did_you_mean(match.group(1), choices)
        raise UsageError(self, message)


class _Verbs(argparse._SubParsersAction):
    """The verbs: a verb that is not the one chosen is listed by its name and line of help only, and its parser (a
    bare one, as `add_parser` makes) is built if the command line picks it after all. Each parser built runs
    argparse's message translations, a twentieth of `plan`'s start-up for the ten verbs not chosen."""

    _UNBUILT = object()

    def add_listed(self, name: str, help: str) -> None:
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help))
        self._name_parser_map[name] = self._UNBUILT

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        name = values[0]
        if self._name_parser_map.get(name) is self._UNBUILT:
            self._name_parser_map[name] = self._parser_class(prog=f"{self._prog_prefix} {name}")
        super().__call__(parser, namespace, values, option_string)


def build_parser(verb: Optional[str] = None) -> argparse.ArgumentParser:
    """The command's parser: every verb's full parser, or with `verb` that verb's alone and the others as their name
    and one line of help (enough for the top-level `--help` and for "did you mean"), so that only the chosen verb's
    module is imported."""
    parser = _Parser(
        prog=_output.PROG,
        description=DESCRIPTION,
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{_output.PROG} {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help=f"show the Python traceback of an error (also: {DEBUG_ENV}=1)"
    )
    verbs = cast(_Verbs, parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser, action=_Verbs))
    verbs.required = True
    for name, entry in VERBS.items():
        if verb is None or name == verb:
            importlib.import_module(entry.module).register(verbs)
        else:
            verbs.add_listed(name, entry.help)
    return parser


def chosen_verb(argv: Sequence[str]) -> str:
    """The verb on the command line: its first word that is not an option (no top-level option takes a value); ""
    when there is none (`nemo-recipes --help`), which builds no verb's parser."""
    return next((word for word in argv if not word.startswith("-")), "")


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
    verb_parser = _verb_parsers(parser).get(getattr(args, "verb", None), parser)
    # argparse (3.11) removes a '--' from a single-value positional's words and, when that leaves none, stores []
    # instead of asking for the argument (`diff A -- --`): ask for it as a missing argument does.
    empty = [
        a.metavar or a.dest
        for a in verb_parser._actions
        if not a.option_strings and a.nargs is None and getattr(args, a.dest, "") == []
    ]
    if empty:
        verb_parser.error(f"the following arguments are required: {', '.join(map(str, empty))}")
    return args


def _verb_parsers(parser: argparse.ArgumentParser) -> dict:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Optional[Sequence[str]] = None) -> int:
    as_command = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    _output.tolerant_streams()
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        args = parse(build_parser(chosen_verb(argv)), argv)
    except UsageError as error:
        return _usage_error(error, as_json="--json" in argv, debug=debug)
    try:
        with _signals.stop_on_signals():
            try:
                secrets = _secret_arguments(argv)
                if secrets:
                    raise InvalidInputError(secrets, context="the command line")
                code = args.run(args)
                sys.stdout.flush()  # a closed pipe or a full disk shows up here, inside the try, not at exit
                if as_command and args.verb in _FREEZE_AT_EXIT:
                    # The interpreter's exit runs full garbage collections over every object imported and made,
                    # 7-8 ms of a 90 ms `plan`, 60-90 ms after `data prepare` (awkward's modules, imported for
                    # gigatoken); the command is done, its files closed, its pool joined and its output flushed, so
                    # its objects are moved out of their way (still freed at exit, only no longer searched for
                    # cycles). Not in-process (`main(argv)`), where the caller lives on.
                    gc.freeze()
                return code
            except BaseException as error:  # noqa: B036  (every outcome gets its exit code; none a traceback)
                return _failed(error, args, debug)
    except _signals.Stopped as error:  # a signal while the first was being reported: the same exit code
        return error.exit_code


def _secret_arguments(argv: Sequence[str]) -> list[Problem]:
    """Every argument of any verb (an override, -E, --name, --dir, a path) that holds the value of a secret
    environment variable: a command line's values reach job scripts, exported configurations, manifests, cards
    and logs, and are printed, so a secret there is refused before anything runs. Each is named by its key
    (`account` of `-E account=...`) or by the option before it."""
    problems = []
    for index, word in enumerate(argv):
        key, sep, _ = word.partition("=")
        if sep and key:
            field = key
        elif index and argv[index - 1].startswith("-"):
            field = argv[index - 1]
        else:
            field = "argument"
        problems += secret_value_problems(field, word)
    return problems


def _failed(error: BaseException, args: argparse.Namespace, debug: bool) -> int:
    """Report `error` as one message (JSON too with --json) and return its exit code: 2 for invalid input, 1 for a
    failure outside it; with --debug also the traceback."""
    if isinstance(error, BrokenPipeError):
        # `nemo-recipes show gpt_70b | head -1`: the reader left; not an error worth a message.
        _output.silence_stdout()
        return _output.EXIT_OK
    if isinstance(error, _signals.Stopped):
        # Whatever the verb started has been stopped on the way here (a smoke run waits for its processes).
        with contextlib.suppress(OSError, ValueError):  # SIGHUP: the terminal may be gone
            print(f"{_output.PROG} {args.verb}: stopped by {error.name}", file=sys.stderr, flush=True)
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return 130
    if not isinstance(error, Exception):
        raise error  # SystemExit and the like keep their meaning
    if debug:
        import traceback  # here: only --debug prints one, and its import is a millisecond of every command

        traceback.print_exception(error, file=sys.stderr)
    json_shape = getattr(args, "json_error", None)
    as_json = getattr(args, "json", False)
    report = functools.partial(_output.report_error, args.verb, as_json=as_json, json_shape=json_shape, args=args)
    if isinstance(error, InvalidInputError):
        report(str(error).splitlines()[0], error.problems)
        return _output.EXIT_INVALID
    if isinstance(error, InputError):
        report(str(error), [])
        return _output.EXIT_INVALID
    if isinstance(error, RunFailedError):
        report(str(error), [])
        return _output.EXIT_FAILURE
    if isinstance(error, _output.CLIError):
        report(error.message, error.problems)
        return error.code
    if isinstance(error, OSError) and _output.is_output_error(error):
        _output.silence_stdout()
        report(f"cannot write to standard output: {error.strerror or error}", [])
        return _output.EXIT_FAILURE
    report(
        f"internal error ({type(error).__name__}: {error}); this is a bug: run again with --debug or "
        f"{DEBUG_ENV}=1 for the traceback, and report it.",
        [],
    )
    return _output.EXIT_FAILURE


def _usage_error(error: UsageError, *, as_json: bool, debug: bool) -> int:
    """argparse's own report (usage line, then `PROG VERB: error: ...`), and with --json the verb's JSON error."""
    if debug:
        import traceback

        traceback.print_exception(error, file=sys.stderr)
    error.parser.print_usage(sys.stderr)
    print(f"{error.parser.prog}: error: {redact_text(error.message)}", file=sys.stderr)
    if as_json:
        shape = error.parser.get_default("json_error")
        _output.print_json(_output.error_payload(error.message, [], json_shape=shape, args=None))
    return _output.EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
