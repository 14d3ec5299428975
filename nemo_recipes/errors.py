"""The errors this package raises on purpose; for user input, every problem names the field, the value and the fix.

    NemoRecipesError                 every error raised on purpose: one message, never a traceback
    |-- InputError                   the user's input is refused (the CLI exits 2)            (was: RecipeError)
    |   |-- InvalidInputError        ... with every Problem (field, value, why, fix) at once  (was: InvalidRecipeError)
    |   |   |-- InvalidConfigError   an executor's arguments, a cluster profile, a kubeconfig, a YAML file
    |   |   `-- data.sources.InvalidDataError  the inputs of `data prepare`                   (was: BadInput)
    |   |-- smoke_training.cpu_compat.CompatError  the CPU compatibility layer refuses this stack
    |   `-- smoke_training.launchers.SmokeError a smoke run that cannot start as asked
    `-- RunFailedError               something outside the input failed (the CLI exits 1)

`RecipeError`, `InvalidRecipeError` (and `data.sources.BadInput`) are the names before 0.2, kept as aliases of the
same classes: deprecated, but code that catches or raises them behaves as before (`except InvalidRecipeError` still
catches an InvalidConfigError). New code: the names above.

Standard library only: the catalog, the planner and the fast CLI verbs raise these without importing NeMo.
"""

from __future__ import annotations

import errno
import math
import re
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

from nemo_recipes.credentials import secret_environment, secret_key, secret_values, token_like

#: A directory the user chose (--dir, --out) that has no room (a full disk, a quota, a file size limit) or cannot be
#: written: the user's to fix, so exit 2 with the field, as any bad input.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})

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
        value, hide = redacted(self.value, self.field)
        return {
            "severity": self.severity,
            "field": self.field,
            "value": jsonable(value),
            "message": hide(self.message),
            "fix": hide(self.fix),
        }

    def __str__(self) -> str:
        value, hide = redacted(self.value, self.field)
        return f"{self.severity}: {self.field}={shown(value)}: {hide(self.message)} Fix: {hide(self.fix)}"


def redact_text(text: str) -> str:
    """Free text (a message from NeMo-Run, argparse or the scheduler) without secrets: the values of this process's
    secret environment variables and every word that looks like a token."""
    for secret in secret_values():
        text = text.replace(secret, REDACTED_VALUE)
    return " ".join(REDACTED_VALUE if looks_secret(word) else word for word in text.split(" "))


def _secret_key(key: str) -> bool:
    # `secrets`, `image_pull_secrets`: lists of names, not secrets themselves.
    return bool(key) and not key.endswith("secrets") and secret_key(key)


