"""The executors nemo-recipes knows, in one table, and what each must provide.

A preset is one module with this interface (`PresetModule`):

* `EXECUTOR`: the name of the NeMo-Run executor class it returns. NeMo-Run picks a scheduler by exact class, and
  so does this registry when it finds the preset (and so the secret policy) of a built executor.
* a function named like the preset (`slurm(...)`): the Python API, every argument checked, all problems reported
  at once; cluster profiles call it with their keys.
* `cli_factory(...)`: NeMo-Run's CLI factory (`run.executor=slurm run.executor.nodes=4`), registered under the
  preset's name.
* `secure(executor, task_env, secrets) -> list[Problem]`: the secret policy, applied to the executor and the task's
  environment by the recipe plugin before every submission and dry run (values of secrets never reach a file).
* `render(request, executor) -> str`: what NeMo-Run would submit (sbatch script, TrainJob manifest, command line).

Adding an executor (SkyPilot, Lepton, DGX Cloud) is one such module, one line in `PRESETS` and its tests;
`tests/test_executors_registry.py` checks every registered module against the interface, so a preset cannot be
registered without a secret policy. Executors no preset returns get `generic_secure`: secret values are removed
from what would be written to disk and must come from the submitting environment.

Standard library only: cluster profiles and the CLI's listing read the names without importing NeMo-Run.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable, Iterable, Optional, Protocol

from nemo_recipes.errors import InvalidConfigError, Problem, did_you_mean

#: preset name -> the module that implements it. The order is the order users see.
PRESETS: dict[str, str] = {
    "local": "nemo_recipes.executors.local_executor.preset",
    "slurm": "nemo_recipes.executors.slurm_executor.preset",
    "kubernetes": "nemo_recipes.executors.kubernetes_executor.preset",
}
NAMES: tuple[str, ...] = tuple(PRESETS)
#: What every preset module defines besides the function named like the preset.
INTERFACE = ("EXECUTOR", "cli_factory", "secure", "render")


class PresetModule(Protocol):
    EXECUTOR: str

    def cli_factory(self, *args: Any, **kwargs: Any) -> Any: ...

    def secure(self, executor: Any, task_env: Optional[dict[str, str]], secrets: Iterable[str]) -> list[Problem]: ...

    def render(self, request: Any, executor: Any) -> str: ...


def unknown(name: Any) -> InvalidConfigError:
    return InvalidConfigError(
        [
            Problem(
                "preset", name, f"unknown preset{did_you_mean(str(name), NAMES)}.", f"use one of: {', '.join(NAMES)}."
            )
        ]
    )


def module(name: str) -> PresetModule:
    """The module of preset `name`, imported on first use (the Kubernetes one may lack its package)."""
    if name not in PRESETS:
        raise unknown(name)
    found: ModuleType = importlib.import_module(PRESETS[name])
    missing = [attr for attr in (*INTERFACE, name) if not hasattr(found, attr)]
    if missing:
        # A programming error in a preset, not user input: say which part of the interface is absent.
        raise TypeError(f"preset {name!r} ({PRESETS[name]}) lacks {missing}; see nemo_recipes/executors/registry.py")
    return found


def function(name: str) -> Callable[..., Any]:
    """The preset's Python API, `slurm(...)` for "slurm"."""
    return getattr(module(name), name)


def of_executor(executor: Any) -> Optional[str]:
    """The preset whose executor class `executor` is (exact class, as NeMo-Run dispatches), or None."""
    cls = type(executor).__name__
    for name in NAMES:
        try:
            if module(name).EXECUTOR == cls:
                return name
        except ImportError:  # a preset whose optional package is missing returns no executor here
            continue
    return None


def secure(executor: Any, task_env: Optional[dict[str, str]], secrets: Iterable[str]) -> list[Problem]:
    """The secret policy of `executor`'s preset, or the generic one for any other executor."""
    name = of_executor(executor)
    policy = module(name).secure if name else generic_secure
    return policy(executor, task_env, secrets)


def render(request: Any, executor: Any) -> str:
    name = of_executor(executor)
    return module(name).render(request, executor) if name else repr(request)


def generic_secure(executor: Any, task_env: Optional[dict[str, str]], secrets: Iterable[str]) -> list[Problem]:
    """Secrets leave the executor's and the task's env (which NeMo-Run writes to disk); the job inherits them from
    the environment that starts it. A value that differs from that environment would be lost: a problem."""
    from nemo_recipes.executors.secrets import secret_names, take_secrets

    sources = [getattr(executor, "env_vars", None) or {}, task_env or {}]
    return take_secrets(sources, secret_names(list(secrets)))[1]
