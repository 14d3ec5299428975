"""Refitting the throughput model's global efficiencies (`throughput.ModelConstants`) on measured runs, and the
calibration file that carries a refit to `nemo-recipes plan`.

One fit for everyone: `benchmarks/planner_accuracy.py` refits on the published rows of
`benchmarks/data/calibration.csv` with `refit`, and `nemo-recipes plan --calibrate CARD...` on a user's own runs (the
cards `watch --card` writes) with the same `refit`. The fit is coordinate descent on a grid (`GRID`), minimising the
mean absolute error of the predicted step time (or tokens/s), restarted from a few values of the per-step cost
(`RESTARTS`). `power_exponent` is derived (power ~ clock^3), never fitted.

The calibration file is JSON (standard library: `plan` stays instant with one loaded), written by `--calibrate` and
checked by `read_calibration` before `plan` trusts it: unknown keys and values outside `RANGES` are refused with
field, value and fix. Standard library and the planner only.
"""

from __future__ import annotations

import json
import math
import os
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Optional

from nemo_recipes.catalog import Precision, RecipeSpec
from nemo_recipes.errors import InvalidConfigError, InvalidInputError, Problem, shown
from nemo_recipes.plan.calibration_path import ENV_VAR, default_calibration_path  # noqa: F401 (its names here too)
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.throughput import CONSTANTS, ModelConstants, Throughput, estimate_throughput
from nemo_recipes.user_paths import not_regular

# The grid each efficiency is refitted on (coordinate descent visits every value of one constant at a time).
GRID: dict[str, tuple[float, ...]] = {
    "matmul": tuple(round(0.60 + 0.01 * i, 2) for i in range(36)),  # 0.60 .. 0.95
    "fp8_matmul": tuple(round(0.40 + 0.01 * i, 2) for i in range(51)),  # 0.40 .. 0.90
    "hbm": tuple(round(0.50 + 0.05 * i, 2) for i in range(10)),  # 0.50 .. 0.95
    "comm": tuple(round(0.40 + 0.05 * i, 2) for i in range(11)),  # 0.40 .. 0.90
    "tp_overlap": tuple(round(0.05 * i, 2) for i in range(21)),  # 0 .. 1
    "step_overhead": tuple(round(0.01 * i, 2) for i in range(16)),  # 0 .. 0.15 s
}
MAX_SWEEPS = 8
# Extra starting points for the descent. The fixed per-step cost trades against every efficiency at once (a long
# valley that one-constant-at-a-time moves leave slowly), so the descent also starts from a few values of it.
RESTARTS: tuple[dict[str, float], ...] = ({"step_overhead": 0.0}, {"step_overhead": 0.05}, {"step_overhead": 0.1})


@dataclass(frozen=True)
class Case:
    """One measurement the model is scored on: the plan, what was measured and which prediction to compare."""

    id: str
    source: str
    spec: RecipeSpec
    cluster: Cluster
    stack: str
    metric: str  # "step_s" or "tok/s/gpu"
    published: float
    assumptions: tuple[str, ...] = ()

    def predict(self, constants: ModelConstants = CONSTANTS) -> Throughput:
        return estimate_throughput(self.spec, self.cluster, stack=self.stack, constants=constants)

    def value(self, result: Throughput) -> float:
        return result.step_time_s if self.metric == "step_s" else result.tokens_per_s_per_gpu

    def error_pct(self, constants: ModelConstants = CONSTANTS) -> float:
        return 100.0 * (self.value(self.predict(constants)) - self.published) / self.published


def mean_abs_error(cases: list[Case], constants: ModelConstants) -> float:
    return sum(abs(c.error_pct(constants)) for c in cases) / len(cases)


