"""The kubeconfig, as the Kubernetes preset reads it: whether this machine has one (and the `kubernetes` package),
the file checked through the bounded YAML reader and the client's loader without loading credentials, its loader's
errors reported without a credential, and NeMo-Run's KubeflowExecutor made to load it on first use only (a
monkeypatch: its `__post_init__` would run the user's `exec:` plugin on every copy)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import traceback
from typing import Any, Iterator

from nemo_recipes import yaml_files
from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.executors.secrets import token_like


@contextlib.contextmanager
def kubeconfig_errors_reported() -> Iterator[None]:
    """NeMo-Run's executor loads the kubeconfig when it is built; a file that exists but cannot be read (bad YAML,
    no current context, a missing cluster) becomes one problem naming the file. The loader's own words are kept only
    where they cannot hold a credential: kubeconfigs carry tokens and keys."""
    try:
        yield
    except Exception as error:
        if not _raised_by_the_kubeconfig_loader(error):
            raise
        paths = _kubeconfig_paths() or ["~/.kube/config"]
        detail = _kubeconfig_error_detail(error)
        raise InvalidConfigError(
            [
                Problem(
                    "kubeconfig",
                    ", ".join(paths),
                    f"cannot be loaded ({type(error).__name__}{detail}).",
                    KUBECONFIG_FIX,
                )
            ],
            context="kubernetes executor",
        ) from None


def _raised_by_the_kubeconfig_loader(error: Exception) -> bool:
    """Whether the kubernetes client's config loader raised `error`: its own ConfigException, and any error (not
    UTF-8, `clusters: 5`) from reading the file, which it lets through as it is."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(f"{os.sep}kubernetes{os.sep}config{os.sep}" in frame.filename for frame in frames)


def _kubeconfig_error_detail(error: Exception) -> str:
    mark = getattr(error, "problem_mark", None)  # YAML errors: where, never what (the line may hold a token)
    if mark is not None:
        return f" at line {mark.line + 1}, column {mark.column + 1}"
    text = str(error).splitlines()[0] if str(error) else ""
    return f": {text}" if text and token_like(text) is None and len(text) < 200 else ""


def environment_problems() -> list[Problem]:
    """What this machine lacks to build a KubeflowExecutor: the `kubernetes` package and a kubeconfig."""
    if importlib.util.find_spec("kubernetes") is None:
        return [
            Problem(
                "kubernetes",
                "not installed",
                "the Kubernetes executor needs the `kubernetes` Python package.",
                "pip install 'nemo-recipes[kubernetes]' (or: pip install kubernetes).",
            )
        ]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return []  # in-cluster configuration
    paths = _kubeconfig_paths()
    where = "KUBECONFIG" if paths else "~/.kube/config"
    paths = paths or [os.path.expanduser("~/.kube/config")]
    if not any(os.path.isfile(p) for p in paths):
        return [
            Problem(
                "kubeconfig",
                ", ".join(paths),
                f"no kubeconfig file ({where}).",
                "set KUBECONFIG to your cluster's kubeconfig, or write it to ~/.kube/config "
                "(e.g. `gcloud container clusters get-credentials ...`, `aws eks update-kubeconfig ...`).",
            )
        ]
    return []


def check_kubeconfig() -> None:
    """Read the kubeconfig as the kubernetes client will, up to its active context, cluster and user, without
    loading the credentials (which would run an `exec:` plugin) or contacting the cluster. Each file goes through
    the bounded YAML reader first."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not _kubeconfig_paths():
        return  # in-cluster configuration: nothing to read
    from kubernetes.config import kube_config

    for path in _kubeconfig_paths() or [os.path.expanduser("~/.kube/config")]:
        if os.path.exists(path):  # a pipe there is refused by read_file, before the client would wait on it
            yaml_files.read_file(path, field="kubeconfig", fix=KUBECONFIG_FIX)
    with kubeconfig_errors_reported():
        kube_config._get_kube_config_loader(filename=kube_config.KUBE_CONFIG_DEFAULT_LOCATION)


def load_kube_clients_on_first_use() -> None:
    """NeMo-Run 0.11.1's KubeflowExecutor loads the kubeconfig in `__post_init__`, and every copy it makes of the
    executor (`clone()`, when a job is added to an experiment) loads it again: `load_kube_config` runs the user's
    `exec:` credential plugin, which may go to the network, so a dry run or building a manifest would run the
    user's programs. Its API clients are already reloaded on first use when older than its refresh interval
    (`_custom_objects_api`, `_core_v1_api`): marking them as never loaded makes that first use (a real submission,
    a status query) the first load. Idempotent; NeMo-Run's own checks (the kubernetes package) are kept."""
    from nemo_run.core.execution import kubeflow

    executor = kubeflow.KubeflowExecutor
    if getattr(executor.__post_init__, "_loads_on_first_use", False):
        return
    eager = executor.__post_init__

    def __post_init__(self: Any) -> None:
        if not kubeflow._KUBERNETES_AVAILABLE:
            eager(self)  # NeMo-Run's own ImportError with its install hint
        self._kube_clients_loaded_at = float("-inf")

    __post_init__._loads_on_first_use = True  # type: ignore[attr-defined]
    executor.__post_init__ = __post_init__


KUBECONFIG_FIX = (
    "fix or regenerate it (e.g. `gcloud container clusters get-credentials ...`, `aws eks update-kubeconfig ...`), "
    "or point KUBECONFIG at a working one; `kubectl config view` shows what is wrong."
)


def follow_kubeconfig_env() -> None:
    """The kubernetes client reads KUBECONFIG once, when imported; NeMo-Run's executor then loads that default.
    Point the default at the current KUBECONFIG so that the file we checked is the file it loads."""
    paths = _kubeconfig_paths()
    if paths:
        from kubernetes.config import kube_config

        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.pathsep.join(paths)


def _kubeconfig_paths() -> list[str]:
    """The files KUBECONFIG names, in order (the kubernetes client merges them); [] when it is unset."""
    return [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
