"""One Python function run as a task per rank through an executor preset (local torchrun, Slurm, a profile): each
of the executor's nodes x processes-per-node processes calls the function with its own rank and the world size.

This is how work that is already split into independent pieces (the shards of `nemo-recipes data prepare`) spreads
over several nodes: the function decides from (rank, world) which pieces are its own. The ranks do not talk to each
other; they share a directory. The presets start the task under torchrun, which gives each process RANK and
WORLD_SIZE; a plain srun gives SLURM_PROCID and SLURM_NTASKS.

Standard library at import; NeMo-Run inside the functions that submit.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

#: (rank variable, world variable), in the order they are looked up.
RANK_VARIABLES = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def rank_and_world(environ: Optional[dict[str, str]] = None) -> tuple[int, int]:
    """This process's (rank, world size) as its launcher set them; (0, 1) for a process started on its own."""
    env = os.environ if environ is None else environ
    for rank, world in RANK_VARIABLES:
        if env.get(rank, "").isdigit() and env.get(world, "").isdigit():
            return int(env[rank]), int(env[world])
    return 0, 1


def call_ranked(target: str, **kwargs: Any) -> Any:
    """The task every rank runs: `target` ("package.module:function") called with `kwargs`, rank= and world=.
    The function is named rather than passed so that the job's configuration stays plain data."""
    module, _, name = target.partition(":")
    function = getattr(importlib.import_module(module), name)
    rank, world = rank_and_world()
    return function(**kwargs, rank=rank, world=world)


@dataclass(frozen=True)
class Outcome:
    """How the ranks' job ended: NeMo-Run's or (for Slurm) Slurm's own state word, and where its logs are."""

    state: str
    world: int
    detail: str = ""
    job_dir: str = ""

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"


def world_of(executor: Any) -> int:
    return int(executor.nnodes()) * int(executor.nproc_per_node())


def run_ranked(
    executor: Any,
    target: str,
    *,
    name: str,
    timeout: float = 3600.0,
    report: Callable[[str], None] = lambda line: None,
    **kwargs: Any,
) -> Outcome:
    """Submits `call_ranked(target, **kwargs)` on a clone of `executor` (all its ranks in one job) and waits for
    the job's end. A Slurm job is followed through Slurm's own states (`report` gets each one), so a node lost or a
    job requeued is reported as such; a job not finished at `timeout` is cancelled."""
    import sys
    from pathlib import Path

    import nemo_run as run

    from nemo_recipes.executors.slurm_executor import state as slurm_state
    from nemo_recipes.executors.submission import submit

    job_executor = executor.clone()
    if isinstance(job_executor, run.LocalExecutor):
        # torchrun and this Python's packages are where this interpreter is, activated or not.
        path = job_executor.env_vars.get("PATH", os.environ.get("PATH", ""))
        job_executor.env_vars["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])
    task = run.Partial(call_ranked, target=target, **kwargs)
    submitted = submit(task, job_executor, name=name)
    experiment, job_id = submitted.experiment, submitted.job_id
    job_dir = next((j.executor.job_dir for j in experiment.jobs if j.id == job_id), job_executor.job_dir)
    if not submitted.slurm:  # a local job ran to its end inside submit (not detached)
        state = str(experiment.status(return_dict=True)[job_id]["status"])
        return Outcome(state, world_of(job_executor), job_dir=job_dir)
    slurm_id = slurm_state.slurm_job_id(experiment, job_id)
    if slurm_id is None:
        return Outcome("UNKNOWN", world_of(job_executor), "sbatch returned no job id", job_dir)
    runner = slurm_state.tunnel_runner(job_executor.tunnel)
    final = slurm_state.follow(slurm_id, runner, report=lambda s: report(s.format()), timeout=timeout)
    if final is None or not final.terminal:
        experiment.cancel(job_id)
        return Outcome("TIMEOUT", world_of(job_executor), f"Slurm job {slurm_id} cancelled after {timeout:.0f} s")
    return Outcome(final.state, world_of(job_executor), final.format(), job_dir)