def refit(
    cases: list[Case],
    start: ModelConstants = CONSTANTS,
    grid: Optional[dict[str, tuple[float, ...]]] = None,
    restarts: tuple[dict[str, float], ...] = RESTARTS,
) -> ModelConstants:
    """The constants minimising the mean absolute error on `cases`: coordinate descent over `grid`, one constant
    at a time, until a sweep changes nothing, from `start` and from each of `restarts` (the best result wins).
    Constants no case depends on keep their starting value."""
    grid = grid or GRID
    results = [_descend(cases, begin, grid) for begin in (start, *(start.replace(**r) for r in restarts))]
    return min(results, key=lambda fitted: mean_abs_error(cases, fitted))


def _descend(cases: list[Case], start: ModelConstants, grid: dict[str, tuple[float, ...]]) -> ModelConstants:
    best, score = start, mean_abs_error(cases, start)
    for _ in range(MAX_SWEEPS):
        moved = False
        for name in grid:
            for value in grid[name]:
                if value == getattr(best, name):
                    continue
                trial = best.replace(**{name: value})
                trial_score = mean_abs_error(cases, trial)
                if trial_score < score - 1e-9:
                    best, score, moved = trial, trial_score, True
        if not moved:
            break
    return best


def held_out_errors(
    cases: list[Case],
    group: Callable[[Case], str],
    start: ModelConstants = CONSTANTS,
    grid: Optional[dict[str, tuple[float, ...]]] = None,
    restarts: tuple[dict[str, float], ...] = RESTARTS,
) -> tuple[dict[str, float], dict[str, ModelConstants]]:
    """Cross-validation: for each group (`group(case)`), the constants refitted on the other groups' cases, and
    each case's error (%, by id) under the constants fitted without its group."""
    errors: dict[str, float] = {}
    folds: dict[str, ModelConstants] = {}
    for name in dict.fromkeys(group(c) for c in cases):
        folds[name] = refit([c for c in cases if group(c) != name], start=start, grid=grid, restarts=restarts)
        for c in cases:
            if group(c) == name:
                errors[c.id] = c.error_pct(folds[name])
    return errors, folds


@dataclass(frozen=True)
class Calibration:
    """A refit and what it was fitted on: the constants, and the runs, GPUs, stack and precisions they came from."""

    constants: ModelConstants
    gpus: tuple[str, ...]
    stack: str
    precisions: tuple[str, ...]
    runs: tuple[dict[str, Any], ...]
    errors: dict[str, Optional[float]]  # mean |error| % before, after, left out
    source: str = ""

    def applies_to(self, gpu: Optional[str]) -> bool:
        """Whether a plan on `gpu` uses these constants: only the GPUs the runs ran on, since an efficiency measured
        on one GPU says nothing about another's (and other clusters keep the shipped figures)."""
        return gpu is not None and gpu in self.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "constants": {f.name: getattr(self.constants, f.name) for f in fields(ModelConstants)},
            "fitted_on": {
                "gpus": list(self.gpus),
                "stack": self.stack,
                "precisions": list(self.precisions),
                "runs": [dict(r) for r in self.runs],
            },
            "mean_abs_error_pct": dict(self.errors),
        }


FORMAT = "nemo-recipes calibration 1"
#: Largest calibration file read: one run is a few hundred bytes.
MAX_BYTES = 1024 * 1024
#: The values a constant may take in a calibration file. Efficiencies are fractions of a peak: above 1 the plan would
#: beat the hardware, at 0 it would never finish; the per-step cost is seconds (a minute is far beyond any run seen).
RANGES: dict[str, tuple[float, float, bool]] = {  # name: (low, high, low excluded)
    "matmul": (0.0, 1.0, True),
    "fp8_matmul": (0.0, 1.0, True),
    "hbm": (0.0, 1.0, True),
    "comm": (0.0, 1.0, True),
    "tp_overlap": (0.0, 1.0, False),
    "power_exponent": (0.0, 1.0, False),
    "step_overhead": (0.0, 60.0, False),
    "grouped_gemm": (0.0, 1.0, True),
    "ep_overlap": (0.0, 1.0, False),
    "moe_layer_latency": (0.0, 1.0, False),
}
PRECISIONS = typing.get_args(Precision)
TOP_KEYS = ("format", "constants", "fitted_on", "mean_abs_error_pct")
FITTED_ON_KEYS = ("gpus", "stack", "precisions", "runs")
_FIX = "write the file again with `nemo-recipes plan --calibrate CARD...`, or give another file."


