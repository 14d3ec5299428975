"""NeMo-Run CLI factories: presets, cluster profiles and the recipe plugin by name.

    nemo llm pretrain --factory gpt_70b run.executor=my_slurm run.executor.nodes=8 run.plugins=recipe_plugin

Importing this module registers, in NeMo-Run's factory registry under `run.Executor` (the namespace NeMo-Run's
`executor=NAME` lookup searches first):
  * `local`, `slurm`, `kubernetes`: the presets, e.g. `run.executor=slurm run.executor.nodes=4`;
  * one factory per cluster profile of the user's clusters.yaml (see `profiles.py`), e.g. `run.executor=my_slurm`;
and under `run.Plugin`: `recipe_plugin` (optionally `recipe_plugin(gpu=h100)`).
Each returns a `run.Config` of the stock executor, so NeMo-Run's `executor.FIELD=VALUE` overrides apply to it.
"""

from __future__ import annotations

import functools
import os
from typing import Optional, Union

import nemo_run as run

from nemo_recipes.errors import InvalidRecipeError, Problem
from nemo_recipes.executors.kubeflow_trainer import DEFAULT_TRAINER_VERSION
from nemo_recipes.executors.local import local as _local
from nemo_recipes.executors.profiles import PRESET_NAMES, load_profiles
from nemo_recipes.executors.slurm import slurm as _slurm

_REGISTERED: set[str] = set()


# Numbers are annotated `int | str`: NeMo-Run parses a factory's arguments by their annotations, and a value that is
# not a number (`slurm(nodes=four)`) must reach the preset as text, to get its one-line message (field, value, fix)
# rather than NeMo-Run's nested "Failed to parse".
Count = Union[int, str]


def local(devices: Count = 1, gpu: Optional[str] = None) -> run.Config[run.LocalExecutor]:
    """torchrun on this machine with `devices` processes."""
    return _local(devices, gpu=gpu).to_config()


def slurm(
    account: Optional[str] = None,
    partition: Optional[str] = None,
    nodes: Count = 1,
    gpus_per_node: Count = 8,
    gpu: Optional[str] = None,
    container_image: Optional[str] = None,
    time: str = "04:00:00",
    tunnel: str = "local",
    host: Optional[str] = None,
    user: Optional[str] = None,
    job_dir: Optional[str] = None,
    identity: Optional[str] = None,
    retries: Count = 0,
) -> run.Config[run.SlurmExecutor]:
    """sbatch with one torchrun rank per GPU; container_image defaults to the nemo-recipes image.

    NeMo-Run's `executor=NAME` takes no arguments (it splits on '='), so the account comes from SBATCH_ACCOUNT or
    SLURM_ACCOUNT (the variables sbatch itself reads) when not given; other fields: `run.executor.nodes=4`.
    """
    kwargs = {} if container_image is None else {"container_image": container_image}
    if account is None:
        account = os.environ.get("SBATCH_ACCOUNT") or os.environ.get("SLURM_ACCOUNT")
        if not account:
            raise InvalidRecipeError([Problem(
                "account", None, "the slurm executor needs a Slurm account.",
                "export SBATCH_ACCOUNT=<account>, or use a cluster profile (run.executor=<profile name>).")])
    return _slurm(account=account, partition=partition, nodes=nodes, gpus_per_node=gpus_per_node, gpu=gpu,
                  time=time, tunnel=tunnel, host=host, user=user, job_dir=job_dir, identity=identity,
                  retries=retries, **kwargs).to_config()


