"""`watch EXPERIMENT`: a NeMo-Run experiment, named by the id or the title `launch` (or `smoke --executor`) printed,
found in NeMo-Run's own records without importing NeMo-Run (seconds) or reaching a cluster. Standard library and
the fast path only.

NeMo-Run 0.11.1 keeps an experiment in `$NEMORUN_HOME/experiments/<title>/<title>_<time_ns>/` (run/experiment.py:
`Experiment.__init__`, `from_id`, `from_title` picks the newest by ctime); each job in `<experiment>/<job name>/`
with its executor written out as `configs/<job name>_executor.yaml`. Where the job's output lands:

- local: `<job>/nemo_run/<app>/<role>/<replica>/{combined,stdout,stderr}.log` (torchx; combined = stdout + stderr);
- Slurm: `<job>/log-<job name>_<jobid>_<restart>.out` per (re)start beside `sbatch_<job name>_<jobid>.out`, in the
  job directory on the cluster (the same path when NeMo-Run ran there; the tunnel's `job_dir` over SSH);
- Kubernetes (KubeflowExecutor): in the pods. NeMo-Run copies them to `<job>/log-allranks_0.out` only while
  `nemo experiment logs` streams them (core/execution/kubeflow.py `fetch_logs`); the TrainJob's name is in
  `$NEMORUN_HOME/.kubeflow_jobs.json`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: The recipes the recipe plugin set up, beside the experiment's directory (executors/plugin.RECIPES_RECORD).
RECIPES_RECORD = ".{}.recipes.json"
#: NeMo-Run's default home when NEMORUN_HOME is not set (nemo_run/config.py).
DEFAULT_HOME = "~/.nemo_run"
_TIME_NS = re.compile(r"\d{10,}")
_TARGET = re.compile(r"^_target_:\s*(\S+)\s*$", re.M)
_FIELD = "^{}:\\s*(\\S+)\\s*$"


def nemorun_home() -> Path:
    return Path(os.path.expanduser(os.environ.get("NEMORUN_HOME") or DEFAULT_HOME))


def experiments_dir() -> Path:
    return nemorun_home() / "experiments"


def find_experiment(target: str) -> Optional[Path]:
    """The directory of the experiment whose id or title is `target`, else None. An id names one run of a title;
    a title its newest run, as NeMo-Run's `Experiment.from_title` picks it (by ctime)."""
    if not target or target in (".", "..") or "/" in target or os.sep in target:
        return None
    root = experiments_dir()
    title, _, stamp = target.rpartition("_")
    if title and _TIME_NS.fullmatch(stamp) and (root / title / target).is_dir():
        return root / title / target
    runs = [d for d in (root / target).iterdir() if d.is_dir()] if (root / target).is_dir() else []
    return max(runs, key=lambda d: d.stat().st_ctime) if runs else None


@dataclass(frozen=True)
class ExperimentJob:
    name: str
    directory: Path
    executor: str  # the executor's class name as NeMo-Run wrote it ("LocalExecutor", "SlurmExecutor", ...)
    settings: str  # the text of the job's executor YAML, for the fields read below


def jobs_of(experiment: Path) -> list[ExperimentJob]:
    """The experiment's jobs, as NeMo-Run wrote their executors (a job directory without one is left out)."""
    jobs = []
    for directory in sorted(d for d in experiment.iterdir() if d.is_dir()):
        written = directory / "configs" / f"{directory.name}_executor.yaml"
        try:
            text = written.read_text(errors="replace")
        except OSError:
            continue
        found = _TARGET.search(text)
        jobs.append(ExperimentJob(directory.name, directory, found[1].rpartition(".")[2] if found else "", text))
    return jobs


def _top_level(text: str, field: str) -> Optional[str]:
    found = re.search(_FIELD.format(re.escape(field)), text, re.M)
    return found[1].strip("'\"") if found else None


def kubernetes_job_name(experiment_id: str, job: str) -> Optional[str]:
    """The TrainJob NeMo-Run created for `job` of the experiment, from its own record of Kubeflow jobs (app id
    `<experiment id>___<role>___<TrainJob name>`), else None."""
    try:
        with open(nemorun_home() / ".kubeflow_jobs.json") as handle:
            apps = json.load(handle)
    except (OSError, ValueError):
        return None
    names = [
        (app.get("job_name") if isinstance(app, dict) else None) or app_id.split("___")[-1]
        for app_id, app in (apps.items() if isinstance(apps, dict) else [])
        if app_id.startswith(f"{experiment_id}___")
    ]
    return names[-1] if names else None


def _tunnel(settings: str) -> tuple[str, Optional[str]]:
    """The tunnel class of a Slurm job's executor and its job directory (NeMo-Run's YAML: a `tunnel:` block)."""
    block = settings.split("\ntunnel:", 1)[1] if "\ntunnel:" in settings else ""
    block = re.split(r"\n(?=\S)", block, maxsplit=1)[0]  # up to the next top-level field
    kind = re.search(r"^[ ]+_target_:\s*(\S+)", block, re.M)
    where = re.search(r"^[ ]+job_dir:\s*(\S+)\s*$", block, re.M)
    return (kind[1].rpartition(".")[2] if kind else ""), (where[1].strip("'\"") if where else None)


def where_logs_are(experiment: Path) -> list[str]:
    """For each job whose logs live on another machine (a Kubernetes job's pods, a Slurm job submitted over SSH),
    where they are and the command that reads them; [] when every job logs here (a local job, a Slurm job submitted
    on the cluster), whether or not it has written anything yet. No cluster is reached."""
    said = []
    for job in jobs_of(experiment):
        if job.executor == "KubeflowExecutor":
            namespace = _top_level(job.settings, "namespace") or "default"
            name = kubernetes_job_name(experiment.name, job.name)
            selector = f"jobset.sigs.k8s.io/jobset-name={name or '<TrainJob name>'}"
            said.append(
                f"job {job.name} ran on Kubernetes (TrainJob {name or 'unknown: not in NeMo-Run records here'}, "
                f"namespace {namespace}): its logs are in its pods. Read them with `kubectl logs -l {selector} "
                f"-n {namespace} --prefix --tail=-1 > {job.name}.log` and watch that file, or run "
                f"`nemo experiment logs {experiment.name} 0`, which also copies them to "
                f"{job.directory / 'log-allranks_0.out'} for `watch {experiment.name}` to read"
            )
        elif job.executor == "SlurmExecutor":
            kind, there = _tunnel(job.settings)
            if kind != "SSHTunnel":
                continue
            said.append(
                f"job {job.name} ran on Slurm over SSH: its logs are log-{job.name}_<jobid>_<restart>.out in "
                f"{there or 'the job directory'} on the cluster. Watch them there (`nemo-recipes watch "
                f"{there or '<job directory>'}`, or by the Slurm job id on the login node), or read them with "
                f"`nemo experiment logs {experiment.name} 0`"
            )
    return said


def recorded_recipes(experiment: Path) -> dict[str, dict]:
    """The recipe (its RecipeSpec fields) of each of the experiment's jobs that `launch` submitted with the recipe
    plugin, by job; {} without a record or with one that is not the plugin's."""
    try:
        with open(experiment.parent / RECIPES_RECORD.format(experiment.name)) as handle:
            jobs = json.load(handle).get("jobs")
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(jobs, dict):
        return {}
    return {
        name: job["spec"] for name, job in jobs.items() if isinstance(job, dict) and isinstance(job.get("spec"), dict)
    }
