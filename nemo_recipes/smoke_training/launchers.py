"""How a smoke phase is started: as local processes (the default), or through a NeMo-Run executor, so that the same
run goes through `run.LocalExecutor` (torchrun), a Slurm cluster or any other executor a profile names.

A launcher takes (phase config, processes, log file, poll) and returns the phase's exit status; `poll` is called
about twice a second while the phase runs (the runner updates its progress display there).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from nemo_recipes.errors import InputError
from nemo_recipes.executors._common import MEMORY_LOG_ENV

#: Seconds a phase may take before it is stopped (imports and set-up take ~20 s of it on a CPU).
PHASE_TIMEOUT = 900.0
#: NeMo-Run states after which a job does nothing more.
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")

Launcher = Callable[[dict[str, Any], int, Path, Callable[[], None]], int]


class SmokeError(InputError):
    """A smoke run that cannot start as asked (exit code 2): a directory holding an earlier run, an executor whose
    processes are not the plan's. A run that started and failed is a failed check, or a RunFailedError (exit 1)."""


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
        # Its own session keeps a terminal's Ctrl-C from reaching the workers half-way through a checkpoint: this
        # process decides when and how the tree stops (`_stop`), and the tree stops with it if it dies (SIGKILL).
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_stop_with_parent_hook(),
        )
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


#: Seconds the training processes get to end on SIGTERM before they are killed.
STOP_GRACE = 20.0
_PR_SET_PDEATHSIG = 1


def _stop_with_parent_hook() -> Optional[Callable[[], None]]:
    """A `preexec_fn` for the child, before it runs: Linux sends it SIGTERM when this process dies, however it dies
    (even by SIGKILL, which no handler sees), and torchrun passes SIGTERM on to its workers. None elsewhere.

    libc's prctl is looked up here, in the parent: between fork and exec the child of a threaded process (pytest's,
    NeMo's) must not take the dynamic loader's lock, which another thread may have held at the fork."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), read from /proc (Linux; [] elsewhere). torchrun
    starts each worker in a session of its own, so the workers are not in torchrun's process group."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we read
            continue
        # "pid (command) state ppid ...": the command may hold spaces and parentheses, so read after the last ')'.
        fields = text[text.rindex(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def _signal_groups(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), signum)
        except (ProcessLookupError, PermissionError):
            pass


#: Seconds to wait for SIGKILLed processes to be gone.
KILL_WAIT = 30.0


def stop_tree(roots: list[int], grace: float = STOP_GRACE) -> None:
    """Stop `roots` and every process below them, and wait until none of them runs: SIGTERM to each process group
    in the tree (torchrun's and each worker's own), `grace` seconds to end, then SIGKILL to whatever is left."""
    tree = [*roots, *(pid for root in roots for pid in descendants(root))]
    _signal_groups(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in tree):
        time.sleep(0.1)
    left = [pid for pid in {*tree, *(pid for root in roots for pid in descendants(root))} if alive(pid)]
    _signal_groups(left, signal.SIGKILL)
    # SIGKILL cannot be refused, but a process inside an uninterruptible wait (a hung NFS read) ends only when the
    # wait does: bounded, so that stopping never hangs the command that stops.
    deadline = time.monotonic() + KILL_WAIT
    while any(alive(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(0.05)


def _stop(process: subprocess.Popen) -> None:
    stop_tree([process.pid])
    process.wait()


def executor_launcher(executor: Any, *, experiment: str = "smoke", timeout: float = PHASE_TIMEOUT) -> Launcher:
    """Each phase becomes a NeMo-Run job, `run.Partial(train_phase, ...)` on a clone of `executor`, followed
    through `run.Experiment` status to its end. Its world (nodes x processes per node) must be the plan's."""

    def launch(config: dict[str, Any], processes: int, log: Path, poll: Callable[[], None]) -> int:
        import nemo_run as run

        from nemo_recipes.smoke_training.worker import train_phase

        world = executor.nnodes() * executor.nproc_per_node()
        if world != processes:
            raise SmokeError(f"the executor starts {world} process(es) and the smoke plan needs {processes}")
        job_executor = executor.clone()
        # A smoke run trains on CPUs: no GPU memory to log (its lines would carry 0 bytes through the CPU layer's
        # patches, and a line then would read as a GPU with nothing on it), so its lines stay as without it.
        job_executor.env_vars.pop(MEMORY_LOG_ENV, None)
        if isinstance(job_executor, run.LocalExecutor):
            # torchrun and this Python's packages are where this interpreter is, activated or not.
            path = job_executor.env_vars.get("PATH", os.environ.get("PATH", ""))
            job_executor.env_vars["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])
        before = set(descendants(os.getpid()))
        with run.Experiment(f"{experiment}-{config['phase']}", executor=job_executor, log_level="WARN") as exp:
            job_id = exp.add(run.Partial(train_phase, **config), executor=job_executor, name=config["phase"])
            try:
                return _follow_phase(exp, job_id, job_executor, log, poll, timeout, experiment)
            except BaseException:
                # Stopped (a signal) or any failure while the job runs: it must not outlive this process. NeMo-Run's
                # cancel signals a local job's process group, but torchrun's workers run in sessions of their own.
                with contextlib.suppress(Exception):
                    exp.cancel(job_id)
                if isinstance(job_executor, run.LocalExecutor):
                    stop_tree([pid for pid in descendants(os.getpid()) if pid not in before])
                raise

    return launch


def _follow_phase(
    exp: Any, job_id: str, job_executor: Any, log: Path, poll: Callable[[], None], timeout: float, experiment: str
) -> int:
    """Run the phase's job and follow it to its end: 0 when it succeeded, else 1 (the state and where the job's
    files are go into the phase's log)."""
    import nemo_run as run

    from nemo_recipes.executors.submission import experiment_id

    slurm = isinstance(job_executor, run.SlurmExecutor)
    exp.run(detach=slurm)
    if slurm:
        # Slurm's own state: NeMo-Run would call a job over its time limit FAILED and a requeued one
        # PENDING, and a preempted job that is requeued must be followed through its next run.
        from nemo_recipes.executors.slurm_executor import state as slurm_state

        slurm_id = slurm_state.slurm_job_id(exp, job_id)
        runner = slurm_state.tunnel_runner(job_executor.tunnel)
        final = (
            None  # no Slurm id: NeMo-Run got none back from sbatch
            if slurm_id is None
            else slurm_state.follow(slurm_id, runner, report=lambda s: poll(), timeout=timeout, interval=1.0, tick=poll)
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
