"""Blends by budget: what a user wants of each data source, as epochs (`data_epochs`) or tokens (`data_tokens`),
turned into the blend weights Megatron samples by.

Megatron draws each source's share (its normalised weight) of the samples the run trains, whatever the source's
size. So the tokens wanted from source i (tokens: as given; epochs: epochs x the source's tokens) give the weights
wanted_i / sum(wanted), and the budget is met only when sum(wanted) is what the run trains:
train_steps x global_batch_size x seq_length. train_steps is a whole number, so a budget can agree with the run to
within one global batch and no better; that is the tolerance (`agreement_problems`).

Standard library only: the catalog checks a budget's shape here, the planner and the recipe plugin turn it into
weights, and the job does (`blend_by_epochs`) when no plugin did it before.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from nemo_recipes.errors import InvalidInputError, Problem

#: The recipe fields of a budget, one entry per data_paths entry; at most one of them, and never with data_weights.
FIELDS = ("data_epochs", "data_tokens")


def given(spec: Any) -> Optional[str]:
    """The budget field `spec` sets (the first, when both are: the catalog refuses that), or None."""
    return next((name for name in FIELDS if getattr(spec, name)), None)


def shape_problems(paths: Sequence[Any], weights: Sequence[Any], epochs: Sequence[Any], tokens: Sequence[Any]) -> list:
    """A budget's shape, from the values alone: one field, not with data_weights, one finite positive entry per
    path. The catalog's `data_problems` reports these with the blend's other problems."""
    problems = []
    if epochs and tokens:
        problems.append(
            Problem(
                "data_tokens",
                list(tokens),
                "given with data_epochs: a budget is in epochs or in tokens, not both.",
                "give data_epochs (passes over each source) or data_tokens (tokens of each source), not both.",
            )
        )
    for name, asked in (("data_epochs", epochs), ("data_tokens", tokens)):
        if not asked:
            continue
        unit = "epochs" if name == "data_epochs" else "tokens"
        if weights:
            problems.append(
                Problem(
                    name,
                    list(asked),
                    "given with data_weights: the budget decides the weights (wanted tokens / their sum).",
                    f"give either data_weights (shares of the run) or {name} ({unit} of each source), not both.",
                )
            )
        if not paths:
            problems.append(
                Problem(
                    name, list(asked), f"{unit} given without data_paths.", f"give one data path per entry of {name}."
                )
            )
        elif len(asked) != len(paths):
            problems.append(
                Problem(
                    name,
                    list(asked),
                    f"{len(asked)} entries for {len(paths)} data paths.",
                    f"give exactly {len(paths)} entries of {unit}, one per data path, in the order of data_paths.",
                )
            )
        bad = [a for a in asked if not _positive(a)]
        if bad:
            problems.append(
                Problem(
                    name,
                    list(asked),
                    f"entries must be positive, finite numbers of {unit}; got {bad}.",
                    f"give each source's {unit} as a number above 0 (drop a source you want none of from data_paths).",
                )
            )
        elif not math.isfinite(sum(float(a) for a in asked)):
            problems.append(
                Problem(name, list(asked), "the entries' sum overflows a float.", f"give {unit} of an ordinary size.")
            )
    return problems


def _positive(value: Any) -> bool:
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    except OverflowError:  # an int too large for a float
        return False


def wanted_tokens(field: str, asked: Sequence[float], source_tokens: Sequence[Optional[int]]) -> list[float]:
    """Tokens wanted from each source: data_tokens as given, data_epochs x each source's tokens."""
    if field == "data_tokens":
        return [float(a) for a in asked]
    return [float(a) * float(t or 0) for a, t in zip(asked, source_tokens, strict=True)]


def weights_of(wanted: Sequence[float]) -> tuple[float, ...]:
    """The normalised weights that draw `wanted` tokens of each source (in proportion)."""
    total = math.fsum(wanted)
    return tuple(w / total for w in wanted)


