"""`watch RUN --follow`: a live run's steps printed as they land, its flags as they arise, until it ends: the last
step logged (finished), a stall whose writer is gone (failed, exit 1), or a stall its writer outlives by
follow.HUNG_BOUNDS bounds (hung, exit 1). Ctrl-C or SIGTERM stops the watch alone (the job is not ours to stop):
exit 130 or 143, from cli/_signals.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from nemo_recipes.cli._output import CLIError
from nemo_recipes.cli._watch_slurm import SlurmJob
from nemo_recipes.errors import InvalidConfigError
from nemo_recipes.watching import follow as live
from nemo_recipes.watching.figures import Figures, figures
from nemo_recipes.watching.progress_log import LOSS, STEP_TIME, ProgressLine
from nemo_recipes.watching.sources import Run, logs_of, read_run, resolve, spec_of


def _progress(line: ProgressLine) -> str:
    loss, seconds = line.get(LOSS), line.get(STEP_TIME)
    parts = [f"step {line.step}/{line.max_steps}"]
    if loss is not None:
        parts.append(f"loss {loss:.4g}")
    if seconds is not None:
        parts.append(f"{seconds:.4g} s/step")
    return "  ".join(parts)


def follow_run(
    target: str,
    skip_first: int,
    stall_after: Optional[float],
    out: TextIO,
    poll_s: float = live.POLL_S,
    clock: Callable[[], float] = time.monotonic,
    job: Optional[SlurmJob] = None,
) -> tuple[Run, Figures, dict[str, Any]]:
    """Follow `target` (a log file or a run directory, or the output file of the Slurm `job`) until it ends; print
    each new step and flag to `out`. Returns the run as read at the end, its figures, and {state, flags} (the
    follower's own flags: stall, failure, requeue)."""
    path = job.stdout if job else resolve(target)  # an experiment's id or title: its directory
    if job is None and (not path.exists() or (path.is_dir() and not logs_of(path))):
        read_run(target)  # refuses it with field, value and fix (exit 2): nothing there to follow
    tails: dict[Path, live.Tail] = {}
    spec = None
    shown: set[str] = set()
    own_flags: list[str] = []
    last_step_at = clock()
    stalled = False
    result: Optional[Figures] = None

    def flag(text: str) -> None:
        own_flags.append(text)
        print(f"  ! {text}", file=out, flush=True)

    while True:
        job_alive, requeued = job.poll() if job else (None, 0)  # before the logs: what the job wrote is read next
        for log in [path] if path.is_file() else logs_of(path) if path.is_dir() else []:
            tails.setdefault(log, live.Tail(log))  # in the order found: a later log is a later process
        if spec is None and path.is_dir():
            try:
                spec = spec_of(path)
            except InvalidConfigError:  # being written: read it at the next look
                pass
        new = [line for tail in tails.values() for line in tail.read()]
        if new:
            last_step_at, stalled = clock(), False
            for line in new:
                print(_progress(line), file=out, flush=True)
        logs = [lines for tail in tails.values() for lines in tail.processes()]
        if requeued and job:
            at = f"after step {result.step}" if result else "before the first step"
            flag(f"requeued by Slurm {at} (requeue {job.requeues} of job {job.job_id})")
        if any(logs):
            result = figures(logs, spec, skip_first)
            for text in result.flags:
                if text not in shown:
                    shown.add(text)
                    print(f"  ! {text}", file=out, flush=True)
            if result.step >= result.max_steps >= 1:  # a total of no steps (flagged) ends by a stall, not "finished"
                return _ended(target, tails, spec, result, "finished", own_flags)
        if job_alive is False:  # Slurm's word on the end, read after the job's last lines
            where = f"after step {result.step}/{result.max_steps}" if result else "before the first step"
            flag(f"failed: Slurm reports {job.state} {where}")  # type: ignore[union-attr]
            if result is None:
                read_run(str(path))
            return _ended(target, tails, spec, result, "failed", own_flags)  # type: ignore[arg-type]
        bound = live.stall_bound(result.step_time_s if result else None, result is not None, stall_after)
        quiet = clock() - last_step_at
        if quiet >= bound:
            where = f"after step {result.step}/{result.max_steps}" if result else "before the first step"
            if not stalled:
                stalled = True
                flag(f"stalled: no new step for {quiet:.0f} s {where} (the bound is {bound:.0f} s)")
            alive = job_alive if job_alive is not None else live.writer_alive(tails)
            if not alive:
                gone = "no process on this machine holds its log" if alive is False else "its writer is unknown"
                flag(f"failed: stalled {where} and {gone}")
                if result is None:
                    read_run(target)  # a log that never held a step: refused as `watch` refuses it (exit 2)
                return _ended(target, tails, spec, result, "failed", own_flags)  # type: ignore[arg-type]
            if quiet >= bound * (1 + live.HUNG_BOUNDS):
                flag(f"hung: stalled {where} for {quiet:.0f} s while its writer holds the log; stopped watching")
                if result is None:  # alive, and yet to train: not the user's input, and not a run to report
                    raise CLIError(
                        f"{target}: no step logged in {quiet:.0f} s while a process holds its log (a job starting "
                        "slowly: raise --stall-after, or watch again later)"
                    )
                return _ended(target, tails, spec, result, "hung", own_flags)
        time.sleep(min(poll_s, max(0.05, bound - quiet)))


def _ended(
    target: str, tails: dict[Path, live.Tail], spec: Any, result: Figures, state: str, own_flags: list[str]
) -> tuple[Run, Figures, dict[str, Any]]:
    run = Run(target, list(tails), spec, [lines for tail in tails.values() for lines in tail.processes()])
    return run, result, {"state": state, "flags": own_flags}


def stream(as_json: bool) -> TextIO:
    """Progress goes to standard error under --json, so that standard output holds the report alone."""
    return sys.stderr if as_json else sys.stdout
