"""Errors for user input: every problem names the field, the value and the fix.

Standard library only: the catalog, the planner and the fast CLI verbs raise these without importing NeMo.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or risky) with a recipe, a plan or an override."""

    field: str
    value: Any
    message: str
    fix: str
    severity: str = ERROR

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "field": self.field,
            "value": jsonable(self.value),
            "message": self.message,
            "fix": self.fix,
        }

    def __str__(self) -> str:
        return f"{self.severity}: {self.field}={self.value!r}: {self.message} Fix: {self.fix}"


class RecipeError(ValueError):
    """Base class of every user-input error this package raises."""


class InvalidRecipeError(RecipeError):
    """A recipe, override or plan with one or more errors; `problems` holds all of them at once."""

    def __init__(self, problems: Iterable[Problem], *, context: str = ""):
        self.problems = list(problems)
        self.context = context
        errors = [p for p in self.problems if p.severity == ERROR]
        head = f"{context}: " if context else ""
        lines = [f"{head}{len(errors)} problem(s) found"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest candidate, or '' when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data: containers recursively, anything else unknown as its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)
