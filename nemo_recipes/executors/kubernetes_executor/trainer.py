"""Where a TrainJob carries pod-level settings, per Kubeflow Trainer release (standard library only).

Volumes, the trainer container's mounts, tolerations, node selector, affinity and image pull secrets are not fields
of `spec.trainer`; each Trainer release puts them somewhere else, and an API server silently prunes a field its CRD
does not declare, so a TrainJob written for the wrong release is accepted and loses them:

* v2.1: `spec.podTemplateOverrides[]` (`targetJobs` + a pod spec). What NeMo-Run 0.11.1's `KubeflowExecutor` writes.
* v2.2: `spec.podTemplateOverrides` removed (Trainer PR #3309); `spec.runtimePatches[]`, a list keyed by `manager`,
  each patching the runtime's JobSet template down to the pod spec of a replicated job. The controller
  strategic-merges each patch into the replicated job it names and ignores a name the runtime lacks.
* v2.3: the same CRD fields for everything we set (it adds `terminationGracePeriodSeconds` to the pod patch); the
  controller strategic-merges the patch into the whole JobSet spec, so a patch naming a replicated job the runtime
  lacks adds a new (image-less) job. Kueue treats v2.2 and v2.3 as API-incompatible for that reason.

We keep returning the stock `KubeflowExecutor`: for v2.1 through its own fields, for v2.2+ through `spec_kwargs`,
which NeMo-Run merges into `spec` verbatim.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from nemo_recipes.errors import Problem

#: Trainer releases whose TrainJob API the Kubernetes preset writes, oldest first.
TRAINER_VERSIONS = ("v2.1", "v2.2", "v2.3")
DEFAULT_TRAINER_VERSION = TRAINER_VERSIONS[-1]
#: Releases that carry pod-level settings in `spec.runtimePatches`.
RUNTIME_PATCH_VERSIONS = ("v2.2", "v2.3")

#: The replicated job (and its container) of the torch-distributed runtime that runs torchrun; every Trainer
#: release's torch-distributed ClusterTrainingRuntime names both `node`.
TRAINER_JOB = "node"

#: Our entry of `spec.runtimePatches`. The Trainer webhook requires a domain-prefixed path ("host/path",
#: `IsDomainPrefixedPath`), so a bare "nemo-recipes" would be refused at admission; the manager is immutable.
PATCH_MANAGER = "nemo-recipes/preset"

FIND_VERSION_HOW = (
    "set trainer_version to the Kubeflow Trainer release of your cluster: see examples/README.md, "
    "'Which Kubeflow Trainer does my cluster run?' (kubectl get crd trainjobs.trainer.kubeflow.org)."
)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


def normalise_version(value: Any, field: str = "trainer_version") -> tuple[Optional[str], list[Problem]]:
    """("v2.3", []) for "v2.3", "2.3", "v2.3.0" or "2.3.1" (a patch release keeps its minor's API); (None, [the
    problem]) for anything else, with the allowed values."""
    allowed = ", ".join(repr(v) for v in TRAINER_VERSIONS)
    if not isinstance(value, str):
        # YAML reads `trainer_version: 2.10` as the number 2.1 (and 2.3 and 2.30 alike): the number cannot say
        # which release was written, so the fix names none of them as "the" answer.
        return None, [
            Problem(
                field,
                value,
                f"must be a string, one of {allowed}.",
                _number_version_fix(field, value)
                if isinstance(value, (int, float)) and not isinstance(value, bool)
                else f"set {field} to one of {allowed}.",
            )
        ]
    match = _VERSION.match(value.strip().lower())
    version = f"v{int(match.group(1))}.{int(match.group(2))}" if match else None
    if version in TRAINER_VERSIONS:
        return version, []
    return None, [
        Problem(
            field,
            value,
            f"is not a Kubeflow Trainer release this preset writes TrainJobs for "
            f"(allowed: {allowed}; '2.3' and 'v2.3.0' mean 'v2.3').",
            _unknown_version_fix(match),
        )
    ]


def _number_version_fix(field: str, value: float) -> str:
    alike = (
        f"'{value}' and '{value}0' alike as the number {value}" if isinstance(value, float) else f"{value} as a number"
    )
    return (
        f'quote the release your cluster runs, e.g. {field}: "{TRAINER_VERSIONS[-1]}" (kubectl get crd '
        f"trainjobs.trainer.kubeflow.org tells it): unquoted, YAML reads {alike}, which names no release."
    )


def _unknown_version_fix(match: Optional[re.Match]) -> str:
    newest = TRAINER_VERSIONS[-1]
    if match and (int(match.group(1)), int(match.group(2))) > tuple(int(p) for p in newest[1:].split(".")):
        return (
            f"this release of nemo-recipes knows Trainer up to {newest}: if your cluster's TrainJob CRD still "
            f"declares spec.runtimePatches, use trainer_version='{newest}' (and check the manifest with "
            "--dryrun); otherwise upgrade nemo-recipes."
        )
    return FIND_VERSION_HOW


def pod_settings(
    version: str,
    *,
    volumes: Sequence[dict],
    volume_mounts: Sequence[dict],
    tolerations: Sequence[dict],
    node_selector: Mapping[str, str],
    affinity: Mapping[str, Any],
    image_pull_secrets: Sequence[str],
) -> dict[str, Any]:
    """`KubeflowExecutor` keyword arguments that put the pod-level settings where `version`'s TrainJob keeps them."""
    if version not in RUNTIME_PATCH_VERSIONS:
        return dict(
            volumes=list(volumes),
            volume_mounts=list(volume_mounts),
            tolerations=list(tolerations),
            affinity=dict(affinity),
            image_pull_secrets=list(image_pull_secrets),
            pod_spec_overrides={"nodeSelector": dict(node_selector)} if node_selector else {},
        )
    pod = _pod_spec_patch(volumes, volume_mounts, tolerations, node_selector, affinity, image_pull_secrets)
    return {"spec_kwargs": {"runtimePatches": [runtime_patch(pod)]}} if pod else {}


