"""The checks of a recipe's values, as user input: each field's type and bounds, the optimizer, the blend's shape,
the names that become directories, and the token schedule; every problem at once, each a `Problem` with its fix.

Standard library only and no import of the catalog: `RecipeSpec.__post_init__` calls `type_problems`, which reads
the field types from the spec's own class."""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Callable, Literal, TypeGuard

from nemo_recipes import budget
from nemo_recipes.errors import Problem, looks_secret
from nemo_recipes.field_limits import COUNT_MAX, INT64_MAX, MINUTES_PER_YEAR  # noqa: F401  (re-exported)
from nemo_recipes.recipe_fields import FIELDS, RECIPE_FIELDS

_HINTS: dict[str, Any] = {}


def field_types(spec_class: type) -> dict[str, Any]:
    """The recipe class's field -> type hint, read once (its annotations are strings, evaluated by `get_type_hints`:
    a millisecond for the catalog's 89 fields)."""
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(spec_class))
    return _HINTS


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("None" if a is type(None) else _describe(a) for a in args)
    if origin is tuple:
        return f"a list of {_describe(args[0])}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(hint, str(hint))


def _matches(value: Any, hint: Any) -> bool:
    return _matcher(hint)(value)


_MATCHERS: dict[Any, Callable[[Any], bool]] = {}


def _matcher(hint: Any) -> Callable[[Any], bool]:
    """A test of whether a value is of `hint`, worked out once per hint: every recipe built (the catalog's rows at
    import, each override) tests each of its fields, and reading a hint's origin and arguments each time cost most of
    that."""
    matcher = _MATCHERS.get(hint)
    if matcher is None:
        matcher = _MATCHERS[hint] = _new_matcher(hint)
    return matcher


def _new_matcher(hint: Any) -> Callable[[Any], bool]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return args.__contains__
    if origin in (typing.Union, types.UnionType):
        alternatives = tuple(_matcher(a) for a in args)
        return lambda value: any(m(value) for m in alternatives)
    if hint is type(None):
        return lambda value: value is None
    if origin is tuple:
        item = _matcher(args[0])
        return lambda value: isinstance(value, tuple) and all(item(v) for v in value)
    if hint is bool:
        return lambda value: isinstance(value, bool)
    if hint is int:
        return lambda value: isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return _is_number
    return lambda value: isinstance(value, hint)


#: Each integer field's largest value (`recipe_fields`: every field's bounds are declared there).
INT_BOUNDS: dict[str, int] = {
    f.name: int(limit.value)
    for f in RECIPE_FIELDS
    for limit in f.limits
    if limit.op == "<=" and isinstance(limit.value, int)
}

# What a recipe, experiment or log name may hold: it becomes a directory name (NeMo's log directory, NeMo-Run's
# experiment directory), so a separator or '..' would write outside the directory it belongs in, and NeMo-Run
# writes that directory unquoted into the Slurm script's srun line, so a space, quote, '$' or ';' would split or run
# there. Letters of any script, digits, '_', '-', '.' and '+' mean nothing to either; nor do the bytes >= 0x80 that
# Python keeps as surrogates (U+DC80-U+DCFF) when a C locale cannot decode an argument (UTF-8 letters, read as bytes).
_PLAIN_NAME = re.compile("[\\w.+\\-\udc80-\udcff]+")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> TypeGuard[float]:
    """True for a number that is neither NaN nor infinite; an int too large for a float counts as infinite."""
    try:
        return _is_number(value) and math.isfinite(value)
    except OverflowError:
        return False


def type_problems(spec: Any) -> list[Problem]:
    """Each field of its type and within its bounds (`recipe_fields`), then what needs several fields."""
    problems = []
    for name, hint, matches, takes_float in _checked_fields(spec):
        value = getattr(spec, name)
        if not matches(value):
            problems.append(Problem(name, value, f"must be {_describe(hint)}.", f"set {name} to {_describe(hint)}."))
        elif _is_number(value) and takes_float and not is_finite(value):
            problems.append(Problem(name, value, "must be a finite number.", f"set {name} to a finite number."))
        elif _is_number(value):
            problems += _limit_problems(name, value)
    problems += _optimizer_problems(spec)
    if isinstance(spec.name, str):  # otherwise reported as a type problem above
        problems += plain_name_problems("name", spec.name)
    if not problems:  # cross-field checks need every field to be of its type
        problems += _schedule_problems(spec)
    return problems


