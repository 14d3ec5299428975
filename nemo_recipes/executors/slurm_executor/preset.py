"""Slurm preset: sbatch through a local or SSH tunnel, Pyxis containers, one torchrun rank per GPU."""

from __future__ import annotations

import os
from typing import Any, Iterable, Literal, Mapping, Optional, Sequence, cast

import nemo_run as run

from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.executors._common import (
    DEFAULT_IMAGE,
    MAX_GPUS_PER_NODE,
    Count,
    gpu_env,
    mapping,
    memory_log_env,
    non_empty_str,
    optional_bool,
    positive_int,
    raise_if,
    script_word,
    single_line,
    slurm_time,
    str_list,
)
from nemo_recipes.executors.secrets import (
    add_setup_exports,
    env_problems,
    export_names,
    secret_name_problems,
    secure_slurm,
    split_for_slurm,
)

SECRET_HOW = (
    "list its name in secrets=[...] and export it in the environment that runs sbatch: "
    "Slurm copies it into the job (--export), never into the script."
)


def slurm(
    *,
    account: str,
    partition: Optional[str] = None,
    nodes: int = 1,
    gpus_per_node: int = 8,
    processes_per_node: Optional[int] = None,
    gpu: Optional[str] = None,
    container_image: Optional[str] = DEFAULT_IMAGE,
    container_mounts: Sequence[str] = (),
    time: str = "04:00:00",
    exclusive: Optional[bool] = None,
    mem: Optional[str] = None,
    retries: int = 0,
    tunnel: Literal["local", "ssh"] = "local",
    host: Optional[str] = None,
    user: Optional[str] = None,
    job_dir: Optional[str] = None,
    identity: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    secrets: Iterable[str] = (),
    qos: Optional[str] = None,
    constraint: Optional[str] = None,
    setup_lines: Optional[str] = None,
    packager: Optional[run.Packager] = None,
) -> run.SlurmExecutor:
    """NeMo-Run's `SlurmExecutor` for a torchrun job of `nodes` x `processes_per_node` ranks.

    Args:
        account, partition, qos, constraint: the usual sbatch options.
        nodes: nodes to allocate; one torchrun per node (NeMo-Run's torchrun launcher).
        gpus_per_node: GPUs requested per node (`--gpus-per-node`); 0 for CPU-only clusters.
        processes_per_node: ranks per node; defaults to gpus_per_node (one rank per GPU), or 1 without GPUs.
        gpu: GPU type to plan memory against (e.g. "h100"); None: structural checks only.
        container_image: Pyxis/enroot image; None runs on the node's own Python (no container).
        container_mounts: Pyxis mounts, "src:dst[:flags]".
        time: time limit, HH:MM:SS or D-HH:MM:SS.
        exclusive: whole nodes (default: True with GPUs, False without).
        mem: memory per node (sbatch --mem, e.g. "0" for all of it with exclusive nodes).
        retries: how often a job that fails is requeued. NeMo-Run submits every job requeueable (`sbatch
            --requeue`: Requeue=1 in `scontrol show job`), so a preemption or a lost node puts it back in the
            queue whatever `retries` is; a job that exits non-zero requeues itself (`scontrol requeue` at the end
            of its script, TORCHX_MAX_RETRIES=retries) while SLURM_RESTART_COUNT < retries. Requeues of either
            kind count in SLURM_RESTART_COUNT, so a preempted job has that many fewer retries left. Each run
            writes its own log, log-<job>_<id>_<restart count>.out, and resumes from the last checkpoint
            (AutoResume); a job over its time limit ends TIMEOUT and is not requeued.
        tunnel: "local" when this machine runs sbatch, "ssh" to submit through host/user/job_dir/identity.
        job_dir: where jobs write their files on the cluster (SSH: required; local: NeMo-Run's experiments dir).
        env: environment of the job; any value (spaces, quotes, $, backticks, newlines) arrives unchanged.
        secrets: names passed by reference from the submitting environment (WANDB_API_KEY, HF_TOKEN, ... always).
        setup_lines: shell lines run in the batch script before srun.
        packager: how code reaches the cluster; default none (the image holds nemo-recipes).
    """
    env, problems = mapping("env", env, "{'NCCL_DEBUG': 'WARN'}")
    secret_problems = str_list("secrets", secrets)  # before list(): a string would become a list of letters
    problems += secret_problems or secret_name_problems(secrets)
    secrets = [] if secret_problems else list(secrets)
    recorded, gpu_problems = gpu_env(gpu)
    problems += gpu_problems
    problems += non_empty_str(
        "account", account, "set account to your Slurm account (sacctmgr show assoc user=$USER)."
    ) or script_word("account", account, "slurm name")
    processes_per_node, shape_problems = _shape_problems(nodes, gpus_per_node, processes_per_node)
    problems += shape_problems
    problems += _script_problems(partition, qos, constraint, mem, container_image, job_dir, exclusive, setup_lines)
    if packager is not None and not isinstance(packager, run.Packager):
        problems.append(
            Problem(
                "packager",
                packager,
                "must be a NeMo-Run Packager.",
                "pass e.g. run.GitArchivePackager(), or leave packager unset.",
            )
        )
    problems += _one_rank_per_gpu(gpus_per_node, processes_per_node)
    problems += slurm_time("time", time)
    problems += positive_int("retries", retries, minimum=0)
    problems += str_list("container_mounts", container_mounts) or [
        p for mount in container_mounts for p in script_word("container_mounts", mount, "mount")
    ]
    problems += env_problems(env, secrets, SECRET_HOW)
    problems += _tunnel_problems(tunnel, host, user, job_dir, identity)
    raise_if(problems, "slurm executor")

    plain, quoted = split_for_slurm(env)
    has_gpus = gpus_per_node > 0
    return run.SlurmExecutor(
        account=account,
        partition=partition,
        nodes=nodes,
        ntasks_per_node=processes_per_node,  # NeMo-Run's torchrun launcher turns it into --nproc-per-node
        gpus_per_node=gpus_per_node if has_gpus else None,
        container_image=container_image,
        container_mounts=list(container_mounts),
        time=time,
        exclusive=(has_gpus if exclusive is None else exclusive) or None,
        mem=mem,
        qos=qos,
        constraint=constraint,
        retries=retries,
        tunnel=_tunnel(tunnel, host, user, job_dir, identity),
        packager=packager or run.Packager(),
        launcher="torchrun",
        env_vars={**memory_log_env(has_gpus), **plain, **recorded},
        setup_lines=add_setup_exports(setup_lines, quoted),
        additional_parameters={"export": export_names(None, secrets)} if secrets else None,
        poll_estimated_start_time=False,
    )


