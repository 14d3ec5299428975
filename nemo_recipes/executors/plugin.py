"""The recipe plugin: attach a recipe to an executor's hardware, refuse an invalid plan, set the job's environment.

    with run.Experiment("gpt") as exp:
        exp.add(nemo_recipes.gpt_70b(), executor=slurm(account="a", nodes=4), plugins=[RecipePlugin(gpu="h100")])

NeMo-Run calls `setup(task, executor)` inside `Experiment.add` (and `run.run`), before anything is packaged or
submitted, so an InvalidInputError raised here means nothing reached the cluster.
"""

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import nemo_run as run

from nemo_recipes import budget
from nemo_recipes.errors import ERROR, WARNING, InvalidInputError, Problem
from nemo_recipes.executors import registry
from nemo_recipes.executors._common import GPU_ENV
from nemo_recipes.executors.kubernetes_executor.trainer import mixed_pod_settings
from nemo_recipes.executors.secrets import executor_value_problems
from nemo_recipes.plan.hardware import get_gpu

#: GPUs of compute capability 10 (Blackwell) use 32 hardware queues with TP/CP overlap, older ones 1
#: (as NeMo's PerfEnvPlugin does).
_BLACKWELL_MAJOR = 10
#: Larger P2P chunks for pipeline-parallel sends across nodes (NeMo's performance recipes use 2 MiB).
PP_CHUNK_SIZE = "2097152"


class ConfigNotSharedWarning(UserWarning):
    """A TrainJob's pods would not find the config file NeMo-Run writes on the submitting machine."""


class DataNotMountedWarning(UserWarning):
    """A Slurm job's container would not see a data path: no container mount covers it."""


@dataclass(kw_only=True)
class RecipePlugin(run.Plugin):
    """Sets the trainer's `num_nodes`/`devices` from the executor, validates the recipe on that hardware, and sets
    the environment the plan needs.

    Args:
        gpu: GPU type to plan for ("h100", "a100-40gb", ...). Default: the GPU the preset or profile recorded;
            none at all means structural checks only (divisibility, batch arithmetic), no memory fit.
        validate: run the planner and refuse an invalid plan (default True).
        performance_env: set CUDA_DEVICE_MAX_CONNECTIONS / NCCL variables the plan needs (default True).
        secrets: more environment names to treat as secrets (WANDB_API_KEY, HF_TOKEN, ... always are).
    """

    gpu: Optional[str] = None
    validate: bool = True
    performance_env: bool = True
    secrets: list[str] = field(default_factory=list)

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        problems: list[Problem] = []
        nodes, devices = executor.nnodes(), executor.nproc_per_node()
        gpu = self.gpu or executor.env_vars.get(GPU_ENV)
        spec = None
        if isinstance(task, run.Partial) and getattr(task, "trainer", None) is not None:
            task.trainer.num_nodes = nodes
            task.trainer.devices = devices
            from nemo_recipes.plan import Cluster, validate
            from nemo_recipes.plan.data import read_data, resolved_paths
            from nemo_recipes.training.introspect import spec_from_partial

            # A blend by epochs becomes its weights first, on the trainer's steps as the job will run them: the
            # job then gets the blend the plan checks (the spec read back would carry the catalog's train_tokens).
            unresolved = _resolve_budget(task)
            problems += unresolved
            spec = resolved_paths(spec_from_partial(task))
            if unresolved:  # reported above; the rest is checked as an equal blend, not reported twice
                spec = spec.replace(data_epochs=())
            _set_data_paths(task, spec)
            if isinstance(executor, run.SlurmExecutor):
                _warn_if_not_mounted(executor, spec)
            if self.validate:
                # The data files, before any GPU hour: prefixes that exist, ids that fit the tokenizer, the
                # tokenizer that wrote them; and the plan with the tokenizer's vocabulary.
                spec, data = read_data(spec)
                problems += data.problems
                report = validate(spec, Cluster.of(nodes, devices, gpu))
                problems += report.problems
            if self.performance_env:
                for name, value in plan_env(spec, nodes, gpu).items():
                    executor.env_vars.setdefault(name, value)
        problems += self._secure(task, executor)
        problems += executor_value_problems(executor, task)
        problems += gpu_problems(task, executor)
        if isinstance(executor, run.KubeflowExecutor):
            problems += mixed_pod_settings(executor)
        if isinstance(task, run.Partial) and isinstance(executor, run.KubeflowExecutor):
            _warn_if_config_unreadable(executor)
        if any(p.severity == ERROR for p in problems):
            where = f"{nodes} node(s) x {devices} GPU(s)" + (f" of {gpu}" if gpu else "")
            name = spec.name if spec is not None else "task"
            raise InvalidInputError(
                problems, context=f"{name} on {executor.__class__.__name__} ({where}): not submitted"
            )

    def record_recipes(self, experiment: Any) -> Optional[str]:
        return record_recipes(experiment)

    def _secure(self, task: Any, executor: run.Executor) -> list[Problem]:
        # Every executor gets its preset's secret policy (registry.py); one no preset returns, the generic one.
        return registry.secure(executor, task.env if isinstance(task, run.Script) else None, self.secrets)


