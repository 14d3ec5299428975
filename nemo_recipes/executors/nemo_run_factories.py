"""NeMo-Run CLI factories: presets, cluster profiles and the recipe plugin by name.

    nemo llm pretrain --factory gpt_70b run.executor=my_slurm run.executor.nodes=8 run.plugins=recipe_plugin

Importing this module registers, in NeMo-Run's factory registry under `run.Executor` (the namespace NeMo-Run's
`executor=NAME` lookup searches first):
  * each preset of `registry.PRESETS` (`local`, `slurm`, `kubernetes`) by its `cli_factory`, e.g.
    `run.executor=slurm run.executor.nodes=4`;
  * one factory per cluster profile of the user's clusters.yaml (see `profiles.py`), e.g. `run.executor=my_slurm`;
and under `run.Plugin`: `recipe_plugin` (optionally `recipe_plugin(gpu=h100)`).
Each returns a `run.Config` of the stock executor, so NeMo-Run's `executor.FIELD=VALUE` overrides apply to it.
"""

from __future__ import annotations

import functools
from typing import Optional

import nemo_run as run

from nemo_recipes.executors import registry
from nemo_recipes.executors.profiles import load_profiles

_REGISTERED: set[str] = set()


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

    execute_task._applies_recipe_plugins = True  # type: ignore[attr-defined]  # a marker on the function object
    RunContext._execute_task = execute_task


def register(profiles: bool = True) -> list[str]:
    """Register the presets, the plugin and (unless profiles=False) every profile; returns the names registered.

    Profiles are read when this runs (the entry point is loaded at each `nemo` invocation). A broken profile file
    does not stop the presets from registering: its error is raised when the profile is used.
    """
    names = []
    for preset in registry.NAMES:
        if preset not in _REGISTERED:
            try:
                factory = registry.module(preset).cli_factory
            except ImportError:  # an optional package of this preset is missing: the others still register
                continue
            run.cli.factory(factory, target=run.Executor, name=preset)
            _REGISTERED.add(preset)
            names.append(preset)
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
            if name not in registry.NAMES:
                run.cli.factory(_profile_factory(name), target=run.Executor, name=name)
                _REGISTERED.add(name)
                names.append(name)
    return names


register()
dry_runs_apply_recipe_plugins()
