"""`watch JOBID`: a Slurm job, as `launch` printed its id, watched through its batch output file (`scontrol show job`'s
StdOut) and followed by Slurm's own state (executors/slurm_executor/state.py): a job Slurm still runs or holds is alive
whatever the log says, a requeue is flagged with the step the job had reached, and the end is Slurm's word."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Optional

from nemo_recipes.errors import InvalidConfigError, Problem

_JOB_ID = re.compile(r"^\d+(_\d+)?$")


class SlurmJob:
    """A Slurm job followed by its id: its output file, whether it still runs, and its requeues as they happen."""

    def __init__(self, job_id: str, stdout: Path, requeues: int):
        self.job_id = job_id
        self.stdout = stdout
        self.requeues = requeues
        self.state = ""

    def poll(self) -> tuple[Optional[bool], int]:
        """(alive, requeues since the last poll): alive is None while Slurm does not answer."""
        from nemo_recipes.executors.slurm_executor.state import query

        state = query(self.job_id)
        if state is None:
            return None, 0
        self.state = state.state
        new, self.requeues = max(0, state.requeues - self.requeues), state.requeues
        return not state.terminal, new


def job_of(target: str) -> Optional[SlurmJob]:
    """The Slurm job `target` names (an id that is no path here, on a machine with Slurm's commands), else None.
    An id Slurm does not know, or whose output file it no longer knows, is refused with field, value and fix."""
    if Path(target).exists() or not _JOB_ID.match(target) or shutil.which("scontrol") is None:
        return None
    from nemo_recipes.executors.slurm_executor.state import query

    state = query(target)
    if state is None or not state.stdout:
        why = (
            "is no job that Slurm knows (neither `scontrol show job` nor `sacct`), and no file or directory here."
            if state is None
            else "is a job whose output file Slurm no longer knows (the controller has forgotten it)."
        )
        raise InvalidConfigError(
            [
                Problem(
                    "run",
                    target,
                    why,
                    "give the id `launch` printed while the job is known to Slurm, or the job's log file or "
                    "directory (NeMo-Run's job directory).",
                )
            ],
            context="watch",
        )
    job = SlurmJob(target, Path(state.stdout), state.requeues)
    job.state = state.state
    return job