def redacted(value: Any, field: str = "") -> tuple[Any, Callable[[str], str]]:
    """`value` as a message may quote it, and a function that hides the same secrets in the message's other text.

    The one place where secrets are taken out of what we print (every Problem goes through it, in text and JSON):
    a value under a secret's key (`env.WANDB_API_KEY`, `{"db_password": ...}`), every value of a `secrets` mapping
    (`secrets={"WANDB_API_KEY": "<the key>"}`, a profile's `secrets:` written as a mapping), any string that looks
    like a token (credentials.token_like), and any value of this process's secret environment variables wherever
    it appears."""
    found: list[str] = []

    def walk(item: Any, key: str, secret: bool) -> Any:
        if isinstance(item, Mapping):
            inner = secret or key == "secrets"  # {NAME: value}: the values are the secrets
            return {k: walk(v, str(k), inner or _secret_key(str(k))) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(walk(v, key, secret) for v in item)
        if item is None or isinstance(item, bool) or not (secret or isinstance(item, str)):
            return item
        text = item if isinstance(item, str) else repr(item)
        if secret or looks_secret(text) or any(s in text for s in secret_values()):
            found.append(text)
            return REDACTED_VALUE
        return item

    last = field.rsplit(".", 1)[-1]
    shown_value = walk(value, last, _secret_key(last))
    hidden = sorted({t for t in found if len(t) >= 4} | set(secret_values()), key=len, reverse=True)

    def hide(text: str) -> str:
        for secret in hidden:
            text = text.replace(secret, REDACTED_VALUE)
        return text

    return shown_value, hide


def secret_value_problems(field: str, value: Any) -> list[Problem]:
    """`value` (a field that can only carry values: an account, a mount, setup lines, a path, a command-line
    argument) holding the value of one of this process's secret environment variables, as problems: such a value
    would be written (a job script, a configuration, a card, a log) and printed, and there is no way to pass it
    by reference from a value field. Mappings, lists, dataclasses (a tunnel) and NeMo-Run configurations (a task's
    `__arguments__`) are searched; the value is never echoed, only the name of the variable that holds it."""
    held = secret_environment()
    if not held:
        return []
    problems: list[Problem] = []
    _search_secrets(field, value, held, problems, depth=0)
    return problems


#: How deep secret_value_problems looks into nested values: a recipe's configuration is about 6 levels deep.
_SEARCH_DEPTH = 12


def _search_secrets(field: str, value: Any, held: Mapping[str, str], problems: list[Problem], depth: int) -> None:
    if depth > _SEARCH_DEPTH:
        return
    if isinstance(value, str):
        holder = next((name for name, secret in held.items() if secret in value), None)
        if holder:
            problems.append(
                Problem(
                    field,
                    REDACTED_VALUE,
                    f"holds the value of the secret environment variable {holder}: given here it would be written "
                    "into job scripts, configurations, cards or logs, and printed.",
                    "pass secrets by reference, never by value: name the variable (secrets=[NAME] of a Slurm or "
                    "local executor, a Kubernetes Secret in secrets={NAME: 'secret-name/key'}) and read "
                    f"{holder} from the job's environment instead of writing its value into {field}.",
                )
            )
        return
    items: Iterable[tuple[str, Any]]
    if isinstance(value, Mapping):
        items = ((f"{field}.{key}", item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((field, item) for item in value)
    elif hasattr(value, "__arguments__"):  # a NeMo-Run (fiddle) configuration: run.Partial, run.Config
        items = ((f"{field}.{key}", item) for key, item in value.__arguments__.items())
    elif is_dataclass(value) and not isinstance(value, type):  # a dataclass instance (a tunnel)
        items = ((f"{field}.{f.name}", getattr(value, f.name, None)) for f in fields(value))
    else:
        return
    for name, item in items:
        _search_secrets(name, item, held, problems, depth + 1)


class NemoRecipesError(Exception):
    """Base of every error this package raises on purpose; the CLI reports each as one message, without a
    traceback: 2 for an InputError, 1 for a RunFailedError."""


class InputError(NemoRecipesError, ValueError):
    """The user's input is refused (the CLI's exit code 2), said in a message; InvalidInputError carries Problems."""


class InvalidInputError(InputError):
    """Input with one or more problems (a recipe, an override, a plan, and the base of the other kinds);
    `problems` holds all of them at once."""

    def __init__(self, problems: Iterable[Problem], *, context: str = ""):
        self.problems = list(problems)
        self.context = context
        errors = [p for p in self.problems if p.severity == ERROR]
        head = f"{context}: " if context else ""
        lines = [f"{head}{len(errors)} problem(s) found"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class InvalidConfigError(InvalidInputError):
    """Configuration around a recipe that is wrong: an executor's arguments, a cluster profile file and its YAML, a
    kubeconfig."""


class RunFailedError(NemoRecipesError, RuntimeError):
    """Something outside the user's input failed (a training process, a tool it runs): the CLI's exit code 1, as
    one message that says what failed and where its log is."""


#: Deprecated: the names before 0.2, the same classes (see the module's docstring).
RecipeError = InputError
InvalidRecipeError = InvalidInputError


def raise_if_any(problems: Iterable[Problem], *, context: str = "") -> None:
    """Raise one InvalidInputError carrying `problems`, when there are any."""
    problems = list(problems)
    if problems:
        raise InvalidInputError(problems, context=context)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest candidate, or '' when none is close."""
    import difflib  # only when a name is wrong: every command starts without it

    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Longest repr of a value quoted in a message: a pasted file or a runaway number must not flood the terminal.
_SHOWN_CHARS = 200
# Integers beyond this many bits are quoted by their size: Python refuses to print integers of over 4300 digits.
_SHOWN_BITS = 256
# repr's escape of a byte that arrived undecodable (a lone surrogate U+DC80..U+DCFF, "surrogateescape"), after an even
# run of backslashes (a typed backslash is doubled by repr, so `\\udc80` as typed is not one).
_ESCAPED_BYTE = re.compile(r"(?<!\\)((?:\\\\)*)\\udc([89a-f][0-9a-f])")


def shown(value: Any) -> str:
    """`repr(value)` for a message: a huge integer by its number of digits, a long repr cut in the middle."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _SHOWN_BITS:
        return f"<an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    try:
        text = repr(value)
    except Exception:  # an object whose repr fails is still named by its type
        text = f"<{type(value).__name__}>"
    # The undecodable bytes of an argument stay bytes, so that the value reads as the user typed it (the output
    # streams write them back unchanged, see cli/_output.py) instead of as `\\udcc3\\udcbc`.
    text = _ESCAPED_BYTE.sub(lambda m: m.group(1) + chr(0xDC00 + int(m.group(2), 16)), text)
    if looks_secret(text):
        return REDACTED_VALUE
    if len(text) > _SHOWN_CHARS:
        text = f"{text[: _SHOWN_CHARS - 40]}...{text[-30:]} ({len(text)} characters)"
    return text


# A value that looks like a credential (a token given where a number or a name belongs) is never quoted back:
# messages end up in terminals, CI logs and issue reports.
REDACTED_VALUE = "<redacted: looks like a secret>"


def looks_secret(text: str) -> bool:
    return token_like(text) is not None


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data: containers recursively, anything else unknown (or a number JSON cannot carry:
    NaN, infinity, a huge integer) as its repr."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _SHOWN_BITS:
        return shown(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str) and looks_secret(value):
        return REDACTED_VALUE
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


_T = TypeVar("_T")


def known(value: Optional[_T], why: str) -> _T:
    """`value`, which cannot be None here (`why` says why). A None is a defect of this package, not of the user's
    input: it is raised as one, also under `python -O`, where an assert would vanish."""
    if value is None:
        raise RuntimeError(f"internal error, please report it: {why}")
    return value
