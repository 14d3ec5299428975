"""What Slurm itself says about a job: its state, how often it was requeued, its nodes and where its output goes.

NeMo-Run reports a Slurm job through torchx's `SLURM_STATES` table (torchx/schedulers/slurm_scheduler.py, read by
nemo_run/run/torchx_backend/schedulers/slurm.py `SlurmTunnelScheduler.describe`), whose `AppState` has no TIMEOUT:
TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, BOOT_FAIL and DEADLINE all become FAILED, and REQUEUED becomes
PENDING. A user then sees FAILED for a job that only ran out of time, and the reason is in a log. So the launch
command and the example ask Slurm directly (`scontrol show job` while the controller still holds the job, `sacct`
after) and report Slurm's own word, with the requeue count, the nodes and the output file.

Standard library only; commands run through a `runner` (a NeMo-Run tunnel's `run` for SSH clusters).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

#: Runs one shell command where the cluster is and returns its stdout ("" when it failed).
Runner = Callable[[str], str]

#: Slurm states after which the job does nothing more (a requeued job goes back to PENDING instead).
TERMINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)
#: Seconds a followed job may be unknown to both `scontrol` and `sacct` before it is reported lost (a job the
#: controller forgot, on a cluster without accounting, or an id that never was a job).
LOST_AFTER = 60.0
#: Slurm's word for success is COMPLETED; NeMo-Run's (and this project's) is SUCCEEDED.
SUCCEEDED = "SUCCEEDED"


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # Slurm's state word (CANCELLED for "CANCELLED by 0"), SUCCEEDED for COMPLETED
    requeues: int  # how often Slurm put the job back in the queue (scontrol Restarts, or sacct's REQUEUED rows)
    nodes: str = ""
    reason: str = ""  # why it is pending, or how it ended (None when Slurm has nothing to say)
    exit_code: str = ""  # "status:signal" as Slurm reports it
    stdout: Optional[str] = None  # the batch script's output file, while the controller still knows it

    @property
    def terminal(self) -> bool:
        return self.state == SUCCEEDED or self.state in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED

    def format(self) -> str:
        parts = [f"Slurm job {self.job_id}: {self.state}"]
        if self.state == SUCCEEDED:
            parts[0] += " (COMPLETED)"
        if self.reason and self.reason != "None":
            parts.append(f"reason {self.reason}")
        if self.nodes and self.nodes not in ("None assigned", "(null)"):
            parts.append(f"on {self.nodes}")
        if self.requeues:
            parts.append(f"requeued {self.requeues} time{'s' if self.requeues != 1 else ''}")
        if self.terminal and self.exit_code:
            parts.append(f"exit code {self.exit_code}")
        line = ", ".join(parts)
        return line + (f"\n  batch output: {self.stdout}" if self.stdout else "")

    def to_dict(self) -> dict:
        return {**asdict(self), "terminal": self.terminal}


def local_runner(command: str) -> str:
    result = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return result.stdout if result.returncode == 0 else ""


def tunnel_runner(tunnel) -> Runner:
    """A NeMo-Run tunnel (LocalTunnel or SSHTunnel) as a runner."""

    def run(command: str) -> str:
        result = tunnel.run(command, hide=True, warn=True)
        return result.stdout if getattr(result, "ok", True) else ""

    return run


def _word(state: str) -> str:
    word = state.split()[0] if state.strip() else "UNKNOWN"
    return SUCCEEDED if word == "COMPLETED" else word


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job` output as key -> value (values may hold spaces only in the last field of a line)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        # A few fields (Command=, WorkDir=, StdOut=) run to the end of their line and may hold spaces.
        for key in ("Command", "WorkDir", "StdErr", "StdIn", "StdOut"):
            if line.startswith(key + "="):
                fields[key] = line[len(key) + 1 :]
                break
        else:
            for token in line.split():
                key, sep, value = token.partition("=")
                if sep:
                    fields.setdefault(key, value)
    return fields


def query(job_id: str, runner: Runner = local_runner) -> Optional[JobState]:
    """The job's state now, or None when neither the controller nor the accounting database knows the job."""
    quoted = shlex.quote(str(job_id))
    shown = parse_scontrol(runner(f"scontrol show job {quoted}"))
    # -D lists every run of the job: each requeue leaves a REQUEUED (or PREEMPTED/NODE_FAIL) row behind.
    rows = [
        line.split("|")
        for line in runner(f"sacct -D -X -n -P -o JobID,State,NodeList,Reason,ExitCode -j {quoted}").splitlines()
        if line.strip()
    ]
    rows = [row for row in rows if len(row) == 5 and row[0] == str(job_id)]
    if not shown.get("JobState") and not rows:
        return None
    last = rows[-1] if rows else ["", "", "", "", ""]
    requeues = int(shown["Restarts"]) if shown.get("Restarts", "").isdigit() else max(0, len(rows) - 1)
    return JobState(
        job_id=str(job_id),
        state=_word(shown.get("JobState") or last[1]),
        requeues=requeues,
        nodes=shown.get("NodeList") or last[2],
        reason=shown.get("Reason") or last[3],
        exit_code=shown.get("ExitCode") or last[4],
        stdout=shown.get("StdOut"),
    )