def agreement_problems(  # noqa: PLR0913 (the run's three numbers, named as the recipe names them)
    field: str,
    asked: Sequence[float],
    wanted: Sequence[float],
    train_steps: int,
    global_batch_size: int,
    seq_length: int,
    decay_tokens: Optional[int] = None,
) -> list[Problem]:
    """The budget against what the run trains (train_steps x global_batch_size x seq_length), within one global
    batch: the rounding train_steps forces, and the least a budget can be missed by. The fix names both ways: the
    run's length (train_tokens) or the budget scaled to the run."""
    step = global_batch_size * seq_length
    trained = train_steps * step
    total = math.fsum(wanted)
    if abs(trained - total) < step:
        return []
    steps = max(1, math.ceil(total / step))
    scaled = ", ".join(f"{a * trained / total:.6g}" for a in asked)
    shares = ", ".join(f"{w:,.0f}" for w in wanted)
    longer = "" if decay_tokens is None or decay_tokens <= total else "; decay_tokens at most that"
    return [
        Problem(
            field,
            list(asked),
            f"asks for {total:,.0f} tokens in all ({shares} from the sources, in order), but the run trains "
            f"{trained:,} (train_steps {train_steps:,} x global_batch_size {global_batch_size:,} x seq_length "
            f"{seq_length:,}): Megatron draws each source's share of what the run trains, so every source would get "
            f"{trained / total:.3g} x what was asked. A budget must agree with the run within one global batch "
            f"({step:,} tokens).",
            f"set train_tokens={math.ceil(total)} ({steps:,} steps{longer}), or scale the budget to the run: "
            f"{field}=[{scaled}].",
        )
    ]


def source_tokens(path: str) -> int:
    """The tokens of the prepared dataset at `path`: its manifest's count, else its `.idx` header's (the same sum of
    sequence lengths Megatron samples from); InvalidInputError (data_paths) when neither can be read."""
    from nemo_recipes.data.manifest import index_summary, manifest_path, read_manifest

    if manifest_path(path).is_file():
        return read_manifest(path).tokens
    return index_summary(path).tokens


def no_count_problem(field: str, path: str) -> Problem:
    """Epochs of a source whose token count cannot be read cannot become a weight."""
    return Problem(
        field,
        path,
        "epochs of this source cannot be turned into a weight: its token count cannot be read (no manifest, no "
        "readable .idx), or is 0.",
        "prepare it with `nemo-recipes data prepare` (its manifest records its tokens), or give data_weights instead.",
    )


def blend_by_epochs(
    paths: Sequence[str], data_epochs: Sequence[float], train_steps: int, global_batch_size: int, seq_length: int
) -> list:
    """Megatron's zipped blend [w1, path1, w2, path2, ...] for epochs of each source, the token counts read from the
    sources' manifests. The recipe's data module holds a call of this function where building a recipe cannot read
    them (it opens no file); the recipe plugin replaces the call by its result before submitting, and a job built
    without the plugin calls it when it builds its data module, on the machine that reads the data anyway.
    InvalidInputError when the budget is malformed, a count cannot be read, or the budget disagrees with the run."""
    problems = shape_problems(paths, (), data_epochs, ())
    counts: list[Optional[int]] = []
    if not problems:
        for path in paths:
            try:
                count: Optional[int] = source_tokens(str(path))
            except (InvalidInputError, OSError):
                count = None
            counts.append(count)
            if not count:
                problems.append(no_count_problem("data_epochs", str(path)))
    if not problems:
        wanted = wanted_tokens("data_epochs", data_epochs, counts)
        problems += agreement_problems("data_epochs", data_epochs, wanted, train_steps, global_batch_size, seq_length)
    if problems:
        raise InvalidInputError(problems, context="data blend by epochs")
    weights = weights_of(wanted)
    return [item for weight, path in zip(weights, paths, strict=True) for item in (weight, str(path))]
