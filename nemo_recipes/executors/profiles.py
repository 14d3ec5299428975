"""Cluster profiles: named clusters in one YAML file, so that swapping clusters is one word.

The file is `$NEMO_RECIPES_CLUSTERS`, else `$XDG_CONFIG_HOME/nemo-recipes/clusters.yaml`, else
`~/.config/nemo-recipes/clusters.yaml`:

    my_slurm:                 # the name: `--executor my_slurm`, `run.executor=my_slurm`
      preset: slurm           # local | slurm | kubernetes
      gpu: h100               # GPU type the planner checks memory against (optional)
      account: my_account     # every other key is an argument of the preset
      partition: batch
      nodes: 4
      container_mounts: [/lustre/data:/data]
      secrets: [WANDB_API_KEY]
    laptop:
      preset: local
      devices: 2
    gke:
      preset: kubernetes
      trainer_version: v2.3   # the cluster's Kubeflow Trainer release: v2.1, v2.2 or v2.3 (the default)

Each error names the file, the profile, the field and the fix.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from nemo_recipes import yaml_files
from nemo_recipes.errors import InvalidConfigError, InvalidInputError, Problem, did_you_mean, secret_value_problems
from nemo_recipes.executors import registry
from nemo_recipes.executors.kubernetes_executor.trainer import normalise_version

ENV_VAR = "NEMO_RECIPES_CLUSTERS"
PRESET_NAMES = registry.NAMES


def preset_function(name: str) -> Callable[..., Any]:
    """The preset function called `name` (imported lazily: the Kubernetes one may lack its package)."""
    return registry.function(name)


def profiles_path() -> Path:
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "nemo-recipes" / "clusters.yaml"


@dataclass(frozen=True)
class ClusterProfile:
    """One named cluster: a preset, its arguments, and the GPU type to plan for."""

    name: str
    preset: str
    gpu: Optional[str] = None
    args: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def executor(self, **overrides: Any) -> Any:
        """The preset's stock NeMo-Run executor for this cluster; `overrides` replace profile arguments."""
        args = {**self.args, **overrides}
        if self.gpu is not None and "gpu" not in overrides:
            args["gpu"] = self.gpu
        return call_preset(self.preset, args, context=f"cluster profile {self.name!r} ({self.source})")

    def plugin(self, **kwargs: Any) -> Any:
        """The recipe plugin planning for this cluster's GPU type."""
        from nemo_recipes.executors.plugin import RecipePlugin

        return RecipePlugin(gpu=self.gpu, **kwargs)


def call_preset(preset: str, args: dict[str, Any], *, context: str) -> Any:
    """`preset(**args)`, with an unknown or missing argument reported as a problem (with "did you mean") rather
    than Python's TypeError, and every problem of the preset under `context`."""
    function = preset_function(preset)
    parameters = inspect.signature(function).parameters
    allowed = list(parameters)
    problems = [
        Problem(
            str(key),
            value,
            f"is not an argument of the {preset} preset{did_you_mean(str(key), allowed)}.",
            f"use one of: {', '.join(allowed)}.",
        )
        for key, value in args.items()
        if key not in allowed
    ]
    problems += [
        Problem(
            name,
            None,
            f"is required by the {preset} preset.",
            f"give {name} (e.g. -E {name}=..., or in the cluster profile).",
        )
        for name in _required(parameters)
        if name not in args
    ]
    if problems:
        raise InvalidInputError(problems, context=context)
    # The environment is the preset's to check (a secret there passes by reference); any other argument can only
    # carry its value into the job's files, so the value of a secret environment variable there is refused.
    secret = [p for key, value in args.items() if key != "env" for p in secret_value_problems(str(key), value)]
    try:
        executor = function(**args)
    except InvalidInputError as error:  # keeps the class: a kubeconfig problem stays a configuration problem
        raise type(error)([*secret, *error.problems], context=context) from None
    if secret:
        raise InvalidConfigError(secret, context=context)
    return executor


def _required(parameters: Mapping[str, inspect.Parameter]) -> list[str]:
    return [
        p.name
        for p in parameters.values()
        if p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]


def load_profiles(path: "str | os.PathLike[str] | None" = None) -> dict[str, ClusterProfile]:
    """All profiles of the file, checked; {} when the file does not exist."""
    file = Path(path) if path is not None else profiles_path()
    if not file.exists():
        return {}
    data = _read_profiles_file(file)
    problems: list[Problem] = []
    profiles: dict[str, ClusterProfile] = {}
    for name, settings in data.items():
        if not isinstance(name, str) or not name.strip() or name in PRESET_NAMES:
            problems.append(_name_problem(name))
            continue
        profile, found = _check(name, settings, str(file))
        problems += found
        if profile is not None:
            profiles[name] = profile
    if problems:
        raise InvalidConfigError(problems, context=f"cluster profiles in {file}")
    return profiles


def _name_problem(name: Any) -> Problem:
    if name in PRESET_NAMES:
        # `--executor slurm` always means the preset, so such a profile could never be used.
        return Problem(
            "profile",
            name,
            "has the name of a preset, which always means the preset itself.",
            f"rename the profile (e.g. my_{name}); the presets are {', '.join(PRESET_NAMES)}.",
        )
    return Problem("profile", name, "is not a profile name (a non-empty string).", "name it, e.g. my_cluster:.")


