"""Local preset: torchrun on this machine, one process per GPU."""

from __future__ import annotations

import shlex
from typing import Any, Iterable, Mapping, Optional, cast

import nemo_run as run

from nemo_recipes.errors import Problem
from nemo_recipes.executors._common import (
    MAX_GPUS_PER_NODE,
    Count,
    gpu_env,
    mapping,
    memory_log_env,
    optional_bool,
    positive_int,
    raise_if,
    str_list,
)
from nemo_recipes.executors.registry import generic_secure
from nemo_recipes.executors.secrets import env_problems, secret_name_problems


def local(
    devices: int = 1,
    *,
    gpu: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    secrets: Iterable[str] = (),
    torchrun: bool = True,
) -> run.LocalExecutor:
    """NeMo-Run's `LocalExecutor` starting `devices` processes with torchrun on this machine.

    Args:
        devices: processes (GPUs) on this machine; the plugin sets the trainer's `devices` to it.
        gpu: GPU type (e.g. "h100", "a100-40gb") to plan memory against; None: structural checks only.
        env: extra environment of the job. Secrets may not be given here: they are inherited from this process.
        secrets: more names to treat as secrets (besides WANDB_API_KEY, HF_TOKEN, ...).
        torchrun: launch through torchrun (one process per device); False runs the task as one plain process.
    """
    env, problems = mapping("env", env, "{'NCCL_DEBUG': 'WARN'}")
    secret_problems = str_list("secrets", secrets)
    problems += secret_problems or secret_name_problems(secrets)
    recorded, gpu_problems = gpu_env(gpu)
    problems += gpu_problems
    problems += positive_int("devices", devices, maximum=MAX_GPUS_PER_NODE)
    problems += optional_bool("torchrun", torchrun)
    problems += env_problems(
        env, [] if secret_problems else secrets, "export it in this shell: local jobs inherit the environment."
    )
    raise_if(problems, "local executor")
    return run.LocalExecutor(
        ntasks_per_node=devices,
        launcher="torchrun" if torchrun else None,
        # One process per GPU: a job on GPUs (`smoke --executor local`, on CPUs, drops the memory logging).
        env_vars={**memory_log_env(True), **env, **recorded},
    )


# ---- the preset interface (registry.py) ----

EXECUTOR = "LocalExecutor"


def cli_factory(devices: Count = 1, gpu: Optional[str] = None) -> run.Config[run.LocalExecutor]:
    """torchrun on this machine with `devices` processes."""
    # Text that is not a number reaches local() as it is, which reports it (field, value, fix).
    return local(cast(int, devices), gpu=gpu).to_config()


def secure(executor: run.LocalExecutor, task_env: Optional[dict[str, str]], secrets: Iterable[str]) -> list[Problem]:
    # A local job inherits this process's environment: a secret needs no copy in the files NeMo-Run writes.
    return generic_secure(executor, task_env, secrets)


def render(request: Any, executor: run.LocalExecutor) -> str:
    """The torchrun (or plain) command line of the job."""
    (params,) = request.role_params.values()
    return shlex.join(params[0].args) + "\n"
