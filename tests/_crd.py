"""What a Kubernetes API server serving a Kubeflow Trainer release does with a TrainJob, emulated offline from the
vendored CRDs (tests/data/kubeflow-trainer/, see SOURCE.txt there):

* `pruned`: the fields it drops on create. A CRD's structural schema declares every field; the server keeps
  `apiVersion`, `kind` and `metadata` (as ObjectMeta) and, below them, only declared properties, entries of maps
  (`additionalProperties`) and anything under `x-kubernetes-preserve-unknown-fields: true`. No error is returned.
* `schema_errors`: the OpenAPI v3 validation it runs (types, required fields, lengths, enums), through jsonschema,
  plus what JSON Schema cannot say: unique keys in `x-kubernetes-list-type: map` lists and unique `set` items.
* `manager_errors`: the Trainer webhook's check of `spec.runtimePatches[].manager` (apimachinery's
  `IsDomainPrefixedPath`, called by the jobset plugin's Validate in v2.2.1 and v2.3.0).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).resolve().parent / "data" / "kubeflow-trainer"
#: trainer_version of the preset -> folder of the release whose CRD and runtime we vendored.
CRD_DIRS = {"v2.1": "v2.1.0", "v2.2": "v2.2.1", "v2.3": "v2.3.0"}

#: ObjectMeta's fields (k8s.io/apimachinery metav1.ObjectMeta): the server keeps these under the root `metadata`,
#: whatever the CRD's schema says of it.
OBJECT_META = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


@lru_cache(maxsize=None)
def crd(version: str) -> dict:
    return yaml.safe_load((DATA / CRD_DIRS[version] / "trainer.kubeflow.org_trainjobs.yaml").read_text())


def schema(version: str) -> dict:
    """The openAPIV3Schema of TrainJob trainer.kubeflow.org/v1alpha1 in release `version`."""
    (served,) = [v for v in crd(version)["spec"]["versions"] if v["name"] == "v1alpha1"]
    return served["schema"]["openAPIV3Schema"]


def runtime(version: str) -> dict:
    """The torch-distributed ClusterTrainingRuntime of release `version`."""
    return yaml.safe_load((DATA / CRD_DIRS[version] / "torch_distributed_runtime.yaml").read_text())


def pruned(manifest: dict, openapi: dict) -> list[str]:
    """Paths of `manifest` that a server serving `openapi` drops, e.g. ['.spec.podTemplateOverrides']."""
    found = []
    for key, value in manifest.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            found += [f".metadata.{k}" for k in value if k not in OBJECT_META]
        elif key in openapi.get("properties", {}):
            found += _pruned(value, openapi["properties"][key], f".{key}")
        else:
            found.append(f".{key}")
    return found


def _pruned(obj: Any, node: dict, path: str) -> list[str]:
    if isinstance(obj, list):
        return [p for i, item in enumerate(obj) for p in _pruned(item, node.get("items", {}), f"{path}[{i}]")]
    if not isinstance(obj, dict):
        return []
    properties = node.get("properties", {})
    extra = node.get("additionalProperties")
    keep_unknown = node.get("x-kubernetes-preserve-unknown-fields") or extra is True
    found = []
    for key, value in obj.items():
        if key in properties:
            found += _pruned(value, properties[key], f"{path}.{key}")
        elif isinstance(extra, dict):
            found += _pruned(value, extra, f"{path}.{key}")
        elif not keep_unknown:
            found.append(f"{path}.{key}")
    return found


def schema_errors(manifest: dict, openapi: dict) -> list[str]:
    """Validation errors the server returns for `manifest` (empty: it is accepted)."""
    import jsonschema

    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(openapi).iter_errors(manifest)
    ]
    return errors + _list_errors(manifest, openapi, "")


def _list_errors(obj: Any, node: dict, path: str) -> list[str]:
    errors = []
    if isinstance(obj, list):
        kind = node.get("x-kubernetes-list-type")
        if kind == "map":
            keys = node.get("x-kubernetes-list-map-keys", [])
            seen = [tuple(item.get(k) for k in keys) for item in obj if isinstance(item, dict)]
            errors += [f"{path}: duplicate {keys}={key}" for key in set(seen) if seen.count(key) > 1]
        elif kind == "set":
            errors += [f"{path}: duplicate item {item!r}" for i, item in enumerate(obj) if item in obj[:i]]
        for i, item in enumerate(obj):
            errors += _list_errors(item, node.get("items", {}), f"{path}[{i}]")
    elif isinstance(obj, dict):
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, value in obj.items():
            child = properties.get(key, extra if isinstance(extra, dict) else None)
            if child is not None:
                errors += _list_errors(value, child, f"{path}.{key}")
    return errors


_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def manager_errors(manifest: dict) -> list[str]:
    """The Trainer webhook's refusals of runtime patch managers that are not "domain/path" (IsDomainPrefixedPath)."""
    errors = []
    for patch in manifest.get("spec", {}).get("runtimePatches", []):
        host, slash, path = patch.get("manager", "").partition("/")
        if not (slash and host and path):
            errors.append(f'manager {patch.get("manager")!r}: must be a domain-prefixed path (such as "acme.io/foo")')
        elif len(host) > 253 or not _DNS1123_SUBDOMAIN.match(host) or not _HTTP_PATH.match(path):
            errors.append(f"manager {patch['manager']!r}: invalid host or path")
    return errors


def patched_jobs_and_containers(manifest: dict) -> list[tuple[str, list[str]]]:
    """(replicated job, containers) each of our runtime patches or pod template overrides names."""
    spec = manifest["spec"]
    named = []
    for patch in spec.get("runtimePatches", []):
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod = job.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
            named.append((job["name"], [c["name"] for c in pod.get("containers", [])]))
    for override in spec.get("podTemplateOverrides", []):
        containers = [c["name"] for c in override.get("spec", {}).get("containers", [])]
        named += [(job["name"], containers) for job in override["targetJobs"]]
    return named


def runtime_jobs(runtime_manifest: dict) -> dict[str, list[str]]:
    """{replicated job: its containers} of a ClusterTrainingRuntime."""
    return {
        job["name"]: [c["name"] for c in job["template"]["spec"]["template"]["spec"]["containers"]]
        for job in runtime_manifest["spec"]["template"]["spec"]["replicatedJobs"]
    }