_CHECKED: list[tuple[str, Any, Callable[[Any], bool], bool]] = []


def _checked_fields(spec: Any) -> list[tuple[str, Any, Callable[[Any], bool], bool]]:
    """Each field's name, type hint, type test and whether it takes a float: worked out at the first check."""
    if not _CHECKED:
        _CHECKED.extend((n, h, _matcher(h), _takes_float(h)) for n, h in field_types(type(spec)).items())
    return _CHECKED


def _takes_float(hint: Any) -> bool:
    return hint is float or float in typing.get_args(hint)


def _limit_problems(name: str, value: Any) -> list[Problem]:
    """The first of the field's limits (`recipe_fields`) that `value` breaks, as a problem: a value breaks at most
    one side of a range."""
    for limit in FIELDS[name].limits:
        if not limit.holds(value):
            return [Problem(name, value, limit.why, limit.fix.format(name=name))]
    return []


def _optimizer_problems(spec: Any) -> list[Problem]:
    """Decoupled weight decay multiplies every weight by (1 - lr x wd) each step: at 1 or more it zeroes or flips
    them (each value alone is checked against its bounds)."""
    wd, lr = spec.weight_decay, spec.max_lr
    if is_finite(wd) and is_finite(lr) and wd >= 0 and 0 < lr < 1 and lr * wd >= 1:
        return [
            Problem(
                "weight_decay",
                wd,
                f"max_lr x weight_decay = {lr * wd:g} is 1 or more: "
                "AdamW would zero or flip the sign of every weight each step.",
                f"set weight_decay below {1 / lr:g} (GPT-3: 0.1).",
            )
        ]
    return []


#: Suffixes Megatron appends to a prefix itself (and the manifest's, written beside them).
DATASET_SUFFIXES = (".bin", ".idx", ".manifest.json")


def data_problems(spec: Any) -> list[Problem]:
    """The blend's shape, read from the spec alone (no file is opened): one positive weight per path, or a budget
    (`budget`: one positive entry per path, in epochs or tokens, not with weights; tokens that add up to the run's),
    no empty path, a prefix without Megatron's suffixes, a tokenizer path that is not blank. Every command line that
    takes recipe fields checks these (`show` included); the planner adds what the files say (`plan.data`)."""
    paths, weights = spec.data_paths, spec.data_weights
    problems = []
    if weights and not paths:
        problems.append(
            Problem(
                "data_weights",
                list(weights),
                "blend weights given without data_paths.",
                "give one data path per weight, or remove data_weights.",
            )
        )
    elif weights and len(weights) != len(paths):
        problems.append(
            Problem(
                "data_weights",
                list(weights),
                f"{len(weights)} weights for {len(paths)} data paths.",
                f"give exactly {len(paths)} weights (one per path), or none for an equal blend.",
            )
        )
    bad = [w for w in weights if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0)]
    if bad:
        problems.append(
            Problem(
                "data_weights",
                list(weights),
                f"weights must be positive numbers; got {bad}.",
                "use positive weights (they need not sum to 1; Megatron normalises them).",
            )
        )
    # Each weight finite, their sum not: every share would be NaN.
    elif weights and not math.isfinite(sum(float(w) for w in weights)):
        problems.append(
            Problem(
                "data_weights",
                list(weights),
                "the weights' sum overflows a float.",
                "use relative weights of ordinary size (e.g. [1, 1]: Megatron normalises them).",
            )
        )
    problems += budget.shape_problems(paths, weights, spec.data_epochs, spec.data_tokens)
    if spec.data_tokens and not problems:
        # Tokens need no file to become weights; epochs need each source's tokens (`plan.data`, the recipe plugin).
        wanted = budget.wanted_tokens("data_tokens", spec.data_tokens, ())
        problems += budget.agreement_problems(
            "data_tokens",
            spec.data_tokens,
            wanted,
            spec.train_steps,
            spec.global_batch_size,
            spec.seq_length,
            spec.decay_tokens,
        )
    empty = [p for p in paths if not str(p).strip()]
    if empty:
        problems.append(
            Problem(
                "data_paths",
                list(paths),
                "contains an empty path.",
                "give Megatron .bin/.idx prefixes, or leave data_paths empty for mock data.",
            )
        )
    for path in paths:
        suffix = next((s for s in DATASET_SUFFIXES if str(path).endswith(s)), None)
        if suffix:
            problems.append(
                Problem(
                    "data_paths",
                    path,
                    f"a prefix names a dataset without its file suffix; Megatron appends .bin and .idx itself and "
                    f"would look for {str(path).rsplit('/', 1)[-1]}.bin.",
                    f"drop the suffix: {str(path)[: -len(suffix)]}",
                )
            )
    if spec.tokenizer_path is not None and not spec.tokenizer_path.strip():
        problems.append(
            Problem(
                "tokenizer_path",
                spec.tokenizer_path,
                "is blank.",
                "give a local Hugging Face tokenizer directory or a SentencePiece .model, or leave tokenizer_path "
                "out (mock data's NullTokenizer).",
            )
        )
    return problems