#: The recipes of an experiment's jobs as the plugin set them up, `.<experiment id>.recipes.json` beside the
#: experiment's directory ({"jobs": {job: {"spec": ...}}}, the spec as `smoke --dir` writes it in train.json): `watch
#: EXPERIMENT` reads it back without NeMo for tokens/s, TFLOP/s and the plan. Beside, not inside: `Experiment.run`
#: refuses an experiment directory that exists before it. The same name as watching/experiments.recipes_record.
RECIPES_RECORD = ".{}.recipes.json"


def recipes_record(experiment_dir: "str | Path") -> Path:
    directory = Path(experiment_dir)
    return directory.parent / RECIPES_RECORD.format(directory.name)


def record_recipes(experiment: Any) -> Optional[str]:
    """Write the recipe of each of the experiment's recipe jobs, with the executor's nodes and GPUs; returns the file
    written, if any. Never stops a submission: a record that cannot be made leaves `watch` without the recipe (no
    tokens/s), with a warning."""
    import json

    from nemo_recipes.plan.data import resolved_paths
    from nemo_recipes.training.introspect import spec_from_partial
    from nemo_recipes.yaml_files import write_atomic

    jobs, experiment_dir = {}, str(getattr(experiment, "_exp_dir", "") or "")
    try:
        for job in getattr(experiment, "jobs", []) or []:
            task = getattr(job, "task", None)
            if isinstance(task, run.Partial) and getattr(task, "trainer", None) is not None:
                jobs[job.id] = {"spec": resolved_paths(spec_from_partial(task)).to_dict()}
        if not jobs or not experiment_dir:
            return None
        path = recipes_record(experiment_dir)
        os.makedirs(path.parent, exist_ok=True)
        return str(write_atomic(path, json.dumps({"jobs": jobs}, indent=1).encode()))
    except Exception as error:  # a record is a convenience for `watch`: whatever fails, the job still goes
        warnings.warn(f"the recipe was not recorded ({error}): `watch` will show no tokens/s", stacklevel=2)
        return None


def gpu_problems(task: Any, executor: run.Executor) -> list[Problem]:
    """A recipe that trains on GPUs (its trainer's accelerator) submitted to a Slurm executor that asks for none:
    the job would be queued, then fail at its first CUDA call. CPU work (a smoke run, `data prepare`'s ranks) asks
    for no GPU and is not a recipe on GPUs."""
    trainer = getattr(task, "trainer", None) if isinstance(task, run.Partial) else None
    if trainer is None or str(getattr(trainer, "accelerator", "gpu")).lower() not in ("gpu", "cuda"):
        return []
    if not isinstance(executor, run.SlurmExecutor) or executor.gpus_per_node or executor.gpus_per_task:
        return []
    if executor.gres and "gpu" in str(executor.gres):
        return []
    return [
        Problem(
            "gpus_per_node",
            0,
            f"the recipe trains on GPUs (trainer.accelerator={trainer.accelerator!r}), but the Slurm executor asks "
            f"for none: its {executor.nproc_per_node()} process(es) per node would find no CUDA device and the job "
            "would fail after waiting in the queue.",
            "give the GPUs per node of the partition (-E gpus_per_node=8, or gpus_per_node: 8 in the cluster "
            "profile); to try the recipe scaled down on CPU nodes, run `nemo-recipes smoke RECIPE --executor ...`.",
        )
    ]


def _resolve_budget(task: run.Partial) -> list[Problem]:
    """The task's blend by epochs (`budget.blend_by_epochs`, which a recipe holds as a call because building it reads
    no file) replaced by the blend it gives, from the sources' manifests and the trainer's max_steps; its problems
    (a count that cannot be read, a budget that disagrees with the run) otherwise, the task unchanged."""
    data: Any = getattr(task, "data", None)
    node: Any = getattr(data, "paths", None)
    if getattr(node, "__fn_or_cls__", None) is not budget.blend_by_epochs:
        return []
    try:
        task.data.paths = budget.blend_by_epochs(
            node.paths, node.data_epochs, task.trainer.max_steps, data.global_batch_size, data.seq_length
        )
    except InvalidInputError as error:
        return error.problems
    return []


