"""What every verb shares: exit codes, error reporting, JSON output and human-readable numbers.

Standard library only, because `ls`, `show` and `plan` must answer without importing NeMo.
"""

from __future__ import annotations

import decimal
import errno
import io
import json
import os
import sys
from typing import Any, Callable, Iterable, Optional, TextIO

from nemo_recipes.errors import Problem

PROG = "nemo-recipes"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2

# Put at the end of every `--help`, so scripts know what to test for.
EXIT_CODES_EPILOG = """\
exit codes:
  0  success
  1  failure (NeMo or NeMo-Run missing or failing, a file that cannot be written)
  2  invalid input or invalid plan (unknown recipe, GPU or field, bad value, plan that does not fit)"""


class CLIError(Exception):
    """A failure to report as one message, without a traceback.

    `problems` (field, value, fix) are printed one per line; `code` is the exit status.
    """

    def __init__(self, message: str, *, code: int = EXIT_FAILURE, problems: Iterable[Problem] = ()):
        super().__init__(message)
        self.message = message
        self.code = code
        self.problems = list(problems)


def epilog(examples: str) -> str:
    """A verb's epilog: its real examples, then the exit codes."""
    return f"examples:\n{examples.rstrip()}\n\n{EXIT_CODES_EPILOG}"


def print_json(payload: Any, stream: Optional[TextIO] = None) -> None:
    # Keys keep insertion order (stable by construction); non-JSON values such as tuples become lists.
    json.dump(payload, stream or sys.stdout, indent=2, default=_default)
    (stream or sys.stdout).write("\n")


def _default(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)


def error_payload(message: str, problems: list[Problem], *, json_shape: Optional[Callable[..., dict]] = None,
                  args: Any = None) -> dict:
    """The JSON of an error: {error, problems}, or the verb's own shape (`plan` answers with every key of a plan)."""
    if json_shape is not None:
        return json_shape(message, problems, args)
    return {"error": message, "problems": [p.to_dict() for p in problems]}


def report_error(verb: str, message: str, problems: list[Problem], *, as_json: bool,
                 json_shape: Optional[Callable[..., dict]] = None, args: Any = None) -> None:
    """One clear message on stderr; with --json, the same content as a JSON object on stdout."""
    where = f"{PROG} {verb}" if verb else PROG
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


def tolerant_streams() -> None:
    """Output never fails for its characters (PYTHONIOENCODING=ascii: non-ASCII is written as escapes), and a closed
    stdout fails as an OSError when written, like a full disk; a closed stderr swallows what is written to it."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def is_output_error(error: OSError) -> bool:
    return error.filename is None and error.errno in _OUTPUT_ERRNOS


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush of what is left in its buffer fails no more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        sys.stdout = open(os.devnull, "w")


# ---- numbers people read ----

_SUFFIXES = (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3))


def human_count(n: float) -> str:
    """1315819520 -> '1.32B', 174615846912 -> '175B': three significant digits, SI-like suffix."""
    for suffix, scale in _SUFFIXES:
        if abs(n) >= scale:
            value = n / scale
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f}{suffix}"
    return f"{n:g}"


# Counts with more digits are not read as numbers (Python refuses to print integers of over 4300 digits).
_COUNT_DIGITS = 4000


def parse_count(text: str) -> int:
    """'300B' -> 300_000_000_000; also '1.5T', '375M', '2K', '1e9', '1_000', exactly (no float rounding).
    ValueError when not a finite whole number."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    scale = 1
    if cleaned and cleaned[-1].upper() in dict(_SUFFIXES):
        scale = dict(_SUFFIXES)[cleaned[-1].upper()]
        cleaned = cleaned[:-1]
    try:
        value = decimal.Decimal(cleaned) * scale
    except (ArithmeticError, ValueError):  # decimal signals (invalid, overflow) are ArithmeticErrors
        raise ValueError(f"{text!r} is not a number") from None
    if not value.is_finite() or value.adjusted() >= _COUNT_DIGITS:
        raise ValueError(f"{text!r} is not a finite number")
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number")
    return int(value)


def human_value(value: Any) -> str:
    """How a recipe value reads in a table: no quotes around strings, lists comma-separated, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(human_value(v) for v in value) if value else "(none)"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and abs(value) >= 10**6:
        return f"{value:,}".replace(",", "_")
    return str(value)