#: The longest name in bytes: NeMo-Run's experiment directory is NAME_<timestamp> and its job files add a few words
#: more, all under the 255-byte file-name limit of Linux file systems.
MAX_NAME_BYTES = 128


def plain_name_problems(field: str, name: Any) -> list[Problem]:
    """Problems unless `name` can be one directory name (a recipe, experiment or log name): NeMo-Run and NeMo make
    directories of them, so a separator or '..' would write outside the directory they belong in."""
    if not isinstance(name, str):
        return [Problem(field, name, "must be a string.", f"give {field} as a name.")]
    if name in (".", "..") or not _PLAIN_NAME.fullmatch(name):
        return [
            Problem(
                field,
                name,
                "must be a plain name: it becomes a directory name and a word of the job script, so no '/' or "
                "'\\', not '.' or '..', no spaces, quotes, shell characters or control characters.",
                f"use letters, digits, '_', '-' and '.', e.g. {field}=gpt_7b_run1.",
            )
        ]
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > MAX_NAME_BYTES:
        return [
            Problem(
                field,
                f"{name[:40]}... ({size} bytes)",
                f"is longer than {MAX_NAME_BYTES} bytes: NeMo-Run makes a directory of it with a timestamp added "
                "and files named after it, and a file name holds at most 255 bytes.",
                # A name that looks like a token is shown redacted: the example does not quote its start either.
                f"give a shorter name, e.g. {field}={'gpt_7b_run1' if looks_secret(name) else name[:24]}.",
            )
        ]
    return []


def _schedule_problems(spec: Any) -> list[Problem]:
    """The token budgets must nest: warmup <= decay <= train, and one step no larger than the run. NeMo's
    CosineAnnealing would otherwise run another schedule than the spec says, without a word: a decay beyond the run is
    cut to the run, a warmup beyond the decay drops to min LR right after warmup, a step beyond the run trains more
    tokens than asked for."""
    problems = []
    warmup, decay, train, step = spec.warmup_tokens, spec.decay_tokens, spec.train_tokens, spec.tokens_per_step
    if step > train:
        problems.append(
            Problem(
                "global_batch_size",
                spec.global_batch_size,
                f"one step (global batch x seq_length = {step:,} tokens) holds more than the whole run "
                f"(train_tokens={train:,}).",
                f"lower global_batch_size to at most {max(1, train // spec.seq_length):,}, or raise train_tokens.",
            )
        )
    if warmup > train:
        problems.append(
            Problem(
                "warmup_tokens",
                warmup,
                f"the warmup is longer than the whole run (train_tokens={train:,}).",
                "set warmup_tokens to a small share of train_tokens (GPT-3: 375M of 300B), or raise train_tokens.",
            )
        )
    elif warmup > decay:
        problems.append(
            Problem(
                "warmup_tokens",
                warmup,
                f"the warmup outlasts the cosine decay, which ends at "
                f"decay_tokens={decay:,}: the learning rate would drop to min LR right after warmup.",
                "set warmup_tokens below decay_tokens, or raise decay_tokens.",
            )
        )
    if decay > train:
        problems.append(
            Problem(
                "decay_tokens",
                decay,
                f"the cosine decay ends after the run (train_tokens={train:,}); "
                "NeMo would silently decay to min LR by the end of the run instead.",
                f"set decay_tokens to at most train_tokens (GPT-3: 260B of 300B), e.g. "
                f"decay_tokens={train * 13 // 15:,}, or raise train_tokens.",
            )
        )
    return problems
