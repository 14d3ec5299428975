"""Shared fixtures. Tests are in tiers: plain Python (catalog, planner, fast CLI), NeMo on CPU (`nemo` marker),
and a real Slurm cluster (`slurm` marker); see docs/development/tests.md."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# NeMo-Run reads NEMORUN_HOME once, when it is first imported: point it at a private folder before any test module
# imports it, so that tests never write into (or read experiments from) the user's ~/.nemo_run.
_NEMORUN_HOME = os.environ["NEMORUN_HOME"] = tempfile.mkdtemp(prefix="nemo-recipes-tests-nemorun-")
# `plan` reads the user's calibration (~/.config/nemo-recipes/calibration.json) when there is one: the tests plan with
# the shipped constants unless they load one themselves, so the default place is a file that does not exist.
os.environ["NEMO_RECIPES_CALIBRATION"] = os.path.join(_NEMORUN_HOME, "no-calibration.json")


# Canaries (issue 23): a secret value in the environment of every test and of every process a test starts. It must
# never appear in what the CLI prints (tests/_cli.py checks every run) nor in a file written under the session's
# temporary directories or NEMORUN_HOME (checked when the session ends). Not token-shaped on purpose: only the
# handling of secrets by name and by environment value can keep it out.
# One per run, the same in every pytest-xdist worker: each worker must collect the same test ids (some carry it).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))[:12]
SECRET_CANARY = f"canary-{_RUN}-secret-value-never-printed"
CANARY_NAMES = ("WANDB_API_KEY", "HF_TOKEN")
os.environ.update(dict.fromkeys(CANARY_NAMES, SECRET_CANARY))


def files_holding(roots, values=(SECRET_CANARY,)) -> list[str]:
    """The files under `roots` (directories; None is skipped) that hold any of `values`."""
    found = []
    for root in roots:
        for path in Path(root).rglob("*") if root and Path(root).is_dir() else ():
            try:
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 * 2**20:
                    data = path.read_bytes()
                    if any(value.encode() in data for value in values):
                        found.append(str(path))
            except OSError:
                continue
    return found


def pytest_sessionfinish(session, exitstatus):
    factory = getattr(session.config, "_tmp_path_factory", None)
    roots = [_NEMORUN_HOME, factory.getbasetemp() if factory is not None and factory._basetemp else None]
    leaked = files_holding(roots)
    if leaked:
        print(f"\nSECRET CANARY written to {len(leaked)} file(s): {leaked[:10]}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(_NEMORUN_HOME, ignore_errors=True)


REPO = Path(__file__).resolve().parent.parent


def ci() -> bool:
    """CI sets CI=true: there a missing Slurm cluster is a failure, elsewhere a skip."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def nemorun_home(tmp_path_factory):
    """A fresh NEMORUN_HOME for the module, also where NeMo-Run keeps its Slurm job index (shared by the Slurm
    test modules, single- and two-node)."""
    import importlib

    import nemo_run.config

    slurm_scheduler = importlib.import_module("nemo_run.run.torchx_backend.schedulers.slurm")

    home = tmp_path_factory.mktemp("nemorun-home")
    previous = (nemo_run.config.get_nemorun_home(), slurm_scheduler.SLURM_JOB_DIRS)
    nemo_run.config.set_nemorun_home(str(home))
    slurm_scheduler.SLURM_JOB_DIRS = str(home / ".slurm_jobs")
    yield home
    nemo_run.config.set_nemorun_home(previous[0])
    slurm_scheduler.SLURM_JOB_DIRS = previous[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """What the tests read, carried by the project with its source (tests/data/*/SOURCE.txt): the seed table and the
    Kubeflow Trainer CRDs. Nothing outside the checkout is read."""
    return REPO / "tests" / "data"


@pytest.fixture(scope="session")
def kubeconfig_file(tmp_path_factory) -> Path:
    """A syntactically complete kubeconfig for a cluster that does not exist: enough for NeMo-Run's
    KubeflowExecutor, which loads one when it is built (no API call is made by the tests)."""
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: test, cluster: {server: "https://127.0.0.1:6443"}}]\n'
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
        "current-context: test\n"
        "users: [{name: test, user: {token: placeholder}}]\n"
    )
    return path


class NetworkBlocked(RuntimeError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection or resolve a name fails loudly (building a recipe must not
    download anything). Unix sockets stay allowed: they are local IPC, not network."""
    attempts: list = []
    original_connect = socket.socket.connect

    def refuse(what):
        attempts.append(what)
        raise NetworkBlocked(f"network access attempted: {what!r}")

    def connect(self, address, *args, **kwargs):
        if self.family == socket.AF_UNIX:
            return original_connect(self, address, *args, **kwargs)
        refuse(address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(address))
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: refuse(host))
    yield attempts


# ---- the single-node Slurm cluster (.ci/start-slurm.sh): tests/test_slurm_jobs.py, tests/test_slurm_training.py ----


@pytest.fixture(scope="module")
def slurm_cluster():
    problem = None
    if shutil.which("sinfo") is None:
        problem = "`sinfo` not found: no Slurm here (start one with `sudo .ci/start-slurm.sh`)"
    else:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        if result.returncode != 0:
            problem = f"Slurm does not answer (`sinfo`: {result.stderr.strip()}): run `sudo .ci/start-slurm.sh`"
    if problem:
        if ci():
            pytest.fail(f"CI is set but {problem}")
        pytest.skip(problem)


@pytest.fixture
def cluster(slurm_cluster, nemorun_home, monkeypatch):
    # NeMo-Run runs sbatch/sacct through invoke, which reads stdin; pytest's captured stdin refuses reads.
    with open(os.devnull) as devnull:
        monkeypatch.setattr(sys, "stdin", devnull)
        yield nemorun_home