def _pod_spec_patch(volumes, volume_mounts, tolerations, node_selector, affinity, image_pull_secrets) -> dict:
    """A pod spec patch in the key order NeMo-Run writes `podTemplateOverrides[].spec`, so that the manifests of
    the releases differ only in where this sits."""
    pod: dict[str, Any] = {}
    if volumes:
        pod["volumes"] = list(volumes)
    if image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    if tolerations:
        pod["tolerations"] = list(tolerations)
    if affinity:
        pod["affinity"] = dict(affinity)
    if volume_mounts:
        pod["containers"] = [{"name": TRAINER_JOB, "volumeMounts": list(volume_mounts)}]
    if node_selector:
        pod["nodeSelector"] = dict(node_selector)
    return pod


def runtime_patch(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """Our `spec.runtimePatches[]` entry: `pod_spec` patched into the pods of the `node` replicated job."""
    job = {"name": TRAINER_JOB, "template": {"spec": {"template": {"spec": pod_spec}}}}
    return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}


def patched_pod_spec(executor: Any) -> dict[str, Any]:
    """The pod spec patch of our runtime patch on `executor` ({} when it has none)."""
    for patch in (getattr(executor, "spec_kwargs", None) or {}).get("runtimePatches") or []:
        if isinstance(patch, Mapping) and patch.get("manager") == PATCH_MANAGER:
            jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            for job in jobs:
                if job.get("name") == TRAINER_JOB:
                    return job["template"]["spec"]["template"]["spec"]
    return {}


def trainer_volume_mounts(executor: Any) -> list[dict[str, Any]]:
    """Mounts of the trainer container, wherever the executor carries them (its own field for v2.1, our runtime
    patch for v2.2+)."""
    mounts = [dict(m) for m in getattr(executor, "volume_mounts", None) or []]
    for container in patched_pod_spec(executor).get("containers", []):
        if container.get("name") == TRAINER_JOB:
            mounts += [dict(m) for m in container.get("volumeMounts", [])]
    return mounts


def pod_volumes(executor: Any) -> list[dict[str, Any]]:
    """Pod volumes, wherever the executor carries them."""
    return [dict(v) for v in getattr(executor, "volumes", None) or []] + [
        dict(v) for v in patched_pod_spec(executor).get("volumes", [])
    ]


#: `KubeflowExecutor` fields that NeMo-Run writes into `spec.podTemplateOverrides`.
_OVERRIDE_FIELDS = (
    "volumes",
    "volume_mounts",
    "tolerations",
    "affinity",
    "image_pull_secrets",
    "pod_spec_overrides",
    "pod_labels",
    "pod_annotations",
)


def mixed_pod_settings(executor: Any) -> list[Problem]:
    """Problems for an executor that would write both `podTemplateOverrides` (its own pod fields, set after the
    preset built it: `executor.volumes.append(...)`, `run.executor.tolerations=...`) and `runtimePatches` (the
    preset's, for Trainer v2.2+): no Trainer release declares both, so the API server silently drops one of them."""
    spec_kwargs = getattr(executor, "spec_kwargs", None) or {}
    if "runtimePatches" not in spec_kwargs:
        return []
    return [
        Problem(
            f"executor.{name}",
            getattr(executor, name),
            "would be written to spec.podTemplateOverrides, which a Trainer v2.2+ API server (this executor "
            "writes spec.runtimePatches) drops without an error.",
            "pass it to the kubernetes preset (volumes, volume_mounts, pvcs, tolerations, node_selector, "
            "affinity, image_pull_secrets), which puts it where trainer_version says, or add it to the pod "
            f"spec of the '{PATCH_MANAGER}' entry of executor.spec_kwargs['runtimePatches']; if your cluster "
            "runs Trainer v2.1, build the preset with trainer_version='v2.1' instead.",
        )
        for name in _OVERRIDE_FIELDS
        if getattr(executor, name, None)
    ]
