"""Submitting a task through NeMo-Run, and after a submission the scheduler refused: no half-made experiment left
behind, and sbatch's reason as a problem that names the field, the value and the fix.

The one place that reads NeMo-Run's private experiment attributes (`_id`, `_exp_dir`): NeMo-Run 0.11.1 exposes
neither, and the CLI needs both (the id to report, the directory to remove).

NeMo-Run writes the experiment directory (config, task, sbatch script, code) before it calls sbatch; when sbatch
refuses, that directory describes a job that never existed and `nemo experiment list` would show it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from nemo_recipes.errors import InvalidConfigError, InvalidInputError, Problem

# sbatch's own words (Slurm 22.05 - 24.x) for the refusals a user can fix in the executor's arguments.
_REFUSALS = (
    (re.compile(r"invalid partition", re.I), "partition", "sinfo -s lists the partitions you may use"),
    (
        re.compile(r"invalid account|account/partition combination", re.I),
        "account",
        "sacctmgr show assoc user=$USER format=account,partition lists your accounts",
    ),
    (re.compile(r"invalid qos|qos", re.I), "qos", "sacctmgr show assoc user=$USER format=account,qos lists yours"),
    (re.compile(r"time limit|invalid time", re.I), "time", "sinfo -o '%P %l' lists each partition's time limit"),
    (
        re.compile(r"node configuration is not available|more processors|gres|memory", re.I),
        "nodes",
        "ask for what a node has (sinfo -N -o '%N %c %m %G') or fewer nodes",
    ),
)


class SubmissionError(RuntimeError):
    """NeMo-Run could not submit (or dry-run) the task for a reason outside the user's input: a tunnel, a scheduler
    down. `removed` is the experiment directory removed because nothing was submitted."""

    def __init__(self, error: BaseException, removed: Optional[str], problems: Sequence[Problem] = ()):
        self.error, self.removed, self.problems = error, removed, list(problems)
        super().__init__(f"{type(error).__name__}: {error}")


@dataclass
class Submitted:
    experiment: Any
    job_id: str
    experiment_id: str
    slurm: bool


def experiment_id(experiment: Any) -> str:
    return str(experiment._id)


def experiment_dir(experiment: Any) -> str:
    return str(getattr(experiment, "_exp_dir", "") or "")


def submit(
    task: Any, executor: Any, *, name: str, plugins: Sequence[Any] = (), dryrun: bool = False, detach: bool = False
) -> Submitted:
    """`task` on `executor` as one NeMo-Run experiment named `name`: dry-run, or run (a Slurm job always detached:
    its caller follows it through Slurm's own states). A refusal the user can fix in the executor's arguments raises
    InvalidConfigError; any other failure SubmissionError. Either way nothing unsubmitted is left on disk."""
    import nemo_run as run

    slurm = isinstance(executor, run.SlurmExecutor)
    experiment = None
    try:
        with run.Experiment(name, executor=executor) as experiment:
            # The plugins validate the plan against the executor's hardware here, before any submission.
            job_id = experiment.add(task, executor=executor, plugins=list(plugins), name=name)
            if dryrun:
                experiment.dryrun()
            else:
                for plugin in plugins:  # the recipe plugin records the recipe for `watch EXPERIMENT`
                    getattr(plugin, "record_recipes", lambda _: None)(experiment)
                experiment.run(detach=detach or slurm)
            return Submitted(experiment, job_id, experiment_id(experiment), slurm)
    except InvalidInputError:
        raise
    except Exception as error:
        removed = None if dryrun else discard_unsubmitted(experiment)
        problems = refusal_problems(error, executor)
        if problems:
            raise InvalidConfigError(problems, context=f"{name}: not submitted") from None
        raise SubmissionError(error, removed, unreachable_problems(error, executor)) from None


def submitted(experiment: Any) -> bool:
    """Whether any job of the experiment got a handle (an id from the scheduler)."""
    return any(getattr(job, "handle", "") for job in getattr(experiment, "jobs", []) or [])


def discard_unsubmitted(experiment: Any) -> Optional[str]:
    """Remove the experiment's directory when none of its jobs was submitted; returns the path removed. Only a
    directory under NeMo-Run's experiments folder is touched, and its title folder too once it is empty."""
    if experiment is None or submitted(experiment):
        return None
    directory = Path(experiment_dir(experiment))
    if not directory.name or directory.parent.parent.name != "experiments" or not directory.is_dir():
        return None
    shutil.rmtree(directory, ignore_errors=True)
    # The recipe plugin's record beside it (plugin.recipes_record), named the same way here: no plugin import.
    with contextlib.suppress(OSError):
        os.remove(directory.parent / f".{directory.name}.recipes.json")
    try:
        os.rmdir(directory.parent)  # the experiment's title folder, when this was its only run
    except OSError:
        pass
    return str(directory)


# What the HTTP and socket layers say when a server cannot be reached (urllib3's MaxRetryError and
# NewConnectionError carry the socket's words in their text).
_UNREACHABLE = re.compile(
    r"Connection refused|Name or service not known|nodename nor servname|No route to host|timed out|"
    r"Network is unreachable|Temporary failure in name resolution|NewConnectionError|Max retries exceeded",
    re.I,
)


def unreachable_problems(error: BaseException, executor: Any) -> list[Problem]:
    """A Kubernetes API server that cannot be reached, as a problem naming the server the kubeconfig points at
    and how to check it; [] for any other failure (and for other executors: sbatch's are read above)."""
    if type(executor).__name__ != "KubeflowExecutor" or not (
        isinstance(error, (ConnectionError, TimeoutError)) or _UNREACHABLE.search(str(error))
    ):
        return []
    try:
        from kubernetes import client

        server = client.Configuration.get_default_copy().host
    except Exception:  # no client configuration: the server is then unknown, the advice the same
        server = None
    # The socket's own words (refused, unknown host, ...) before urllib3's summary of them.
    said = _UNREACHABLE.search(str(error).replace("Max retries exceeded", "").replace("NewConnectionError", ""))
    said = said or _UNREACHABLE.search(str(error))
    return [
        Problem(
            "kubeconfig",
            server or os.environ.get("KUBECONFIG", "~/.kube/config"),
            f"the Kubernetes API server cannot be reached ({said.group(0) if said else type(error).__name__}); "
            "nothing was submitted.",
            "check the cluster is up and the kubeconfig's current context points at it (kubectl cluster-info; "
            "KUBECONFIG picks the file, kubectl config use-context the cluster), then try again.",
        )
    ]


#: Seconds the API server has to answer the probe below.
PROBE_TIMEOUT = 10


def api_server_problems(executor: Any) -> list[Problem]:
    """For a Kubeflow executor, one request to the API server its kubeconfig names, so a
    cluster that cannot be reached is said in seconds and before anything starts: NeMo-Run's client retries for
    about a minute, then fails with urllib3's MaxRetryError. [] for any other executor, or when it answers."""
    if type(executor).__name__ != "KubeflowExecutor":
        return []
    try:
        from kubernetes import client, config

        try:  # as NeMo-Run's KubeflowExecutor loads it: the kubeconfig, else the pod's service account
            config.load_kube_config()
        except Exception as original:
            try:
                config.load_incluster_config()
            except Exception:
                raise original from None
        client.VersionApi().get_code(_request_timeout=PROBE_TIMEOUT)
    except Exception as error:  # the client's own exceptions and urllib3's, whatever the cause
        return unreachable_problems(error, executor) or [
            Problem(
                "kubeconfig",
                os.environ.get("KUBECONFIG", "~/.kube/config"),
                f"the Kubernetes API server did not answer ({type(error).__name__}: {str(error)[:200]}).",
                "check the kubeconfig's current context and credentials with kubectl cluster-info.",
            )
        ]
    return []


def refusal_problems(error: BaseException, executor: Any) -> list[Problem]:
    """sbatch's refusal as problems naming the executor field it is about; [] when the reason is not one a user
    can fix in the executor's arguments (the caller then reports the scheduler's message as it is)."""
    import nemo_run as run  # imported by whoever submitted

    if not isinstance(executor, run.SlurmExecutor):  # only sbatch's words are read here
        return []
    said = [line.strip() for line in re.findall(r"sbatch: error: (.+)", str(error))]
    reason = ("; ".join(said) if said else " ".join(str(error).split()))[:300]
    for pattern, field, how in _REFUSALS:
        if pattern.search(reason):
            value = getattr(executor, field, None)
            return [
                Problem(
                    field,
                    value,
                    f"the scheduler refused the job: {reason}",
                    f"give a {field} the cluster accepts ({how}); nothing was submitted.",
                )
            ]
    return []


#: NeMo-Run (torchx AppState) states after which a job does nothing more; SUCCEEDED is the one good end.
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


@dataclass
class Outcome:
    """A submitted job as NeMo-Run reports it, and where its output is."""

    state: str  # NeMo-Run's word: SUCCEEDED, FAILED, CANCELLED, RUNNING, ..., UNKNOWN (NeMo-Run lost track of it)
    logs: list[str]

    def failed(self, followed: bool) -> bool:
        """Whether the command must exit non-zero: any end but SUCCEEDED; for a job followed to its end, also a
        state that is no end at all (UNKNOWN: lost)."""
        return self.state != "SUCCEEDED" if followed else self.state in ENDED[1:]

    def format(self, job_id: str, experiment: str) -> str:
        where = "\n".join(f"logs: {path}" for path in self.logs)
        return f"job {job_id} of experiment {experiment}: {self.state}\n{where}"

    def to_dict(self) -> dict:
        return {"state": self.state, "logs": self.logs}


def outcome(experiment: Any, job_id: str) -> Outcome:
    """NeMo-Run's state of the job now, with its log files (a local job's `combined.log` per process) or, where
    NeMo-Run keeps the logs elsewhere (a cluster), the job's directory and the command that shows them."""
    state = str(experiment.status(return_dict=True)[job_id]["status"])
    job = next((j for j in getattr(experiment, "jobs", []) if j.id == job_id), None)
    job_dir = str(getattr(getattr(job, "executor", None), "job_dir", "") or experiment_dir(experiment))
    logs = sorted(str(p) for p in Path(job_dir).glob("**/combined.log")) if job_dir else []
    return Outcome(state, logs or [job_dir, f"nemo experiment logs {experiment_id(experiment)} 0"])
