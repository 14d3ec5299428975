"""Kubernetes preset: a Kubeflow Trainer v2 `TrainJob` through NeMo-Run's `KubeflowExecutor`, shaped for the Trainer
release the cluster runs (`trainer_version`; see trainer.py beside it)."""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping, Optional, Sequence, cast

import nemo_run as run

from nemo_recipes.errors import InvalidConfigError, Problem, known
from nemo_recipes.executors._common import (
    DEFAULT_IMAGE,
    MAX_GPUS_PER_NODE,
    Count,
    gpu_env,
    mapping,
    mapping_list,
    memory_log_env,
    non_empty_str,
    positive_int,
    raise_if,
    single_line,
    str_list,
)
from nemo_recipes.executors.kubernetes_executor.kubeconfig import (
    check_kubeconfig,
    environment_problems,
    follow_kubeconfig_env,
    kubeconfig_errors_reported,
    load_kube_clients_on_first_use,
)
from nemo_recipes.executors.kubernetes_executor.trainer import (
    DEFAULT_TRAINER_VERSION,
    normalise_version,
    pod_settings,
    trainer_volume_mounts,
)
from nemo_recipes.executors.secrets import (
    REDACTED,
    SECRET_NAME,
    env_problems,
    kubernetes_secret_refs,
    secret_names,
    secret_reason,
    token_like,
    token_problem,
)

SECRET_HOW = (
    "create a Kubernetes Secret (kubectl create secret generic NAME --from-literal=KEY=...) and pass "
    "secrets={'ENV_NAME': 'NAME/KEY'}: the pod reads it through secretKeyRef."
)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # fullmatch: "$" would let a final newline through
_LIST_EXAMPLES = {
    "volumes": "{'name': 'data', 'nfs': {...}}",
    "volume_mounts": "{'name': 'data', 'mountPath': '/data'}",
    "tolerations": "{'key': 'nvidia.com/gpu', 'operator': 'Exists'}",
}
_EXAMPLES = {
    "node_selector": "{'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3'}",
    "affinity": "{'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {...}}}",
}


