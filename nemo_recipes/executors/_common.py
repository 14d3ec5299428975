"""Shared by the presets: the default container image and the checks of user arguments.

Standard library only; every check returns Problems so that a preset reports all of them in one error.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional, Union

from nemo_recipes._version import __version__
from nemo_recipes.errors import InvalidInputError, Problem, raise_if_any

# Presets read the per-node bound from here, beside the other checks of their arguments.
from nemo_recipes.plan.hardware import MAX_GPUS_PER_NODE as MAX_GPUS_PER_NODE
from nemo_recipes.plan.hardware import MAX_NODES, get_gpu

#: The image that `docker/Dockerfile` builds (`docker build -t nemo-recipes:0.1.0 -f docker/Dockerfile .`).
DEFAULT_IMAGE = f"nemo-recipes:{__version__}"

# Numbers of the presets' CLI factories are annotated `int | str`: NeMo-Run parses a factory's arguments by their
# annotations, and a value that is not a number (`slurm(nodes=four)`) must reach the preset as text, to get its
# one-line message (field, value, fix) rather than NeMo-Run's nested "Failed to parse".
Count = Union[int, str]

#: Environment variable through which a preset records the GPU type it was given, for the plugin to plan with.
GPU_ENV = "NEMO_RECIPES_GPU"

#: With 1, NeMo's MegatronStrategy adds `max_memory_reserved` / `max_memory_allocated` (bytes, rank 0's GPU) to every
#: progress line: the peak memory `watch` reports beside the plan's. Only for jobs on GPUs: NeMo 2.7.3 copies the
#: values through pinned CUDA memory (strategies/megatron_strategy.py:815-829), which fails on a machine without
#: CUDA ("pin_memory=True requires a CUDA ... backend"; smoke runs survive it only through the CPU layer's patches,
#: and the smoke launcher drops it: 0 bytes is no peak memory).
MEMORY_LOG_ENV = "NEMO_LOG_MEMORY_USAGE"


def memory_log_env(on_gpus: bool) -> dict[str, str]:
    """The job's memory logging, for a job on GPUs; a user's own value (env=) is put after it and wins."""
    return {MEMORY_LOG_ENV: "1"} if on_gpus else {}


#: Largest node, GPU and process count a preset takes: the catalog's bound of num_nodes and num_gpus_per_node (beyond
#: any cluster built; a larger number is a typo that the scheduler would refuse only at submission).
MAX_COUNT = MAX_NODES


def positive_int(field: str, value: Any, *, minimum: int = 1, maximum: int = MAX_COUNT) -> list[Problem]:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        what = f"an integer from {minimum} to {maximum:,}"
        return [Problem(field, value, f"must be {what}.", f"set {field} to {what}.")]
    return []


def non_empty_str(field: str, value: Any, fix: str) -> list[Problem]:
    if not isinstance(value, str) or not value.strip():
        return [Problem(field, value, "must be a non-empty string.", fix)]
    return single_line(field, value)


def single_line(field: str, value: Any) -> list[Problem]:
    """A value written into one line of a job script or manifest (`#SBATCH --account=...`): a newline or another
    control character would end that line and start another, breaking the header or injecting a command."""
    if value is None:
        return []
    if not isinstance(value, str):
        return [Problem(field, value, "must be a string.", f"quote the value of {field}.")]
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return [
            Problem(
                field,
                value,
                "contains a newline or another control character, which would break the line "
                "of the job script it is written to.",
                f"remove it from {field}.",
            )
        ]
    return []


# ---- values NeMo-Run writes into a job script without quoting them ----
#
# NeMo-Run 0.11.1 quotes the `#SBATCH` values and nothing on the srun line: its `noquote` is an alias of `str`, so
# every srun argument (the image, the mounts, the job directory in --output and --container-mounts, the job name,
# which starts with the account) is written as it is. A space splits such a value, `$(...)` or a backtick runs, and
# `;` or `&&` starts a second command on the cluster. Those fields may hold only characters that mean nothing to the
# shell; one table says which, and `script_word` applies it. (Environment values we quote ourselves, and
# `setup_lines` is shell by definition.)

_NAME = r"[A-Za-z0-9_.+-]+"
#: kind -> (what a value may hold, the words of the fix)
SCRIPT_WORDS: dict[str, tuple[re.Pattern[str], str]] = {
    # sacctmgr/scontrol names; a partition may be a comma-separated list of them.
    "slurm name": (re.compile(_NAME), "letters, digits, '_', '.', '+' and '-'"),
    "slurm names": (re.compile(f"{_NAME}(,{_NAME})*"), "names of letters, digits, '_', '.', '+', '-', and commas"),
    # Registry images (nvcr.io/nvidia/nemo:25.09, Pyxis' nvcr.io#nvidia/nemo:25.09, @sha256:...) or .sqsh paths;
    # '#' starts a comment only at the start of a word.
    "image": (re.compile(r"[A-Za-z0-9_@%+=:./-][A-Za-z0-9_@%+=:./#-]*"), "letters, digits and _ @ % + = : . / # -"),
    # src:dst[:flags]; a comma would start another mount.
    "mount": (re.compile(r"[A-Za-z0-9_@%+=:./-]+"), "letters, digits and _ @ % + = : . / - (no spaces or commas)"),
    # A directory that is the source of a mount too: no ':' or ','; no '~', which the shell expands.
    "path": (re.compile(r"[A-Za-z0-9_@%+=./-]+"), "letters, digits and _ @ % + = . / - (no spaces, ':' or ',')"),
    "host": (re.compile(r"[A-Za-z0-9_.:\[\]-]+"), "a host name or address"),
}


def script_word(field: str, value: Any, kind: str) -> list[Problem]:
    """Problems unless `value` (None: unset) is a string of the `kind` of SCRIPT_WORDS: NeMo-Run writes it into the
    job script unquoted."""
    if value is None:
        return []
    pattern, allowed = SCRIPT_WORDS[kind]
    if not isinstance(value, str):
        return [Problem(field, value, "must be a string.", f"give {field} as text.")]
    if pattern.fullmatch(value):
        return []
    return [
        Problem(
            field,
            value,
            f"must be one word of {allowed}: NeMo-Run writes {field} unquoted into the job script, where the shell "
            "would split it at a space, run `$(...)` or a backtick, or start another command at ';', '&' or '|'.",
            f"use only {allowed} in {field}"
            + (
                " (a path with a space: link it to one without, `ln -s`, and use that)."
                if kind in ("mount", "path")
                else "."
            ),
        )
    ]


def optional_bool(field: str, value: Any) -> list[Problem]:
    if value is not None and not isinstance(value, bool):
        return [Problem(field, value, "must be true, false or unset.", f"set {field} to True or False.")]
    return []


def mapping(field: str, value: Any, example: str) -> tuple[dict, list[Problem]]:
    """`value` (None: empty) as a dict, or the problem that it is not a mapping."""
    if value is None:
        return {}, []
    if not isinstance(value, Mapping):
        return {}, [Problem(field, value, "must be a mapping.", f"give {field} as a dict, e.g. {example}.")]
    return dict(value), []


def mapping_list(field: str, value: Any, example: str) -> list[Problem]:
    """Problems unless `value` is a list of mappings (pod volumes, mounts, tolerations)."""
    if (
        isinstance(value, (str, Mapping))
        or not isinstance(value, Iterable)
        or not all(isinstance(item, Mapping) for item in value)
    ):
        return [
            Problem(field, value, "must be a list of mappings.", f"give {field} as a list of dicts, e.g. [{example}].")
        ]
    return []


_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}", re.ASCII)


def slurm_time(field: str, value: Any) -> list[Problem]:
    if not isinstance(value, str) or not _SLURM_TIME.fullmatch(value):  # fullmatch: '$' would allow a final newline
        return [
            Problem(field, value, "is not a Slurm time limit.", "use minutes, HH:MM:SS or D-HH:MM:SS, e.g. '04:00:00'.")
        ]
    return []


def gpu_env(gpu: Optional[str]) -> tuple[dict[str, str], list[Problem]]:
    """{GPU_ENV: canonical name} for a known GPU, {} for None, or the unknown-GPU problem."""
    if gpu is None:
        return {}, []
    try:
        return {GPU_ENV: get_gpu(gpu).name}, []
    except InvalidInputError as error:
        return {}, error.problems


def str_list(field: str, value: Any) -> list[Problem]:
    if (
        isinstance(value, (str, Mapping))
        or not isinstance(value, Iterable)
        or not all(isinstance(v, str) for v in value)
    ):
        return [Problem(field, value, "must be a list of strings.", f"give {field} as a list, e.g. ['a', 'b'].")]
    return [p for v in value for p in single_line(field, v)]


def raise_if(problems: list[Problem], context: str) -> None:
    raise_if_any(problems, context=context)
