"""The checks of a recipe's values, as user input: each field's type and bounds, the optimizer, the blend's shape,
the names that become directories, and the token schedule; every problem at once, each a `Problem` with its fix.

Standard library only and no import of the catalog: `RecipeSpec.__post_init__` calls `type_problems`, which reads
the field types from the spec's own class."""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Literal, TypeGuard

from nemo_recipes import budget
from nemo_recipes.errors import Problem, looks_secret

#: Longest checkpoint interval by time a recipe takes (checkpoint_every_minutes).
MINUTES_PER_YEAR = 525_600

_HINTS: dict[str, Any] = {}


def _hints(spec: Any) -> dict[str, Any]:
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(type(spec)))
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
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(_matches(v, args[0]) for v in value)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


_POSITIVE_INTS = {
    "num_layers",
    "rotary_base",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "seq_length",
    "vocab_size",
    "make_vocab_size_divisible_by",
    "tensor_parallel",
    "pipeline_parallel",
    "context_parallel",
    "micro_batch_size",
    "global_batch_size",
    "num_nodes",
    "num_gpus_per_node",
    "warmup_tokens",
    "decay_tokens",
    "train_tokens",
}

# Upper bounds of integer fields. Each lies far beyond any model or cluster trained so far, so a value above it is a
# typo (an extra zero, a unit); the bounds also keep the planner's searches, which step through divisors, layers and
# micro batches, instant, and every count inside the 64-bit integers Megatron, PyTorch and NumPy compute with.
INT64_MAX = 2**63 - 1
COUNT_MAX = 4096  # layers, heads, parallel sizes, micro batch, GPUs per node: the deepest models have ~1000 layers
_NODES_MAX = 2**17  # 131,072 nodes: over a million GPUs at 8 per node; the largest clusters have ~100,000 GPUs
_SIZE_MAX = 2**24  # hidden, FFN, vocabulary, sequence, global batch: largest used ~10^5 (context: 10^7 tokens)
INT_BOUNDS: dict[str, int] = {
    **dict.fromkeys(
        (
            "num_layers",
            "num_attention_heads",
            "num_query_groups",
            "kv_channels",
            "tensor_parallel",
            "pipeline_parallel",
            "context_parallel",
            "virtual_pipeline",
            "recompute_num_layers",
            "micro_batch_size",
            "num_gpus_per_node",
        ),
        COUNT_MAX,
    ),
    "num_nodes": _NODES_MAX,
    **dict.fromkeys(
        (
            "hidden_size",
            "ffn_hidden_size",
            "vocab_size",
            "make_vocab_size_divisible_by",
            "seq_length",
            "global_batch_size",
        ),
        _SIZE_MAX,
    ),
    **dict.fromkeys(("warmup_tokens", "decay_tokens", "train_tokens", "checkpoint_every_steps"), INT64_MAX),
    "rotary_base": 2**40,  # published bases reach 10^6-10^8 (long-context models)
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
    problems = []
    for name, hint in _hints(spec).items():
        value = getattr(spec, name)
        if not _matches(value, hint):
            problems.append(Problem(name, value, f"must be {_describe(hint)}.", f"set {name} to {_describe(hint)}."))
        elif name in _POSITIVE_INTS and value < 1:
            problems.append(Problem(name, value, "must be at least 1.", f"set {name} to a positive integer."))
        elif _is_number(value) and name not in INT_BOUNDS and not is_finite(value):
            problems.append(Problem(name, value, "must be a finite number.", f"set {name} to a finite number."))
    for name in (
        "virtual_pipeline",
        "num_query_groups",
        "kv_channels",
        "recompute_num_layers",
        "checkpoint_every_steps",
    ):
        value = getattr(spec, name)
        if _is_int(value) and value < 1:
            problems.append(
                Problem(name, value, "must be at least 1 or unset.", f"set {name} to a positive integer or None.")
            )
    problems += _bound_problems(spec)
    value = spec.checkpoint_every_minutes
    # NeMo turns it into a timedelta, which overflows far beyond a year; a year is longer than any run checkpoints.
    if is_finite(value) and not 0 < value <= MINUTES_PER_YEAR:
        problems.append(
            Problem(
                "checkpoint_every_minutes",
                value,
                f"must be a positive number of minutes up to a year ({MINUTES_PER_YEAR:,}), or unset.",
                "set checkpoint_every_minutes to e.g. 15, or None for no time interval.",
            )
        )
    problems += _optimizer_problems(spec)
    for name in ("min_lr_ratio", "adam_beta1", "adam_beta2", "hidden_dropout", "attention_dropout"):
        value = getattr(spec, name)
        if _is_number(value) and not 0 <= value < 1:
            problems.append(Problem(name, value, "must be in [0, 1).", f"set {name} between 0 and 1."))
    if is_finite(spec.rotary_percent) and not 0 < spec.rotary_percent <= 1:
        problems.append(
            Problem(
                "rotary_percent",
                spec.rotary_percent,
                "must be in (0, 1]: the share of each head's channels that RoPE rotates.",
                "set rotary_percent to 1.0 (all channels, as Llama) or e.g. 0.5.",
            )
        )
    if is_finite(spec.norm_epsilon) and not 0 < spec.norm_epsilon < 1:
        problems.append(
            Problem(
                "norm_epsilon",
                spec.norm_epsilon,
                "must be in (0, 1): the norms add it to the variance they divide by (published: 1e-6 to 1e-5).",
                "set norm_epsilon to e.g. 1e-5 (Megatron-Core's default) or 1e-6.",
            )
        )
    if isinstance(spec.name, str):  # otherwise reported as a type problem above
        problems += plain_name_problems("name", spec.name)
    if not problems:  # cross-field checks need every field to be of its type
        problems += _schedule_problems(spec)
    return problems


def _bound_problems(spec: Any) -> list[Problem]:
    problems = []
    for name, bound in INT_BOUNDS.items():
        value = getattr(spec, name)
        if _is_int(value) and value > bound:
            why = (
                "Megatron, PyTorch and NumPy count it in 64-bit integers"
                if bound == INT64_MAX
                else "far beyond any model or cluster trained so far: most likely a typo"
            )
            problems.append(
                Problem(name, value, f"is larger than {bound:,} ({why}).", f"set {name} to at most {bound:,}.")
            )
    return problems


def _optimizer_problems(spec: Any) -> list[Problem]:
    problems = []
    for name in ("max_lr", "adam_eps", "clip_grad"):
        value = getattr(spec, name)
        if is_finite(value) and not value > 0:
            problems.append(Problem(name, value, "must be positive.", f"set {name} to a number above 0."))
    # An AdamW step moves each weight by about the learning rate; weights start near 0.006-0.02, so a rate of 1 or
    # more changes every weight by more than its own size and training diverges at once (published rates: 1e-5-1e-2).
    if is_finite(spec.max_lr) and spec.max_lr >= 1:
        problems.append(
            Problem(
                "max_lr",
                spec.max_lr,
                "must be below 1: AdamW moves each weight by about max_lr per step, more than the weights' own size.",
                "set max_lr to e.g. 3e-4.",
            )
        )
    # Adam divides by sqrt(v) + eps, where sqrt(v) is about a gradient's size (1e-3 and less): an eps of 1 or more
    # drowns it and leaves momentum SGD with a learning rate divided by eps.
    if is_finite(spec.adam_eps) and spec.adam_eps >= 1:
        problems.append(
            Problem(
                "adam_eps",
                spec.adam_eps,
                "must be below 1: it would drown the gradient statistics Adam divides by.",
                "set adam_eps to e.g. 1e-8.",
            )
        )
    wd = spec.weight_decay
    if is_finite(wd) and wd < 0:
        problems.append(
            Problem(
                "weight_decay",
                wd,
                "must be 0 or more (a negative decay grows the weights).",
                "set weight_decay to e.g. 0.1, or 0 for none.",
            )
        )
    # Decoupled weight decay multiplies every weight by (1 - lr x wd) each step: at 1 or more it zeroes or flips them.
    elif is_finite(wd) and is_finite(spec.max_lr) and 0 < spec.max_lr < 1 and spec.max_lr * wd >= 1:
        problems.append(
            Problem(
                "weight_decay",
                wd,
                f"max_lr x weight_decay = {spec.max_lr * wd:g} is 1 or more: "
                "AdamW would zero or flip the sign of every weight each step.",
                f"set weight_decay below {1 / spec.max_lr:g} (GPT-3: 0.1).",
            )
        )
    return problems


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