def kubernetes(
    *,
    image: str = DEFAULT_IMAGE,
    namespace: str = "default",
    nodes: int = 1,
    gpus_per_node: int = 8,
    processes_per_node: Optional[int] = None,
    gpu: Optional[str] = None,
    runtime: str = "torch-distributed",
    pvcs: Optional[Mapping[str, str]] = None,
    volumes: Sequence[Mapping[str, Any]] = (),
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    tolerations: Sequence[Mapping[str, Any]] = (),
    node_selector: Optional[Mapping[str, str]] = None,
    env: Optional[Mapping[str, str]] = None,
    secrets: Optional[Mapping[str, str]] = None,
    cpu: Optional[str] = None,
    memory: Optional[str] = None,
    image_pull_secrets: Sequence[str] = (),
    shm_size: Optional[str] = "64Gi",
    shared_home_pvc: Optional[str] = None,
    affinity: Optional[Mapping[str, Any]] = None,
    trainer_version: str = DEFAULT_TRAINER_VERSION,
):
    """NeMo-Run's `KubeflowExecutor` (returns `run.KubeflowExecutor`) for a `TrainJob` of `nodes` pods.

    Args:
        image: container image with NeMo and nemo-recipes (docker/Dockerfile).
        namespace: namespace of the TrainJob.
        nodes, gpus_per_node: pods and `nvidia.com/gpu` per pod; processes_per_node defaults to gpus_per_node.
        gpu: GPU type to plan memory against; None: structural checks only.
        runtime: the ClusterTrainingRuntime (`torch-distributed` starts torchrun).
        pvcs: {claim name: mount path}, e.g. {"datasets": "/data"}.
        volumes, volume_mounts: raw pod volumes and mounts of the trainer container, for anything else.
        tolerations: pod tolerations, e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}].
        node_selector: pod node selector, e.g. {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}.
        affinity: pod affinity, as in a pod spec ({"nodeAffinity": {...}}).
        env: plain environment values (written into the manifest: no secrets).
        secrets: {ENV_NAME: "secret-name" or "secret-name/key"}, read by the pod through `secretKeyRef`.
        cpu, memory: requests per pod.
        image_pull_secrets: names of Secrets holding registry credentials.
        shm_size: size of a memory-backed /dev/shm (PyTorch data loaders need more than the 64 MiB default).
        shared_home_pvc: "claim" or "claim/sub/path": the PersistentVolumeClaim that holds this machine's
            NEMORUN_HOME (`nemo_run.config.get_nemorun_home()`), mounted in the pods at that same path (the claim's
            root, or its sub/path). NeMo-Run's pod command reads the task's config from
            `<NEMORUN_HOME>/experiments/...` as written on the submitting machine; without a shared home the pod
            cannot read it. Submit from a machine that has the claim mounted at NEMORUN_HOME (a dev pod, or a
            workstation with the volume mounted there).
        trainer_version: the Kubeflow Trainer release of the cluster, "v2.1", "v2.2" or "v2.3" (default; "2.3" and
            "v2.3.0" are read as "v2.3"). It decides where the TrainJob carries volumes, mounts, tolerations, node
            selector, affinity and image pull secrets: `spec.podTemplateOverrides` for v2.1, one
            `spec.runtimePatches` entry for v2.2+ (manager `nemo-recipes/preset`, replicated job `node`). A TrainJob
            of the wrong shape is accepted and silently loses them. `kubectl get crd trainjobs.trainer.kubeflow.org`
            tells (examples/README.md).

    Without `shared_home_pvc` (or a mount of your own above NEMORUN_HOME) the preset still builds and dry-runs, and
    the recipe plugin warns that a submitted `run.Partial` would not find its config: NeMo-Run 0.11.1 gives a plugin
    no way to tell a dry run from a real submission, so it cannot refuse only the latter.

    A missing `kubernetes` package or kubeconfig is reported with what to install or set, and a kubeconfig that
    cannot be read (beyond the bounds of yaml_files, no current context, a missing cluster) with what is wrong. The
    kubeconfig is only read here: its credentials (an `exec:` plugin such as `aws eks get-token`) are used, and the
    API server contacted, when a job is submitted, never when the executor is built or a job dry-run.
    """
    env, secrets, pvcs, (volumes, volume_mounts, tolerations), problems = _mapping_arguments(
        env, secrets, pvcs, {"volumes": volumes, "volume_mounts": volume_mounts, "tolerations": tolerations}
    )
    recorded, found = gpu_env(gpu)
    problems += found
    processes_per_node, found = _pod_shape_problems(
        image, namespace, runtime, cpu, memory, shm_size, nodes, gpus_per_node, processes_per_node
    )
    problems += found
    version, version_problems = normalise_version(trainer_version)
    problems += version_problems
    problems += env_problems(env, secrets, SECRET_HOW)
    problems += pull_secret_problems(image_pull_secrets)
    for field, value in (("node_selector", node_selector), ("affinity", affinity)):
        if value is not None and not isinstance(value, Mapping):
            problems.append(
                Problem(
                    field,
                    value,
                    "must be a mapping, as in a pod spec.",
                    f"give {field} as a dict, e.g. {_EXAMPLES[field]}.",
                )
            )
    secret_env, secret_problems = kubernetes_secret_refs(secrets)
    problems += secret_problems
    problems += _pvc_problems(pvcs)
    home_volume, home_mount, home_problems = _shared_home_beside(shared_home_pvc, volumes, volume_mounts, pvcs)
    problems += home_problems
    raise_if(problems, "kubernetes executor")
    version = known(version, "normalise_version gives a version or a problem, raised above")
    problems = environment_problems()
    if problems:
        raise InvalidConfigError(problems, context="kubernetes executor")

    import nemo_run as run

    follow_kubeconfig_env()
    check_kubeconfig()
    load_kube_clients_on_first_use()
    all_volumes, mounts = _pod_volumes(volumes, volume_mounts, home_volume, home_mount, pvcs, shm_size)
    settings = pod_settings(
        version,
        volumes=all_volumes,
        volume_mounts=mounts,
        tolerations=[dict(t) for t in tolerations],
        node_selector=dict(node_selector or {}),
        affinity=dict(affinity or {}),
        image_pull_secrets=list(image_pull_secrets),
    )
    with kubeconfig_errors_reported():
        return run.KubeflowExecutor(
            image=image,
            namespace=namespace,
            runtime_ref=runtime,
            num_nodes=nodes,
            gpus_per_node=gpus_per_node or None,
            nprocs_per_node=processes_per_node,
            cpu_requests=cpu,
            memory_requests=memory,
            env_vars={**memory_log_env(bool(gpus_per_node)), **env, **recorded},
            env_list=secret_env,
            **settings,
        )


def _mapping_arguments(
    env: Any, secrets: Any, pvcs: Any, lists: dict[str, Any]
) -> tuple[dict, dict, dict, tuple[Sequence[Mapping], ...], list[Problem]]:
    """env, secrets, pvcs as dicts and the raw pod lists, each one reported when it is not a mapping (a list of
    them) and then read as empty, so that the checks after it can rely on its shape."""
    env, problems = mapping("env", env, "{'NCCL_DEBUG': 'WARN'}")
    secrets, found = mapping("secrets", secrets, "{'WANDB_API_KEY': 'wandb/key'}")
    problems += found
    pvcs, found = mapping("pvcs", pvcs, "{'datasets': '/data'}")
    problems += found
    for field, example in _LIST_EXAMPLES.items():
        found = mapping_list(field, lists[field], example)
        problems += found
        if found:
            lists[field] = ()
    return env, secrets, pvcs, (lists["volumes"], lists["volume_mounts"], lists["tolerations"]), problems