def _shape_problems(nodes: Any, gpus_per_node: Any, processes_per_node: Any) -> tuple[Any, list[Problem]]:
    """(ranks per node, with its default: one per GPU, or 1 without GPUs; problems of the three counts)."""
    problems = positive_int("nodes", nodes)
    problems += positive_int("gpus_per_node", gpus_per_node, minimum=0, maximum=MAX_GPUS_PER_NODE)
    if processes_per_node is None:
        processes_per_node = gpus_per_node if isinstance(gpus_per_node, int) and gpus_per_node > 0 else 1
    problems += positive_int("processes_per_node", processes_per_node, maximum=MAX_GPUS_PER_NODE)
    return processes_per_node, problems


def _script_problems(
    partition: Any,
    qos: Any,
    constraint: Any,
    mem: Any,
    container_image: Any,
    job_dir: Any,
    exclusive: Any,
    setup_lines: Any,
) -> list[Problem]:
    """What would break the batch script: each of these becomes one `#SBATCH` line or one argument of it."""
    problems: list[Problem] = []
    # `#SBATCH` values NeMo-Run quotes: one line each.
    for field, value in (("constraint", constraint), ("mem", mem)):
        problems += single_line(field, value)
    # Names Slurm knows, and what NeMo-Run writes unquoted on the srun line (see _common.SCRIPT_WORDS).
    for field, value, kind in (
        ("partition", partition, "slurm names"),
        ("qos", qos, "slurm name"),
        ("container_image", container_image, "image"),
        ("job_dir", job_dir, "path"),
    ):
        problems += script_word(field, value, kind)
    problems += optional_bool("exclusive", exclusive)
    if setup_lines is not None and not isinstance(setup_lines, str):
        problems.append(
            Problem(
                "setup_lines",
                setup_lines,
                "must be a string of shell lines.",
                "give setup_lines as one string, lines separated by newlines.",
            )
        )
    return problems


