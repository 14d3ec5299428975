"""The record of a run that `nemo-recipes watch RUN --card FILE` writes, and that `plan --calibrate CARD...` reads.

Its fields follow Megatron-Bridge's model verification cards (`examples/model_verification_cards/*/card.yaml`) where
they fit a pretraining run: `title`, `verification_environment` (there the container and commit; here the package
versions), the `command`, the `precision`, `metrics` (`initial_loss`, `final_loss`, the step time and model TFLOP/s
per GPU) and the date. A Bridge card describes a model's verified workloads; this one describes one run, so it adds
what a plan needs to be rebuilt and compared: the recipe and its overrides, the layout, the cluster, and the plan's
figures beside the measured ones.

Written as YAML, atomically (a temporary file renamed into place), and never over an existing file unless asked:
a card is a measurement, and replacing one by mistake loses it. Standard library, plus PyYAML to write.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
from pathlib import Path
from typing import Any, Optional, Sequence

from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.watching.device import Device
from nemo_recipes.watching.figures import Figures
from nemo_recipes.watching.progress_log import ProgressLine

CARD_FORMAT = "nemo-recipes run card 1"
#: The distributions whose versions a card records (importlib.metadata: read from the installed metadata, without
#: importing them, which would take seconds and pull CUDA into the watcher).
SOFTWARE = ("nemo-toolkit", "megatron-core", "torch", "transformer-engine", "nemo-run", "nemo-recipes")
#: Fields of a recipe that name it rather than shape its run: not overrides.
_NAMING_FIELDS = ("name", "size_label")

HEADER = """\
# Run card written by `nemo-recipes watch RUN --card FILE` (format: {format}).
# Fields follow Megatron-Bridge's model verification cards where they fit (title, verification_environment,
# command, precision, metrics with initial_loss and final_loss); the recipe, layout, cluster and plan are this
# package's. `nemo-recipes plan --calibrate CARD...` refits the planner on cards like this one.
# software: the versions installed where `watch` ran (importlib.metadata), which are the training job's when
# `watch` runs in the job's environment.
"""


def versions(names: Sequence[str] = SOFTWARE) -> dict[str, Optional[str]]:
    """{distribution: version, or None when it is not installed}."""
    from importlib import metadata

    found: dict[str, Optional[str]] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def overrides_of(spec: RecipeSpec) -> tuple[str, dict[str, Any]]:
    """(catalog recipe, {field: value} that differ from it): the recipe a run trained and what changed in it."""
    base = RECIPES.get(spec.name)
    if base is None:
        return spec.name, {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "name"}
    return spec.name, {
        f.name: getattr(spec, f.name)
        for f in dataclasses.fields(spec)
        if f.name not in _NAMING_FIELDS and getattr(spec, f.name) != getattr(base, f.name)
    }


def layout_of(spec: RecipeSpec) -> dict[str, Any]:
    """TP, PP, CP, DP, VP, sequence parallelism, batch and recompute of the run, as trained."""
    world = spec.num_nodes * spec.num_gpus_per_node
    model_parallel = spec.tensor_parallel * spec.pipeline_parallel * spec.context_parallel
    dp = world // model_parallel if model_parallel and world % model_parallel == 0 else None
    accumulation = (
        spec.global_batch_size // (spec.micro_batch_size * dp)
        if dp and spec.global_batch_size % (spec.micro_batch_size * dp) == 0
        else None
    )
    return {
        "tensor_parallel": spec.tensor_parallel,
        "pipeline_parallel": spec.pipeline_parallel,
        "context_parallel": spec.context_parallel,
        "data_parallel": dp,
        "virtual_pipeline": spec.virtual_pipeline,
        "sequence_parallel": spec.sequence_parallel,
        "micro_batch_size": spec.micro_batch_size,
        "global_batch_size": spec.global_batch_size,
        "grad_accumulation": accumulation,
        "recompute": spec.recompute,
    }


def _gib(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value / 2**30, 3)


def build_card(
    run: str,
    logs: Sequence[Path],
    spec: Optional[RecipeSpec],
    result: Figures,
    compared: Optional[dict[str, Any]],
    *,
    gpu: Optional[str],
    stack: str,
    written_by: Sequence[str],
    device: Optional[Device] = None,
    run_id: Optional[str] = None,
    today: Optional[datetime.date] = None,
) -> dict[str, Any]:
    """The card of a watched run: plain data, in the order it is written. `device`: where the run recorded it
    trained (`plan --calibrate` fits only on runs that trained on a GPU); `run_id`: `run_identity`."""
    name, changed = overrides_of(spec) if spec is not None else (None, {})
    figures = (compared or {}).get("figures", {})
    measured_mfu = figures.get("mfu", {}).get("measured") if figures else None
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "title": name or Path(run).name,
        "last_verified": (today or datetime.datetime.now(datetime.timezone.utc).date()).isoformat(),
        "run": run,
        "run_id": run_id,
        "logs": [str(p) for p in logs],
        "recipe": {"name": name, "overrides": changed} if spec is not None else None,
        "precision": spec.precision if spec is not None else None,
        "stack": stack,
        "layout": layout_of(spec) if spec is not None else None,
        "cluster": {
            "gpu": gpu,
            "nodes": spec.num_nodes if spec is not None else None,
            "gpus_per_node": spec.num_gpus_per_node if spec is not None else None,
            "device": device.name if device is not None else None,
            "device_recorded": list(device.evidence) if device is not None else [],
        },
        "verification_environment": {
            "software": versions(),
            "python": platform.python_version(),
        },
        # The command that trained the run is not in its log or in `smoke --dir`'s files; the one that wrote the
        # card is, so a reader can regenerate it.
        "command": None,
        "written_by": " ".join(_quoted(part) for part in written_by),
        "metrics": {
            "steps": result.step,
            "max_steps": result.max_steps,
            "initial_loss": result.initial_loss,
            "final_loss": result.loss,
            "step_time_s": result.step_time_s,
            "step_time_window_steps": len(result.window_steps),
            "tokens_per_s_per_gpu": result.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": result.model_tflops_per_gpu,
            "mfu": measured_mfu,
            "peak_memory_reserved_gib": _gib(result.peak_memory_reserved_bytes),
            "peak_memory_allocated_gib": _gib(result.peak_memory_allocated_bytes),
        },
        "plan": {
            "gpu": compared["gpu"],
            "stack": stack,
            **{key: row["planned"] for key, row in figures.items()},
            "deviation": {key: row["deviation"] for key, row in figures.items()},
            "warnings": list(compared.get("warnings", [])),
        }
        if compared is not None
        else None,
        "flags": list(result.flags),
    }
    return card


def run_identity(logs: Sequence[Path], lines: Sequence[Sequence[ProgressLine]]) -> str:
    """What makes two cards the same run for `plan --calibrate`, whatever their file names and however far the run
    had got when each was written: the first log (the oldest process's, resolved) and the first progress line in it,
    hashed."""
    import hashlib
    import json

    log, first = next(((log, found[0]) for log, found in zip(logs, lines, strict=False) if found), (None, None))
    where = str(Path(log).resolve()) if log is not None else None
    key = [where, first.step if first else None, first.metrics if first else None]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _quoted(part: str) -> str:
    import shlex

    return shlex.quote(part)


def card_text(card: dict[str, Any]) -> str:
    import yaml

    body = yaml.safe_dump(card, sort_keys=False, width=120, allow_unicode=True)
    return HEADER.format(format=CARD_FORMAT) + body


def write_card(path: "str | os.PathLike[str]", card: dict[str, Any]) -> Path:
    """Write `card` to `path` atomically. Raises OSError when it cannot be written."""
    from nemo_recipes.yaml_files import write_atomic

    return write_atomic(Path(path), card_text(card).encode("utf-8"))
