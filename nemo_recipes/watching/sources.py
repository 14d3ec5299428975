"""What `watch RUN` reads: the logs of a run and, where the run says, its recipe. Standard library and the fast
path only.

RUN is a log file; a run directory (`smoke --dir`: the phases' logs and `train.json`, which holds the recipe as
trained); or a directory holding a job's logs (`*.log`, `*.out`: NeMo-Run's local and Slurm job directories). Anything
else is refused with field, value and fix (exit 2)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.watching.progress_log import ProgressLine, parse

#: The smoke run's phases in the order they ran (smoke_training/runner.PHASES; the smoke package is not imported
#: here: it would pull NeMo into the watcher's process).
SMOKE_PHASES = ("train", "resume")
SMOKE_CONFIG = "train.json"
LOG_SUFFIXES = (".log", ".out")


@dataclass
class Run:
    run: str
    logs: list[Path]
    spec: Optional[RecipeSpec]
    lines: list[list[ProgressLine]]  # of each log, in the order of `logs`


def _refuse(run: str, why: str, fix: str) -> InvalidConfigError:
    return InvalidConfigError([Problem("run", run, why, fix)], context="watch")


def logs_of(directory: Path) -> list[Path]:
    phases = [directory / f"{phase}.log" for phase in SMOKE_PHASES if (directory / f"{phase}.log").is_file()]
    if phases:
        return phases
    found = [p for p in directory.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def spec_of(directory: Path) -> Optional[RecipeSpec]:
    config = directory / SMOKE_CONFIG
    if not config.is_file():
        return None
    try:
        return RecipeSpec(**json.loads(config.read_text())["spec"])
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidConfigError(
            [
                Problem(
                    "run",
                    str(config),
                    f"is not the run configuration `smoke --dir` writes ({error}).",
                    "give the log file itself, or the directory smoke wrote unchanged.",
                )
            ],
            context="watch",
        ) from None


def read_run(run: str) -> Run:
    """The logs of `run`, their progress lines in order, and the recipe where the run directory records it."""
    path = Path(run)
    if path.is_file():
        logs, spec = [path], None
    elif path.is_dir():
        logs, spec = logs_of(path), spec_of(path)
        if not logs:
            raise _refuse(
                run,
                "is a directory without a run's log (no train.log/resume.log of `smoke --dir`, no *.log or *.out).",
                "give the directory `smoke --dir` or `launch` wrote, or the log file of the job.",
            )
    else:
        raise _refuse(
            run,
            "is neither a log file nor a run directory.",
            "give the log file of the job, or the directory `smoke --dir` or `launch` wrote.",
        )
    lines: list[list[ProgressLine]] = []
    for log in logs:
        try:
            with open(log, errors="replace") as handle:
                lines.append(parse(handle))
        except OSError as error:
            raise _refuse(
                str(log), f"cannot be read ({error.strerror}).", "check the path and its permissions."
            ) from None
    if not any(lines):
        raise _refuse(
            str(logs[0]) if len(logs) == 1 else run,
            "holds no NeMo progress line ('Training epoch E, iteration I/N | ... global_step: ...', printed by "
            "ProgressPrinter on global rank 0): another log format, or a job that has not trained a step yet.",
            "give the log of global rank 0 of a NeMo 2 training job (trainer.log_every_n_steps sets how often it "
            "prints), or wait until the first step is logged.",
        )
    return Run(run, logs, spec, lines)