def _one_rank_per_gpu(gpus_per_node: Any, processes_per_node: Any) -> list[Problem]:
    if (
        isinstance(gpus_per_node, int)
        and gpus_per_node > 0
        and isinstance(processes_per_node, int)
        and processes_per_node != gpus_per_node
    ):
        return [
            Problem(
                "processes_per_node",
                processes_per_node,
                f"differs from gpus_per_node={gpus_per_node}: Megatron wants one rank per GPU.",
                "leave processes_per_node unset.",
            )
        ]
    return []


def _tunnel_problems(tunnel: Any, host: Any, user: Any, job_dir: Any, identity: Any) -> list[Problem]:
    problems: list[Problem] = []
    if tunnel == "ssh":
        for field, value, kind in (("host", host, "host"), ("user", user, "slurm name"), ("job_dir", job_dir, "")):
            found = non_empty_str(field, value, f"set {field} for the SSH tunnel (tunnel='ssh').")
            problems += found or (script_word(field, value, kind) if kind else [])
        if identity is not None and (not isinstance(identity, str) or not os.path.exists(os.path.expanduser(identity))):
            problems.append(Problem("identity", identity, "no such file.", "give the path of your SSH private key."))
    elif tunnel != "local":
        problems.append(Problem("tunnel", tunnel, "unknown tunnel.", "use 'local' or 'ssh'."))
    elif job_dir is None:  # jobs then live under NEMORUN_HOME, a word of the srun line like job_dir
        from nemo_run.config import get_nemorun_home

        problems += script_word("NEMORUN_HOME", get_nemorun_home(), "path")
    return problems


def _tunnel(tunnel: str, host: Any, user: Any, job_dir: Any, identity: Any) -> Any:
    """NeMo-Run's tunnel for checked arguments: sbatch on this machine, or through SSH."""
    if tunnel == "ssh":
        return run.SSHTunnel(
            host=host, user=user, job_dir=job_dir, identity=os.path.expanduser(identity) if identity else None
        )
    return run.LocalTunnel(job_dir=job_dir or "")


# ---- the preset interface (registry.py) ----

EXECUTOR = "SlurmExecutor"


def cli_factory(
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
    kwargs: dict[str, Any] = {} if container_image is None else {"container_image": container_image}
    if account is None:
        account = os.environ.get("SBATCH_ACCOUNT") or os.environ.get("SLURM_ACCOUNT")
        if not account:
            raise InvalidConfigError(
                [
                    Problem(
                        "account",
                        None,
                        "the slurm executor needs a Slurm account.",
                        "export SBATCH_ACCOUNT=<account>, or use a cluster profile (run.executor=<profile name>).",
                    )
                ]
            )
    return slurm(
        account=account,
        partition=partition,
        # Text that is not a number reaches the preset as it is, for its message (see Count).
        nodes=cast(int, nodes),
        gpus_per_node=cast(int, gpus_per_node),
        gpu=gpu,
        time=time,
        tunnel=cast(Literal["local", "ssh"], tunnel),
        host=host,
        user=user,
        job_dir=job_dir,
        identity=identity,
        retries=cast(int, retries),
        **kwargs,
    ).to_config()


def secure(executor: run.SlurmExecutor, task_env: Optional[dict[str, str]], secrets: Iterable[str]) -> list[Problem]:
    """Secrets by reference (`#SBATCH --export`), awkward values quoted in setup lines: see secrets.secure_slurm."""
    return secure_slurm(executor, task_env, secrets)


def render(request: Any, executor: run.SlurmExecutor) -> str:
    """The sbatch script."""
    return request.materialize()