def _pod_shape_problems(
    image: Any,
    namespace: Any,
    runtime: Any,
    cpu: Any,
    memory: Any,
    shm_size: Any,
    nodes: Any,
    gpus_per_node: Any,
    processes_per_node: Any,
) -> tuple[Any, list[Problem]]:
    """The processes per pod (default: one per GPU) and the problems of the image, namespace and pod sizes."""
    problems = non_empty_str("image", image, "set image to the image built from docker/Dockerfile.")
    for field, value in (("runtime", runtime), ("cpu", cpu), ("memory", memory), ("shm_size", shm_size)):
        problems += single_line(field, value)
    if not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
        problems.append(
            Problem(
                "namespace", namespace, "is not a Kubernetes namespace name.", "use lower-case letters, digits and '-'."
            )
        )
    problems += positive_int("nodes", nodes)
    problems += positive_int("gpus_per_node", gpus_per_node, minimum=0, maximum=MAX_GPUS_PER_NODE)
    if processes_per_node is None:
        processes_per_node = gpus_per_node if isinstance(gpus_per_node, int) and gpus_per_node > 0 else 1
    problems += positive_int("processes_per_node", processes_per_node, maximum=MAX_GPUS_PER_NODE)
    return processes_per_node, problems


def _pvc_problems(pvcs: Mapping[Any, Any]) -> list[Problem]:
    problems = []
    for claim, path in pvcs.items():
        if not isinstance(claim, str) or not _DNS_LABEL.fullmatch(claim):
            problems.append(
                Problem(
                    f"pvcs.{claim}",
                    claim,
                    "is not a PersistentVolumeClaim name.",
                    "use the claim's name as `kubectl get pvc` shows it.",
                )
            )
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(Problem(f"pvcs.{claim}", path, "mount path must be absolute.", "e.g. /data."))
    return problems


def _shared_home_beside(
    claim: Optional[str], volumes: Sequence[Mapping], volume_mounts: Sequence[Mapping], pvcs: Mapping[str, str]
) -> tuple[Optional[dict], Optional[dict], list[Problem]]:
    """`shared_home(claim)`, and the problems of another volume taking its mount path or its volume name."""
    home_volume, home_mount, problems = shared_home(claim)
    if home_mount is not None:
        taken = [m.get("mountPath") for m in volume_mounts if isinstance(m, Mapping)] + list(pvcs.values())
        if home_mount["mountPath"] in taken:
            problems.append(
                Problem(
                    "shared_home_pvc",
                    claim,
                    f"another volume is mounted at NEMORUN_HOME ({home_mount['mountPath']}) too.",
                    "mount only the shared home there: remove that path from pvcs/volume_mounts.",
                )
            )
        names = [v.get("name") for v in volumes if isinstance(v, Mapping)] + list(pvcs)
        if SHARED_HOME_VOLUME in names:
            problems.append(
                Problem(
                    "volumes",
                    SHARED_HOME_VOLUME,
                    "is the name of the shared_home_pvc volume.",
                    "rename your volume (or claim in pvcs).",
                )
            )
    return home_volume, home_mount, problems


def _pod_volumes(
    volumes: Sequence[Mapping],
    volume_mounts: Sequence[Mapping],
    home_volume: Optional[dict],
    home_mount: Optional[dict],
    pvcs: Mapping[str, str],
    shm_size: Optional[str],
) -> tuple[list[dict], list[dict]]:
    """The pod's volumes and the trainer container's mounts: the user's, then the shared home, the claims and a
    memory-backed /dev/shm."""
    all_volumes = [dict(v) for v in volumes]
    mounts = [dict(m) for m in volume_mounts]
    if home_volume is not None and home_mount is not None:  # shared_home() gives both or neither
        all_volumes.append(home_volume)
        mounts.append(home_mount)
    for claim, path in pvcs.items():
        all_volumes.append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": claim, "mountPath": path})
    if shm_size:
        all_volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return all_volumes, mounts


def pull_secret_problems(names: Any) -> list[Problem]:
    """`image_pull_secrets` must be Secret names; a registry token given instead is refused, never echoed."""
    problems = str_list("image_pull_secrets", names)
    if problems:
        return problems
    for name in names:
        reason = token_like(name)
        if reason:
            problems.append(
                token_problem(
                    "image_pull_secrets",
                    reason,
                    "put the registry credentials in a Secret (kubectl create secret "
                    "docker-registry NAME ...) and list its NAME.",
                )
            )
        elif not re.fullmatch(SECRET_NAME, name):
            problems.append(
                Problem(
                    "image_pull_secrets", name, "is not a Secret name.", "use the name `kubectl get secrets` shows."
                )
            )
    return problems


