"""What `watch RUN` reads: the logs of a run and, where the run says, its recipe. Standard library and the fast
path only.

RUN is a log file; a run directory (`smoke --dir`: the phases' logs and `train.json`, which holds the recipe as
trained); a directory holding a job's logs (`*.log`, `*.out`: NeMo-Run's local and Slurm job directories); or the id or
title of a NeMo-Run experiment (`launch`'s, `smoke --executor`'s), read from NEMORUN_HOME (experiments.py). Anything
else is refused with field, value and fix (exit 2)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.errors import InvalidConfigError, Problem, RunFailedError
from nemo_recipes.user_paths import not_regular
from nemo_recipes.watching import experiments
from nemo_recipes.watching.progress_log import ProgressLine, parse

#: The smoke run's phases in the order they ran (smoke_training/runner.PHASES; the smoke package is not imported
#: here: it would pull NeMo into the watcher's process).
SMOKE_PHASES = ("train", "resume")
SMOKE_CONFIG = "train.json"
LOG_SUFFIXES = (".log", ".out")
#: torchx (NeMo-Run's local jobs) writes each replica's output three times (`<app>/<role>/<replica>/`: stdout,
#: stderr, and both together), and torchrun's `--tee` each worker's again (`<app>/torchelastic/.../attempt_N/<rank>/`).
TORCHX_COMBINED, TORCHX_PARTS, TORCHELASTIC = "combined.log", ("stdout.log", "stderr.log"), "torchelastic"


def _copy_of_combined(log: Path) -> bool:
    """Whether `log` repeats lines a torchx combined.log holds (the same lines twice would read as a restart)."""
    if log.name not in TORCHX_PARTS:
        return False
    if (log.parent / TORCHX_COMBINED).is_file():
        return True
    if TORCHELASTIC not in log.parts[:-1]:
        return False
    app = Path(*log.parts[: len(log.parts) - 1 - log.parts[::-1].index(TORCHELASTIC)])
    return any(app.glob(f"*/*/{TORCHX_COMBINED}"))


@dataclass
class Run:
    run: str
    logs: list[Path]
    spec: Optional[RecipeSpec]
    lines: list[list[ProgressLine]]  # of each log, in the order of `logs`


def _refuse(run: str, why: str, fix: str) -> InvalidConfigError:
    return InvalidConfigError([Problem("run", run, why, fix)], context="watch")


#: What a smoke phase run through an executor leaves in its log instead of the training's output
#: (smoke_training/launchers.py): where NeMo-Run keeps the job's files.
_JOB_FILES = re.compile(r"^job files: (.+)$", re.M)


def _phase_logs(log: Path) -> list[Path]:
    """A smoke phase's log, or, for a phase run as a NeMo-Run job, the job's own logs it points to."""
    try:
        with open(log, errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return [log]
    pointed = _JOB_FILES.search(head) if head.startswith("NeMo-Run experiment ") else None
    job = Path(pointed[1].strip()) if pointed else None
    return logs_of(job) if job is not None and job.is_dir() else [log]


def logs_of(directory: Path) -> list[Path]:
    phases = [directory / f"{phase}.log" for phase in SMOKE_PHASES if (directory / f"{phase}.log").is_file()]
    if phases:
        return [log for phase in phases for log in _phase_logs(phase)]
    found = [p for p in directory.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES]
    found = [p for p in found if not _copy_of_combined(p)]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def spec_of(directory: Path) -> Optional[RecipeSpec]:
    """The recipe the run trained: `smoke --dir`'s train.json, or the record the recipe plugin wrote into a
    NeMo-Run job's directory (an experiment with one such job)."""
    config = directory / SMOKE_CONFIG
    if not config.is_file():
        recorded = list(experiments.recorded_recipes(directory).values())
        if len(recorded) != 1:  # none, or several jobs: which one a log is of is not known here
            return None
        try:
            return RecipeSpec(**recorded[0])
        except (ValueError, TypeError):  # another version's fields: watched without the recipe
            return None
    try:
        return RecipeSpec(**json.loads(config.read_text())["spec"])
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidConfigError(
            [
                Problem(
                    "run",
                    str(config),
                    f"is not the run configuration `smoke --dir` or `launch` writes ({error}).",
                    "give the log file itself, or the directory smoke or launch wrote unchanged.",
                )
            ],
            context="watch",
        ) from None


def resolve(run: str) -> Path:
    """The file or directory `run` names: itself when it exists, else the directory of the NeMo-Run experiment
    whose id or title it is; an experiment whose logs are not on this machine (a Kubernetes job's pods, a Slurm
    job's directory on the cluster) fails (exit 1) saying where they are and how to read them."""
    path = Path(run)
    if path.exists():
        return path
    experiment = experiments.find_experiment(run)
    if experiment is None:
        return path
    elsewhere = [] if logs_of(experiment) else experiments.where_logs_are(experiment)
    if elsewhere:
        raise RunFailedError(f"experiment {experiment.name}: no log of it on this machine; " + "; ".join(elsewhere))
    return experiment  # a local job yet to write is refused, or followed, as any run directory without a log


def read_run(run: str) -> Run:
    """The logs of `run`, their progress lines in order, and the recipe where the run directory records it."""
    path = resolve(run)
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
    elif (problem := not_regular(path, "run", "give the log file of the job, or the run's directory.")) is not None:
        raise InvalidConfigError([problem], context="watch")  # a pipe, a device: never opened
    else:
        raise _refuse(
            run,
            "is neither a log file nor a run directory, nor the id or title of a NeMo-Run experiment in "
            f"{experiments.experiments_dir()} (NEMORUN_HOME).",
            "give the log file of the job, the directory `smoke --dir` wrote, or the experiment id `launch` printed "
            "(`nemo experiment list` lists them; set NEMORUN_HOME as it was for `launch`).",
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
