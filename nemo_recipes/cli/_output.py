"""What every verb shares: exit codes, error reporting, JSON output and human-readable numbers.

Standard library only, because `ls`, `show` and `plan` must answer without importing NeMo.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Optional, TextIO

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


def report_error(verb: str, message: str, problems: list[Problem], *, as_json: bool) -> None:
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
        print_json({"error": message or str(problems[0]), "problems": [p.to_dict() for p in problems]})


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


def parse_count(text: str) -> int:
    """'300B' -> 300_000_000_000; also '1.5T', '375M', '2K', '1e9', '1_000'. ValueError when not a count."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    scale = 1
    if cleaned and cleaned[-1].upper() in dict(_SUFFIXES):
        scale = dict(_SUFFIXES)[cleaned[-1].upper()]
        cleaned = cleaned[:-1]
    try:
        return int(cleaned) * scale
    except ValueError:
        value = float(cleaned) * scale  # '1.5T' or '1e9'; raises ValueError for anything else
        if value != int(value):
            raise ValueError(f"{text!r} is not a whole number") from None
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
