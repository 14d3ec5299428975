"""How a smoke phase is started: as local processes (the default), or through a NeMo-Run executor, so that the same
run goes through `run.LocalExecutor` (torchrun), a Slurm cluster or any other executor a profile names.

A launcher takes (phase config, processes, log file, poll) and returns the phase's exit status; `poll` is called
about twice a second while the phase runs (the runner updates its progress display there).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from nemo_recipes.errors import RecipeError

#: Seconds a phase may take before it is stopped (imports and set-up take ~20 s of it on a CPU).
PHASE_TIMEOUT = 900.0
#: NeMo-Run states after which a job does nothing more.
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")

Launcher = Callable[[dict[str, Any], int, Path, Callable[[], None]], int]


class SmokeError(RecipeError):
    """A smoke run could not be carried out (as opposed to one that ran and failed its checks)."""


def local_processes(
    config: dict[str, Any], processes: int, log: Path, poll: Callable[[], None], timeout: float = PHASE_TIMEOUT
) -> int:
    """One phase on this machine: the worker as one process, or under torchrun (standalone rendezvous on a free
    port) for several. The whole process group is stopped on timeout or interrupt: nothing is left running."""
    config_path = log.with_suffix(".json")
    config_path.write_text(json.dumps(config), encoding="utf-8")
    worker = ["-m", "nemo_recipes.smoke_training.worker", str(config_path)]
    command = (
        [sys.executable, *worker]
        if processes == 1
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(processes),
            *worker,
        ]
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if processes == 1:
        # One process rendezvous with itself through MASTER_PORT; an inherited or fixed port may be held by another
        # run on a shared machine (a CI run once failed on EADDRINUSE), so each phase takes a port that is free now.
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None:
                poll()
                if time.monotonic() > deadline:
                    out.write(f"\nsmoke: phase stopped after {timeout:.0f} s\n")
                    _stop(process)
                    return 124
                time.sleep(0.5)
        except BaseException:
            _stop(process)
            raise
    poll()
    return process.returncode


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on at this moment."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def executor_launcher(executor: Any, *, experiment: str = "smoke", timeout: float = PHASE_TIMEOUT) -> Launcher:
    """Each phase becomes a NeMo-Run job, `run.Partial(train_phase, ...)` on a clone of `executor`, followed
    through `run.Experiment` status to its end. Its world (nodes x processes per node) must be the plan's."""

    def launch(config: dict[str, Any], processes: int, log: Path, poll: Callable[[], None]) -> int:
        import nemo_run as run

        from nemo_recipes.executors.submission import experiment_id
        from nemo_recipes.smoke_training.worker import train_phase

        world = executor.nnodes() * executor.nproc_per_node()
        if world != processes:
            raise SmokeError(f"the executor starts {world} process(es) and the smoke plan needs {processes}")
        job_executor = executor.clone()
        if isinstance(job_executor, run.LocalExecutor):
            # torchrun and this Python's packages are where this interpreter is, activated or not.
            path = job_executor.env_vars.get("PATH", os.environ.get("PATH", ""))
            job_executor.env_vars["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])
        with run.Experiment(f"{experiment}-{config['phase']}", executor=job_executor, log_level="WARN") as exp:
            job_id = exp.add(run.Partial(train_phase, **config), executor=job_executor, name=config["phase"])
            slurm = isinstance(job_executor, run.SlurmExecutor)
            exp.run(detach=slurm)
            if slurm:
                # Slurm's own state: NeMo-Run would call a job over its time limit FAILED and a requeued one
                # PENDING, and a preempted job that is requeued must be followed through its next run.
                from nemo_recipes.executors import slurm_state

                slurm_id = slurm_state.slurm_job_id(exp, job_id)
                runner = slurm_state.tunnel_runner(job_executor.tunnel)
                final = (
                    None  # no Slurm id: NeMo-Run got none back from sbatch
                    if slurm_id is None
                    else slurm_state.follow(
                        slurm_id, runner, report=lambda s: poll(), timeout=timeout, interval=1.0, tick=poll
                    )
                )
                state = "UNKNOWN" if final is None else final.state
                told = "" if final is None else final.format() + "\n"
                finished = final is not None and final.terminal
            else:
                state, told = follow(exp, job_id, poll, timeout), ""
                finished = state in TERMINAL
            files = next((j.executor.job_dir for j in exp.jobs if j.id == job_id), job_executor.job_dir)
            log.write_text(
                f"NeMo-Run experiment {experiment_id(exp)}, job {job_id}: {state}\n{told}job files: {files}\n",
                encoding="utf-8",
            )
            if not finished:
                exp.cancel(job_id)
        return 0 if state == "SUCCEEDED" else 1

    return launch


def follow(exp: Any, job_id: str, poll: Callable[[], None], timeout: float) -> str:
    """The job's state once it is terminal (or the last one seen at `timeout`)."""
    deadline, state = time.monotonic() + timeout, "UNKNOWN"
    while time.monotonic() < deadline:
        state = str(exp.status(return_dict=True)[job_id]["status"])
        poll()
        if state in TERMINAL:
            break
        time.sleep(1.0)
    poll()
    return state
