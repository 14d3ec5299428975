"""Shared by the presets: the default container image and the checks of user arguments.

Standard library only; every check returns Problems so that a preset reports all of them in one error.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

from nemo_recipes import __version__
from nemo_recipes.errors import InvalidRecipeError, Problem
from nemo_recipes.plan.hardware import get_gpu

#: The image that `docker/Dockerfile` builds (`docker build -t nemo-recipes:0.1.0 -f docker/Dockerfile .`).
DEFAULT_IMAGE = f"nemo-recipes:{__version__}"

#: Environment variable through which a preset records the GPU type it was given, for the plugin to plan with.
GPU_ENV = "NEMO_RECIPES_GPU"


def positive_int(field: str, value: Any, *, minimum: int = 1) -> list[Problem]:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        return [Problem(field, value, f"must be {what}.", f"set {field} to {what}.")]
    return []


def non_empty_str(field: str, value: Any, fix: str) -> list[Problem]:
    if not isinstance(value, str) or not value.strip():
        return [Problem(field, value, "must be a non-empty string.", fix)]
    return []


_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


def slurm_time(field: str, value: Any) -> list[Problem]:
    if not isinstance(value, str) or not _SLURM_TIME.match(value):
        return [Problem(field, value, "is not a Slurm time limit.",
                        "use minutes, HH:MM:SS or D-HH:MM:SS, e.g. '04:00:00'.")]
    return []


def gpu_env(gpu: Optional[str]) -> tuple[dict[str, str], list[Problem]]:
    """{GPU_ENV: canonical name} for a known GPU, {} for None, or the unknown-GPU problem."""
    if gpu is None:
        return {}, []
    try:
        return {GPU_ENV: get_gpu(gpu).name}, []
    except InvalidRecipeError as error:
        return {}, error.problems


def str_list(field: str, value: Any) -> list[Problem]:
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        return [Problem(field, value, "must be a list of strings.", f"give {field} as a list, e.g. ['a', 'b'].")]
    return []


def raise_if(problems: list[Problem], context: str) -> None:
    if problems:
        raise InvalidRecipeError(problems, context=context)
