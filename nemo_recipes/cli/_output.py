"""What every verb shares: exit codes, error reporting, JSON output and human-readable numbers.

Standard library only, because `ls`, `show` and `plan` must answer without importing NeMo.
"""

from __future__ import annotations

import argparse
import codecs
import errno
import io
import math
import os
import sys
from typing import Any, Callable, Iterable, Optional, TextIO

from nemo_recipes.counts import human_count, parse_count  # noqa: F401  (the CLI's helpers, re-exported)
from nemo_recipes.errors import Problem, redact_text

PROG = "nemo-recipes"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2

# Put at the end of every `--help`, so scripts know what to test for.
EXIT_CODES_EPILOG = """\
exit codes:
  0  success
  1  failure (NeMo or NeMo-Run missing or failing, a file that cannot be written)
  2  invalid input or invalid plan (unknown recipe, GPU or field, bad value, plan that does not fit)
  128+N  stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), after stopping what it started"""


class CLIError(Exception):
    """A failure to report as one message, without a traceback.

    `problems` (field, value, fix) are printed one per line; `code` is the exit status.
    """

    def __init__(self, message: str, *, code: int = EXIT_FAILURE, problems: Iterable[Problem] = ()):
        super().__init__(message)
        self.message = message
        self.code = code
        self.problems = list(problems)


def size_argument(text: str) -> int:
    """argparse's type for a size in bytes written as people write it (64M, 2G, 5GB)."""
    try:
        return parse_count(text.upper().removesuffix("B") or "0")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 64M)") from None


def recipe_arguments(parser: Any, overrides_help: str) -> None:
    """The positional arguments of the verbs that act on one recipe: its name, then `key=value` overrides."""
    parser.add_argument("recipe", metavar="NAME", help="a recipe name (see `nemo-recipes ls`)")
    parser.add_argument("overrides", metavar="key=value", nargs="*", default=[], help=overrides_help)


def epilog(examples: str) -> str:
    """A verb's epilog: its real examples, then the exit codes."""
    return f"examples:\n{examples.rstrip()}\n\n{EXIT_CODES_EPILOG}"


#: The key a JSON object gains when a non-finite number in it was written as null: where each was, and what it was.
NON_FINITE_KEY = "non_finite_as_null"


def print_json(payload: Any, stream: Optional[TextIO] = None) -> None:
    """Every verb's --json: strict JSON (RFC 8259 has no NaN or Infinity, which `jq` and most parsers refuse), a
    non-finite number written as null and named, with its value, under NON_FINITE_KEY of the top object."""
    import json  # only for --json: the verbs start without it

    notes: list[str] = []
    strict = _strict(payload, "", notes)
    if notes:
        strict = {**strict, NON_FINITE_KEY: notes} if isinstance(strict, dict) else strict
    # Keys keep insertion order (stable by construction); non-JSON values such as tuples become lists.
    json.dump(strict, stream or sys.stdout, indent=2, allow_nan=False)
    (stream or sys.stdout).write("\n")


def _strict(value: Any, where: str, notes: list[str]) -> Any:
    """`value` as plain JSON data (`_default` for other types), each non-finite float replaced by None and noted."""
    if isinstance(value, float):
        if not math.isfinite(value):
            notes.append(f"{where or '.'}: {value}")
            return None
        return value
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, dict):
        return {key: _strict(item, f"{where}.{key}" if where else str(key), notes) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_strict(item, f"{where}[{index}]", notes) for index, item in enumerate(value)]
    return _strict(_default(value), where, notes)


def _default(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)


def error_payload(
    message: str, problems: list[Problem], *, json_shape: Optional[Callable[..., dict]] = None, args: Any = None
) -> dict:
    """The JSON of an error: {error, problems}, or the verb's own shape (`plan` answers with every key of a plan)."""
    message = redact_text(message)
    if json_shape is not None:
        return json_shape(message, problems, args)
    return {"error": message, "problems": [p.to_dict() for p in problems]}


def report_error(
    verb: str,
    message: str,
    problems: list[Problem],
    *,
    as_json: bool,
    json_shape: Optional[Callable[..., dict]] = None,
    args: Any = None,
) -> None:
    """One clear message on stderr; with --json, the same content as a JSON object on stdout."""
    where = f"{PROG} {verb}" if verb else PROG
    message = redact_text(message)  # problems redact themselves (errors.redacted)
    if not problems:
        lines = [f"{where}: error: {message}"]
    elif len(problems) == 1:
        lines = [f"{where}: {problems[0]}"]
    else:
        lines = [f"{where}: {message}"] + [f"  - {p}" for p in problems]
    print("\n".join(lines), file=sys.stderr)
    if as_json:
        print_json(error_payload(message or str(problems[0]), problems, json_shape=json_shape, args=args))


# ---- the standard streams ----

# Errors of writing to a file descriptor: a full disk, an I/O error, a descriptor the shell closed.
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EBADF, errno.EFBIG, errno.EDQUOT}


class _ClosedStream(io.TextIOBase):
    """Stands for a standard stream the shell closed (`>&-`): writing fails as writing to a closed descriptor does."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it is closed")


#: The error handler of our standard streams (see `_bytes_or_escape`).
OUTPUT_ERRORS = "nemo-recipes-bytes-or-escape"


def _bytes_or_escape(error: UnicodeError) -> tuple[bytes, int]:
    """Encode what the stream's encoding cannot: a byte that arrived undecodable (Python holds it as a lone surrogate
    U+DC80..U+DCFF, "surrogateescape", as it does for command-line arguments and file names in a C locale) goes back
    out as that byte, so `name=ü` prints `ü` as plain Python would; any other character becomes a backslash escape
    (PYTHONIOENCODING=ascii), so output never fails for its characters."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = bytearray()
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(code - 0xDC00)
        else:
            out += char.encode("ascii", "backslashreplace")
    return bytes(out), error.end


codecs.register_error(OUTPUT_ERRORS, _bytes_or_escape)


def tolerant_streams() -> None:
    """Output never fails for its characters (see `_bytes_or_escape`), and a closed stdout fails as an OSError when
    written, like a full disk; a closed stderr swallows what is written to it."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=OUTPUT_ERRORS)


def is_output_error(error: OSError) -> bool:
    return error.filename is None and error.errno in _OUTPUT_ERRNOS


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush of what is left in its buffer fails no more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        sys.stdout = open(os.devnull, "w")