def write_calibration(path: "str | os.PathLike[str]", calibration: Calibration) -> Path:
    """Write `calibration` to `path` as JSON, atomically (a reader sees the old file or the new one). Raises
    OSError when the path cannot be written."""
    from nemo_recipes.yaml_files import write_atomic

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(calibration.to_dict(), indent=2) + "\n"
    return write_atomic(target, text.encode("utf-8"))


def read_calibration(path: "str | os.PathLike[str]", *, field: str = "calibration") -> Calibration:
    """The calibration in the file `path`, checked before it is trusted; every problem at once in one
    InvalidConfigError (field, value, fix): unreadable, not JSON, another format, unknown keys, a constant that is
    not a number or outside `RANGES`."""
    from nemo_recipes.plan.hardware import get_gpu
    from nemo_recipes.plan.stack import LOCAL, STACKS
    from nemo_recipes.yaml_files import YamlLimitError, json_loads

    # The stacks a calibration can be fitted for: the named programs, and `local` (this machine's, as the cards say).
    known_stacks = (*STACKS, LOCAL)

    def refuse(message: str, fix: str = _FIX) -> InvalidConfigError:
        return InvalidConfigError([Problem(field, str(path), message, fix)], context="calibration")

    wrong = not_regular(path, field, "give the path of a calibration file.")
    if wrong is not None:  # a pipe or a device would block open() or never end
        raise InvalidConfigError([wrong], context="calibration")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except (OSError, ValueError) as error:  # ValueError: a path with a NUL byte, which no file has
        reason = getattr(error, "strerror", None) or error
        raise refuse(f"cannot be read: {reason}.", "give the path of a calibration file.") from None
    if len(raw) > MAX_BYTES:
        raise refuse(f"is larger than {MAX_BYTES // 1024} KiB, far more than a calibration.")
    try:
        data = json_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, YamlLimitError) as error:
        raise refuse(f"is not a calibration's JSON ({error}).") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise refuse(f"is not a calibration file (format {shown(found)}, expected {FORMAT!r}).")

    problems: list[Problem] = []

    def problem(name: str, value: Any, message: str, fix: str = _FIX) -> None:
        problems.append(Problem(f"{field}.{name}", value, message, fix))

    for key in data:
        if key not in TOP_KEYS:
            problem(str(key), data[key], "is not a key of a calibration file.", f"keep only {', '.join(TOP_KEYS)}.")
    constants = data.get("constants")
    values: dict[str, float] = {}
    if not isinstance(constants, dict):
        problem("constants", constants, "must be a mapping of constant names to numbers.", _FIX)
        constants = {}
    for name, value in constants.items():
        if name not in RANGES:
            problem(
                f"constants.{name}",
                value,
                "is not a constant of the throughput model.",
                f"use only {', '.join(RANGES)}.",
            )
            continue
        low, high, open_low = RANGES[name]
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if (
            number is None
            or not math.isfinite(number)
            or not (low < number if open_low else low <= number)
            or (number > high)
        ):
            bound = f"{'above' if open_low else 'from'} {low:g} up to {high:g}"
            problem(f"constants.{name}", value, f"must be a number {bound}.", _FIX)
            continue
        values[name] = float(number)
    fitted = data.get("fitted_on")
    gpus: list[str] = []
    if not isinstance(fitted, dict):
        problem("fitted_on", fitted, "must be a mapping (gpus, stack, precisions, runs).", _FIX)
        fitted = {}
    for key in fitted:
        if key not in FITTED_ON_KEYS:
            problem(
                f"fitted_on.{key}", fitted[key], "is not a key of fitted_on.", f"keep only {', '.join(FITTED_ON_KEYS)}."
            )
    raw_gpus = fitted.get("gpus")
    if not isinstance(raw_gpus, list) or not raw_gpus:
        problem("fitted_on.gpus", raw_gpus, "must list the GPUs the runs ran on.", _FIX)
        raw_gpus = []
    for gpu in raw_gpus:
        try:
            gpus.append(get_gpu(str(gpu)).name)
        except InvalidInputError as error:  # a GPU this planner does not know
            problem("fitted_on.gpus", gpu, f"is not a GPU the planner knows ({_first_message(error)}).", _FIX)
    stack = fitted.get("stack")
    if stack not in known_stacks:
        known = f"use one of {', '.join(known_stacks)}."
        problem("fitted_on.stack", stack, "is not a software stack the planner knows.", known)
    precisions = fitted.get("precisions", [])
    if not isinstance(precisions, list) or not all(p in PRECISIONS for p in precisions):
        problem("fitted_on.precisions", precisions, "must be a list of precisions.", f"use {', '.join(PRECISIONS)}.")
        precisions = []
    runs = fitted.get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        problem("fitted_on.runs", runs, "must be a list of the runs fitted on.", _FIX)
        runs = []
    errors = data.get("mean_abs_error_pct", {})
    if not isinstance(errors, dict):
        problem("mean_abs_error_pct", errors, "must be a mapping.", _FIX)
        errors = {}
    if problems:
        raise InvalidConfigError(problems, context=f"calibration {path}")
    return Calibration(
        constants=CONSTANTS.replace(**values),
        gpus=tuple(gpus),
        stack=str(stack),
        precisions=tuple(precisions),
        runs=tuple(runs),
        errors=errors,
        source=str(path),
    )