def _read_profiles_file(file: Path) -> dict:
    """The file's top-level mapping, read through the one bounded YAML loader (yaml_files): unreadable files, text
    that is not UTF-8, YAML errors, a key given twice (which YAML would resolve silently, last one winning) and
    files beyond its bounds are problems naming the file."""
    data = yaml_files.read_file(
        file,
        field="clusters",
        fix=f"fix the file: a mapping of profile names to settings (--clusters FILE or ${ENV_VAR}).",
    )
    data = data or {}
    if not isinstance(data, dict):
        raise InvalidConfigError(
            [
                Problem(
                    "clusters",
                    str(file),
                    "must be a mapping of profile names to settings.",
                    "write `my_cluster: {preset: slurm, account: ...}`.",
                )
            ]
        )
    return data


def get_profile(name: str, path: "str | os.PathLike[str] | None" = None) -> ClusterProfile:
    profiles = load_profiles(path)
    if not isinstance(name, str) or name not in profiles:
        file = Path(path) if path is not None else profiles_path()
        known = ", ".join(profiles) if profiles else ("none" if file.exists() else "none, the file does not exist")
        raise InvalidConfigError(
            [
                Problem(
                    "executor",
                    name,
                    f"is neither a preset nor a cluster profile{did_you_mean(name, [*profiles, *PRESET_NAMES])}.",
                    f"use one of the presets ({', '.join(PRESET_NAMES)}) or a profile of {file} (known: {known}).",
                )
            ]
        )
    return profiles[name]


def _check(name: str, settings: Any, source: str) -> tuple[Optional[ClusterProfile], list[Problem]]:
    where = f"{name}"
    if not isinstance(settings, dict):
        return None, [
            Problem(
                where, settings, "must be a mapping of settings.", f"write `{name}: {{preset: slurm, account: ...}}`."
            )
        ]
    settings = dict(settings)
    preset = settings.pop("preset", None)
    gpu = settings.pop("gpu", None)
    if preset not in PRESET_NAMES:
        hint = did_you_mean(str(preset), PRESET_NAMES) if preset is not None else ""
        return None, [
            Problem(
                f"{where}.preset",
                preset,
                f"unknown or missing preset{hint}.",
                f"set preset to one of: {', '.join(PRESET_NAMES)}.",
            )
        ]
    problems: list[Problem] = []
    if gpu is not None:
        from nemo_recipes.plan.hardware import get_gpu

        try:
            gpu = get_gpu(str(gpu)).name
        except InvalidInputError as error:
            problems += [Problem(f"{where}.gpu", p.value, p.message, p.fix) for p in error.problems]
    parameters = inspect.signature(preset_function(preset)).parameters
    allowed = [p for p in parameters if p != "gpu"]
    problems += [
        Problem(f"{where}.{key}", key, "is not a setting name (a string).", "name the setting, e.g. nodes:.")
        for key in settings
        if not isinstance(key, str)
    ]
    settings = {k: v for k, v in settings.items() if isinstance(k, str)}
    for key in settings:
        if key not in allowed:
            problems.append(
                Problem(
                    f"{where}.{key}",
                    settings[key],
                    f"is not an argument of the {preset} preset{did_you_mean(key, allowed)}.",
                    f"use one of: {', '.join(['gpu', *allowed])}.",
                )
            )
    if preset == "kubernetes" and "trainer_version" in settings:
        # Checked when the file is read (as gpu is), not when the profile is first used on a cluster.
        version, found = normalise_version(settings["trainer_version"], field=f"{where}.trainer_version")
        problems += found
        if version is not None:
            settings["trainer_version"] = version
    for key in _required(parameters):
        if key not in settings:
            problems.append(
                Problem(
                    f"{where}.{key}",
                    None,
                    f"is required by the {preset} preset.",
                    f"add `{key}: ...` to profile {name!r}.",
                )
            )
    return ClusterProfile(name=name, preset=preset, gpu=gpu, args=settings, source=source), problems


def executor_for(
    name: str, path: "str | os.PathLike[str] | None" = None, **overrides: Any
) -> tuple[Any, Optional[str]]:
    """(executor, GPU type) for a preset name (with `overrides` as its arguments) or a profile name."""
    if name in PRESET_NAMES:
        _refuse_shadowing_profile(name, path)
        return call_preset(name, overrides, context=f"{name} executor"), overrides.get("gpu")
    profile = get_profile(name, path)
    return profile.executor(**overrides), profile.gpu


def _refuse_shadowing_profile(name: str, path: "str | os.PathLike[str] | None") -> None:
    """A profile named like the preset asked for would be passed over without a word (the preset wins), so the
    user's cluster settings would silently not apply: refused, naming the file. Only the file's names are read
    here; a file that cannot be read is left to the verbs that use its profiles."""
    file = Path(path) if path is not None else profiles_path()
    if not file.exists():
        return
    try:
        names = _read_profiles_file(file)
    except InvalidConfigError:
        return
    if name in names:
        raise InvalidConfigError([_name_problem(name)], context=f"cluster profiles in {file}")
