"""The artifacts an executor produces for a task, rendered by NeMo-Run's own dry run (nothing is submitted):
the sbatch script (Slurm), the TrainJob manifest (Kubernetes) and the torchrun command (local).

    from nemo_recipes.executors import render
    print(render.artifact(nemo_recipes.gpt_70b(), slurm(account="a", nodes=4), plugins=[RecipePlugin()]))
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import nemo_run as run


def dryrun_request(task: Any, executor: run.Executor, *, name: str = "job",
                   plugins: Optional[Sequence[run.Plugin]] = None, experiment: str = "render") -> tuple[Any, Any]:
    """(NeMo-Run's dry-run request, the job's executor) for `task` on `executor`; plugins run first, as in a real
    submission, so an invalid plan raises here. The experiment directory is deleted afterwards."""
    with run.Experiment(experiment, executor=executor, log_level="ERROR") as exp:
        exp.add(task, executor=executor, name=name, plugins=list(plugins or []))
        exp.dryrun(log=False, delete_exp_dir=False)
        job = exp.jobs[0]
        request = job._dryrun_info.request
        text = _text(request, job.executor)
    import shutil

    shutil.rmtree(exp._exp_dir, ignore_errors=True)
    return request, text


def artifact(task: Any, executor: run.Executor, *, name: str = "job",
             plugins: Optional[Sequence[run.Plugin]] = None) -> str:
    """The sbatch script, TrainJob manifest (YAML) or torchrun command line NeMo-Run would submit."""
    return dryrun_request(task, executor, name=name, plugins=plugins)[1]


def _text(request: Any, executor: run.Executor) -> str:
    from nemo_recipes.executors import registry

    return registry.render(request, executor)