def _first_message(error: Exception) -> str:
    found = getattr(error, "problems", None)
    return found[0].message.rstrip(".") if found else str(error)


# ---- from run cards (`watch --card`) to a calibration ----

#: Fewest steps a card's step time must be the median of: a handful of steps is mostly warm-up and noise.
MIN_WINDOW_STEPS = 5
#: Up to this many runs, the held-out error leaves out one run at a time; beyond, the runs are split in this many
#: folds (each fold is one refit, so the cost stays bounded).
LEAVE_ONE_OUT_UP_TO = 12
CARD_FORMAT = "nemo-recipes run card 1"
#: The device a card's run must have trained on to calibrate a GPU (watching/device.py's name for one).
DEVICE_GPU = "cuda"


def case_from_card(given: Any, where: str, stack: str) -> tuple[Optional[Case], list[Problem]]:
    """The run a card records as a Case to fit on, or the problems that keep it out (field, value, fix), all at
    once: not a card, another stack than the plan's, a precision or recipe or GPU the planner cannot time, too few
    steps, no measured step time."""
    from nemo_recipes.catalog import RECIPES
    from nemo_recipes.plan.hardware import get_gpu

    problems: list[Problem] = []

    def problem(name: str, value: Any, message: str, fix: str) -> None:
        problems.append(Problem(f"{where}: {name}", value, message, fix))

    rewrite = "write the card again with `nemo-recipes watch RUN --gpu GPU --card FILE`."
    if not isinstance(given, dict) or given.get("format") != CARD_FORMAT:
        found = given.get("format") if isinstance(given, dict) else None if given is None else type(given).__name__
        problem("format", found, f"is not a run card (expected format {CARD_FORMAT!r}).", rewrite)
        return None, problems
    card: dict[str, Any] = given
    recipe = _mapping(card.get("recipe"))
    name = recipe.get("name")
    overrides = recipe.get("overrides") or {}
    spec = None
    if name not in RECIPES:
        problem(
            "recipe.name",
            name,
            "is not a recipe of the catalog, so the plan of the run cannot be rebuilt.",
            f"record runs of catalog recipes ({', '.join(RECIPES)}) with their overrides.",
        )
    elif not isinstance(overrides, dict):
        problem("recipe.overrides", overrides, "must be a mapping of recipe fields to values.", rewrite)
    else:
        try:
            spec = RECIPES[name].replace(**overrides)
        except (InvalidInputError, TypeError, ValueError) as error:
            for p in getattr(error, "problems", None) or [Problem("overrides", overrides, str(error), rewrite)]:
                problem(f"recipe.overrides.{p.field}", p.value, p.message, p.fix)
    if card.get("stack") != stack:
        problem(
            "stack",
            card.get("stack"),
            f"is not the stack this calibration is for ({stack}): the constants of one program do not time another.",
            f"calibrate the cards of {card.get('stack')} runs separately (--stack), or leave this card out.",
        )
    precision = card.get("precision")
    if spec is not None and precision != spec.precision:
        problem(
            "precision",
            precision,
            f"is not the precision of the recipe it records ({spec.precision}).",
            rewrite,
        )
    cluster_data = _mapping(card.get("cluster"))
    gpu_name = cluster_data.get("gpu")
    gpu = None
    if gpu_name is None:
        problem(
            "cluster.gpu",
            None,
            "is unknown: the card was written without the GPU the run ran on.",
            "write the card again with --gpu: `nemo-recipes watch RUN --gpu GPU --card FILE`.",
        )
    else:
        try:
            gpu = get_gpu(str(gpu_name))
        except InvalidInputError as error:
            problem("cluster.gpu", gpu_name, f"is not a GPU the planner knows ({_first_message(error)}).", rewrite)
    device = cluster_data.get("device")
    if device is None:
        problem(
            "cluster.device",
            None,
            "is unknown: the card does not say the run trained on a GPU (cards older than this check, or a run whose "
            "logs lack Lightning's 'GPU available: ..., used: ...' line).",
            "write the card again from the run's whole log: `nemo-recipes watch RUN --gpu GPU --card FILE`.",
        )
    elif device != DEVICE_GPU and gpu_name is not None:  # without a GPU named, cluster.gpu's problem says it
        problem(
            "cluster.device",
            device,
            f"is not the GPU the card names ({gpu_name}): the run's step times are the {device}'s, and would move "
            f"the plans of {gpu_name} off that GPU.",
            "calibrate only on cards of runs trained on the GPU they name; leave this card out.",
        )
    metrics = _mapping(card.get("metrics"))
    peak = metrics.get("peak_memory_reserved_gib")
    if gpu is not None and _number(peak) and peak > gpu.memory_gib:
        problem(
            "metrics.peak_memory_reserved_gib",
            peak,
            f"is more than a {gpu.name} holds ({gpu.memory_gib:g} GiB): the run trained on another GPU.",
            "give the GPU the run trained on (watch RUN --gpu GPU --card FILE), or leave this card out.",
        )
    step_time = metrics.get("step_time_s")
    if not _number(step_time) or not 0 < step_time < math.inf:
        problem(
            "metrics.step_time_s",
            step_time,
            "is missing: the run has no measured step time (watch names why: every logged step was a first step, "
            "near a save, or without a valid step time)."
            if step_time is None
            else "is not a positive finite number of seconds, which no run's step time is.",
            "watch the run again once it has logged more steps, with --card."
            if step_time is None
            else "write the card again with `nemo-recipes watch RUN --gpu GPU --card FILE`, or leave it out.",
        )
        step_time = None
    window = metrics.get("step_time_window_steps")
    if not isinstance(window, int) or window < MIN_WINDOW_STEPS:
        problem(
            "metrics.step_time_window_steps",
            window,
            f"is too few steps to calibrate on (at least {MIN_WINDOW_STEPS}: a few steps are mostly warm-up).",
            "let the run log more steps (or log every step: trainer.log_every_n_steps=1), then watch it again.",
        )
    if problems or spec is None or gpu is None or step_time is None:
        return None, problems
    nodes, per_node = cluster_data.get("nodes"), cluster_data.get("gpus_per_node")
    try:
        spec = spec.replace(
            num_nodes=nodes if isinstance(nodes, int) else spec.num_nodes,
            num_gpus_per_node=per_node if isinstance(per_node, int) else spec.num_gpus_per_node,
        )
        cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, gpu)
        found = Case(where, where, spec, cluster, stack, "step_s", float(step_time))
        found.predict()  # a plan the model refuses (a layout that does not divide the cluster) is refused here
    except InvalidInputError as error:
        for p in error.problems:
            problem(p.field, p.value, p.message, p.fix)
        return None, problems
    return found, []