def _set_data_paths(task: run.Partial, spec: Any) -> None:
    """The task's data prefixes and tokenizer as `plan.data.resolved_paths` gives them (absolute; a tokenizer.json as
    its directory), in the form the task holds them (zipped with weights or not)."""
    data = getattr(task, "data", None)
    paths = getattr(data, "paths", None)
    if isinstance(paths, (list, tuple)) and paths and spec.data_paths:
        zipped = len(paths) == 2 * len(spec.data_paths) and all(isinstance(w, (int, float)) for w in paths[0::2])
        if zipped:
            task.data.paths = [item for pair in zip(paths[0::2], spec.data_paths, strict=True) for item in pair]
        elif len(paths) == len(spec.data_paths):
            task.data.paths = list(spec.data_paths)
    tokenizer = getattr(data, "tokenizer", None)
    if tokenizer is not None and spec.tokenizer_path is not None:
        for name in ("model_path", "pretrained_model_name"):
            if getattr(tokenizer, name, None):
                setattr(tokenizer, name, spec.tokenizer_path)


def _warn_if_not_mounted(executor: run.SlurmExecutor, spec: Any) -> None:
    """A warning (field, value, fix) for each path the job reads that its container does not mount. Warned, not
    refused, for the same reason as `_warn_if_config_unreadable`, and because the image may hold the path."""
    from nemo_recipes.executors.slurm_executor.mounts import unmounted
    from nemo_recipes.plan.data import job_paths

    for problem in unmounted(executor, job_paths(spec)):
        warnings.warn(str(problem), DataNotMountedWarning, stacklevel=3)


def _warn_if_config_unreadable(executor: run.KubeflowExecutor) -> None:
    """NeMo-Run's TrainJob command is `fdl_runner <job_dir>/configs/<name>_fn_or_script`, a file written on this
    machine. Warn unless a volume of the pods is mounted at or above job_dir. A warning, not a refusal: NeMo-Run
    0.11.1 calls `setup` from `Experiment.add`, before `dryrun()` or `run()` is chosen, so a plugin cannot refuse
    only a real submission (and its executor class must stay the stock one: NeMo-Run picks the scheduler by exact
    class)."""
    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors.kubernetes_executor.preset import SHARED_HOME_HOW, reads_configs_from

    if reads_configs_from(executor) is not None:
        return
    home = get_nemorun_home()
    configs = os.path.join(executor.job_dir, "configs")
    outside = not os.path.normpath(executor.job_dir).startswith(os.path.normpath(home).rstrip("/") + "/")
    fix = (
        f"run the experiment under NEMORUN_HOME ({home}) and {SHARED_HOME_HOW[0].lower()}{SHARED_HOME_HOW[1:]}"
        if outside
        else SHARED_HOME_HOW
    )
    problem = Problem(
        "shared_home_pvc",
        None,
        f"the TrainJob's pods read the task's config from {configs}, which NeMo-Run writes on this machine, and no "
        "volume of the pods is mounted there: a submitted job would fail in the pod (no such file). Dry runs and "
        "manifests are unaffected; NeMo-Run 0.11.1 does not tell a plugin whether it is a dry run, so this is a "
        "warning, not a refusal.",
        fix,
        WARNING,
    )
    warnings.warn(str(problem), ConfigNotSharedWarning, stacklevel=3)


def plan_env(spec: Any, nodes: int, gpu: Optional[str]) -> dict[str, str]:
    """Environment the plan needs on the GPUs (never overrides what the user set)."""
    env: dict[str, str] = {}
    if spec.tensor_parallel > 1 or spec.context_parallel > 1:
        # Megatron's TP/sequence-parallel and CP communication overlap relies on kernels being queued in order.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32" if _is_blackwell(gpu) else "1"
    if spec.distributed_optimizer and (spec.overlap_grad_reduce or spec.overlap_param_gather):
        # Overlapped collectives on side streams: free buffers when the collective ends, not at the next sync.
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
    if spec.pipeline_parallel > 1 and nodes > 1:
        env["NCCL_P2P_NET_CHUNKSIZE"] = PP_CHUNK_SIZE
    return env


def _is_blackwell(gpu: Optional[str]) -> bool:
    """Through the planner's GPU table, so that an alias ("b200-180gb", "gb200-nvl72") counts as its GPU. An unknown
    or missing GPU is not Blackwell: validation reports the unknown name."""
    if not gpu:
        return False
    try:
        capability = get_gpu(gpu).compute_capability
    except InvalidInputError:
        return False
    return capability is not None and capability[0] == _BLACKWELL_MAJOR