SHARED_HOME_VOLUME = "nemorun-home"
SHARED_HOME_HOW = (
    "pass shared_home_pvc='CLAIM' (or 'CLAIM/sub/path') to the kubernetes preset or the profile, "
    "naming the PersistentVolumeClaim that holds NEMORUN_HOME on the machine you submit from "
    "(a dev pod, or a workstation with that volume mounted at NEMORUN_HOME)."
)


def shared_home(claim: Optional[str]) -> tuple[Optional[dict], Optional[dict], list[Problem]]:
    """(pod volume, trainer-container mount at NEMORUN_HOME, problems) for `shared_home_pvc`; (None, None, [])
    when it is unset."""
    if claim is None:
        return None, None, []
    from nemo_run.config import get_nemorun_home

    home = get_nemorun_home()
    name, slash, sub_path = claim.partition("/") if isinstance(claim, str) else ("", "", "")
    problems = []
    if not _DNS_LABEL.fullmatch(name):
        problems.append(
            Problem(
                "shared_home_pvc",
                claim,
                "is not a PersistentVolumeClaim name (or CLAIM/sub/path).",
                "use the claim's name as `kubectl get pvc` shows it.",
            )
        )
    parts = sub_path.split("/") if sub_path else []
    if slash and (not sub_path or sub_path.startswith("/") or any(p in ("", ".", "..") for p in parts)):
        problems.append(
            Problem(
                "shared_home_pvc",
                claim,
                "the sub/path after the claim name must be a plain relative path.",
                "e.g. shared_home_pvc='home/alice/.nemo_run'.",
            )
        )
    if not os.path.isabs(home):
        problems.append(
            Problem(
                "NEMORUN_HOME",
                home,
                "is not an absolute path, so the pods cannot mount it.",
                "export NEMORUN_HOME=/absolute/path (on the shared volume) before starting Python.",
            )
        )
    if problems:
        return None, None, problems
    volume = {"name": SHARED_HOME_VOLUME, "persistentVolumeClaim": {"claimName": name}}
    mount = {"name": SHARED_HOME_VOLUME, "mountPath": os.path.normpath(home)}
    if sub_path:
        mount["subPath"] = sub_path
    return volume, mount, []


def reads_configs_from(executor: Any) -> Optional[str]:
    """The trainer-container mount path under which the executor's job directory (where NeMo-Run writes the
    task's config) lies, or None when no volume of the pod covers it. Reads the mounts wherever the executor's
    Trainer version carries them."""
    job_dir = os.path.normpath(getattr(executor, "job_dir", "") or "")
    for mount in trainer_volume_mounts(executor):
        path = os.path.normpath(str(mount.get("mountPath", "")))
        if path != "." and (job_dir == path or job_dir.startswith(path.rstrip("/") + "/")):
            return path
    return None


# ---- the preset interface (registry.py) ----

EXECUTOR = "KubeflowExecutor"


def cli_factory(
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
    kwargs: dict[str, Any] = {} if image is None else {"image": image}
    # Text that is not a number reaches kubernetes() as it is, which reports it (field, value, fix).
    return kubernetes(
        namespace=namespace,
        nodes=cast(int, nodes),
        gpus_per_node=cast(int, gpus_per_node),
        gpu=gpu,
        runtime=runtime,
        shared_home_pvc=shared_home_pvc,
        trainer_version=trainer_version,
        **kwargs,
    ).to_config()


def secure(executor: Any, task_env: Optional[dict[str, str]], secrets: Iterable[str]) -> list[Problem]:
    """A secret in the env would be written into the TrainJob manifest: refused; pods read secrets through
    secretKeyRef (the preset's `secrets=`)."""
    marked = secret_names(list(secrets))
    return [
        Problem(
            f"env.{name}",
            REDACTED,
            f"is a secret ({reason}) and would be written into the TrainJob manifest.",
            f"create a Kubernetes Secret and pass secrets={{'{name}': 'secret-name/key'}} to the "
            "kubernetes preset (secretKeyRef).",
        )
        for source in (executor.env_vars, task_env or {})
        for name, value in source.items()
        for reason in [secret_reason(name, value, marked)]
        if reason
    ]


def render(request: Any, executor: Any) -> str:
    """The TrainJob manifest, as YAML."""
    import yaml

    body = executor.get_job_body(executor._trainjob_name(request.name), request.cmd)
    return yaml.safe_dump(body, sort_keys=False, width=10_000)