def follow(
    job_id: str,
    runner: Runner = local_runner,
    *,
    report: Callable[[JobState], None] = lambda s: None,
    timeout: float = 3600.0,
    interval: float = 2.0,
    tick: Callable[[], None] = lambda: None,
    lost_after: float = LOST_AFTER,
) -> Optional[JobState]:
    """Poll the job until it ends (or `timeout`), calling `report` with each state that differs from the last
    one reported (state, requeue count or nodes) and `tick` at every poll; returns the last state seen, which is
    not terminal when the job was lost (unknown to Slurm for `lost_after` seconds) or the time ran out."""
    deadline, last, shown = time.monotonic() + timeout, None, None
    unknown_since = time.monotonic()
    while time.monotonic() < deadline:
        state = query(job_id, runner)
        if state is None and time.monotonic() - unknown_since > lost_after:
            return last
        if state is not None:
            unknown_since = time.monotonic()
            last = state
            key = (state.state, state.requeues, state.nodes)
            if key != shown:
                shown = key
                report(state)
            if state.terminal:
                return state
        tick()
        time.sleep(interval)
    return last


def slurm_job_id(experiment, job_id: str) -> Optional[str]:
    """The Slurm id of a NeMo-Run job (its handle is "<scheduler>://<experiment>/<slurm id>")."""
    for job in getattr(experiment, "jobs", []):
        if getattr(job, "id", None) == job_id and getattr(job, "handle", ""):
            return job.handle.partition("://")[2].split("/")[-1] or None
    return None


def watch(
    experiment,
    job_id: str,
    executor,
    *,
    follow_job: bool = True,
    out: Callable[[str], None] = print,
    timeout: float = 3600.0,
) -> Optional[JobState]:
    """What `nemo-recipes launch` and examples/pretrain_gpt.py tell a user about a submitted Slurm job: each state
    Slurm reports until the job ends (or, with follow_job=False, the state now), then where its logs are."""
    slurm_id = slurm_job_id(experiment, job_id)
    if slurm_id is None:
        out(f"Slurm job of {job_id}: LOST (NeMo-Run got no job id back from sbatch)")
        return None
    runner = tunnel_runner(executor.tunnel)
    if follow_job:
        state = follow(slurm_id, runner, report=lambda s: out(s.format()), timeout=timeout)
        if state is None:
            out(f"Slurm job {slurm_id}: LOST (neither scontrol nor sacct knows it)")
        elif not state.terminal:
            out(
                f"Slurm job {slurm_id}: no end seen (last {state.state}; lost to scontrol and sacct, or followed "
                f"for {timeout:.0f} s); `scontrol show job {slurm_id}` or `sacct -j {slurm_id}` may know more"
            )
    else:
        state = query(slurm_id, runner)
        if state is not None:
            out(state.format())
    job_dir = next((j.executor.job_dir for j in getattr(experiment, "jobs", []) if j.id == job_id), executor.job_dir)
    # NeMo-Run's srun writes one log per run of the job: a requeued job's next run gets the next count.
    out(f"logs: {job_dir}/log-*_{slurm_id}_<requeue count>.out")
    return state