#: Fields of a card that say when and how it was written, not what was measured: two cards that differ only there
#: are one run's.
_WRITING_FIELDS = ("written_by", "last_verified")


def run_identities(card: Any) -> list[str]:
    """The keys under which two cards are the same run: the `run_id` watch records (the run's first log and line,
    however far it had got) and the card's content apart from `_WRITING_FIELDS` (a copy, a card without run_id)."""
    import hashlib

    if not isinstance(card, dict):
        return []
    content = {key: value for key, value in card.items() if key not in _WRITING_FIELDS}
    try:
        text = json.dumps(content, sort_keys=True, default=str)
    except TypeError:  # YAML keys of mixed types (1 and "a") do not sort
        text = repr(content)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    run_id = card.get("run_id")
    return [f"content {digest}"] + ([f"run {run_id}"] if isinstance(run_id, str) and run_id else [])


def _number(value: Any) -> "typing.TypeGuard[float]":
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _mapping(value: Any) -> dict[str, Any]:
    """`value` when it is a mapping, else an empty one (whose missing keys are then reported one by one)."""
    return value if isinstance(value, dict) else {}


def replaced_error(cases: list[Case], replaced: Optional[Calibration]) -> float:
    """The mean |error| (%) on `cases` of what plans use now: `replaced` where it applies to a case (its GPU,
    precision and stack), the shipped constants elsewhere; a refit must beat it on runs it did not see."""

    def constants(case: Case) -> ModelConstants:
        gpu = case.cluster.gpu.name if case.cluster.gpu is not None else None
        applies = replaced is not None and replaced.applies_to(gpu) and case.spec.precision in replaced.precisions
        return replaced.constants if applies and replaced.stack == case.stack else CONSTANTS  # type: ignore[union-attr]

    return sum(abs(c.error_pct(constants(c))) for c in cases) / len(cases)