def kubernetes(
    namespace: str = "default",
    nodes: Count = 1,
    gpus_per_node: Count = 8,
    gpu: Optional[str] = None,
    image: Optional[str] = None,
    runtime: str = "torch-distributed",
    shared_home_pvc: Optional[str] = None,
    trainer_version: str = DEFAULT_TRAINER_VERSION,
) -> run.Config[run.KubeflowExecutor]:
    """A Kubeflow Trainer TrainJob; image defaults to the nemo-recipes image. `shared_home_pvc` names the claim that
    holds this machine's NEMORUN_HOME, mounted at the same path in the pods so they can read the job's config.
    `trainer_version` (v2.1, v2.2, v2.3) is the cluster's Kubeflow Trainer release, which decides the TrainJob's
    shape; a cluster profile can set it too."""
    from nemo_recipes.executors.kubernetes import kubernetes as _kubernetes

    kwargs = {} if image is None else {"image": image}
    return _kubernetes(namespace=namespace, nodes=nodes, gpus_per_node=gpus_per_node, gpu=gpu, runtime=runtime,
                       shared_home_pvc=shared_home_pvc, trainer_version=trainer_version, **kwargs).to_config()


def recipe_plugin(gpu: Optional[str] = None, validate: bool = True) -> run.Config[run.Plugin]:
    """Set nodes/devices from the executor, refuse an invalid plan, set the plan's environment."""
    from nemo_recipes.executors.plugin import RecipePlugin

    return run.Config(RecipePlugin, gpu=gpu, validate=validate)


def _profile_factory(name: str):
    def factory() -> run.Config[run.Executor]:
        from nemo_recipes.executors.profiles import get_profile

        return get_profile(name).executor().to_config()

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"Cluster profile {name!r} from clusters.yaml."
    return factory


def dry_runs_apply_recipe_plugins() -> None:
    """`nemo llm pretrain ... run.plugins=recipe_plugin --dryrun` must refuse what the submission refuses. NeMo-Run
    0.11's dry run of a task prints it without calling any plugin (`RunContext._execute_task` calls
    `run.dryrun_fn` directly), so a plan the recipe plugin refuses would dry-run fine and exit 0. During such a dry
    run, our plugins first set up the task and executor exactly as a submission does (`run.run` calls them for a
    non-direct run with an executor, and so do we); other plugins are left alone, as NeMo-Run leaves them."""
    from nemo_run.cli.api import RunContext

    from nemo_recipes.executors.plugin import RecipePlugin

    original = RunContext._execute_task
    if getattr(original, "_applies_recipe_plugins", False):
        return

    @functools.wraps(original)
    def execute_task(self: RunContext, fn, task_args):
        ours = [p for p in (getattr(self, "plugins", None) or []) if isinstance(p, RecipePlugin)]
        if not (getattr(self, "dryrun", False) and ours and self.executor is not None and not self.direct):
            return original(self, fn, task_args)
        plain = run.dryrun_fn

        def dryrun_after_plugins(task, executor=None, build=False):
            for plugin in ours:
                plugin.setup(task, executor)
            return plain(task, executor=executor, build=build)

        run.dryrun_fn = dryrun_after_plugins
        try:
            return original(self, fn, task_args)
        finally:
            run.dryrun_fn = plain

    execute_task._applies_recipe_plugins = True
    RunContext._execute_task = execute_task


def register(profiles: bool = True) -> list[str]:
    """Register the presets, the plugin and (unless profiles=False) every profile; returns the names registered.

    Profiles are read when this runs (the entry point is loaded at each `nemo` invocation). A broken profile file
    does not stop the presets from registering: its error is raised when the profile is used.
    """
    names = []
    for fn in (local, slurm, kubernetes):
        if fn.__name__ not in _REGISTERED:
            run.cli.factory(fn, target=run.Executor, name=fn.__name__)
            _REGISTERED.add(fn.__name__)
            names.append(fn.__name__)
    if "recipe_plugin" not in _REGISTERED:
        run.cli.factory(recipe_plugin, target=run.Plugin, name="recipe_plugin")
        _REGISTERED.add("recipe_plugin")
        names.append("recipe_plugin")
    if profiles:
        try:
            found = load_profiles()
        except Exception:  # reported with its fix when the profile is used
            found = {}
        for name in found:
            if name not in PRESET_NAMES:
                run.cli.factory(_profile_factory(name), target=run.Executor, name=name)
                _REGISTERED.add(name)
                names.append(name)
    return names


register()
dry_runs_apply_recipe_plugins()