def calibrate(
    cases: list[Case], *, stack: str, grid: Optional[dict[str, tuple[float, ...]]] = None
) -> tuple[Calibration, dict[str, float]]:
    """Refit the constants on `cases` (runs of one stack) with `refit`, and the held-out error of each case: one
    run left out at a time up to `LEAVE_ONE_OUT_UP_TO` runs, else that many folds. Returns the calibration and the
    held-out errors (%, by case id). Needs at least two cases (one to leave out, one to fit on)."""
    if len(cases) < 2:
        raise ValueError("calibrate needs at least two runs")
    fitted = refit(cases, grid=grid)
    ids = list(dict.fromkeys(c.id for c in cases))
    folds = min(len(ids), LEAVE_ONE_OUT_UP_TO)
    fold_of = {case_id: str(index % folds) for index, case_id in enumerate(ids)}
    held_out, _ = held_out_errors(cases, lambda c: fold_of[c.id], grid=grid)
    calibration = Calibration(
        constants=fitted,
        gpus=tuple(sorted({c.cluster.gpu.name for c in cases if c.cluster.gpu is not None})),
        stack=stack,
        precisions=tuple(sorted({c.spec.precision for c in cases})),
        runs=tuple(
            {
                "card": c.id,
                "recipe": c.spec.name,
                "gpu": c.cluster.gpu.name if c.cluster.gpu is not None else None,
                "gpus": c.cluster.world_size,
                "step_time_s": c.published,
            }
            for c in cases
        ),
        errors={
            "before": mean_abs_error(cases, CONSTANTS),
            "after": mean_abs_error(cases, fitted),
            "held_out": sum(abs(e) for e in held_out.values()) / len(held_out),
        },
    )
    return calibration, held_out
