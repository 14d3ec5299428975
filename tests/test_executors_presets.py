"""Presets, cluster profiles, env quoting, secrets, NeMo-Run CLI factories and the recipe plugin (no cluster)."""

import os


import subprocess
import sys

import pytest

from nemo_recipes.errors import InvalidRecipeError

pytestmark = pytest.mark.nemo

TRICKY = {
    "SPACES": "two  words\tand a tab",
    "QUOTES": "it's \"quoted\"",
    "DOLLAR": "$HOME ${PATH} $(id -u) $((1+1))",
    "BACKTICKS": "`echo injected`",
    "NEWLINES": "line one\nline two\n",
    "mixedCase": "keeps its case",
    "EMPTY": "",
}


def fields(error: InvalidRecipeError) -> list[str]:
    return [p.field for p in error.problems]


# ---- presets return NeMo-Run's own classes ----

def test_presets_return_stock_executor_classes(kubeconfig_file, monkeypatch):
    import nemo_run as run
    from nemo_recipes.executors import kubernetes, local, slurm

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    assert type(local(2)) is run.LocalExecutor
    assert type(slurm(account="a")) is run.SlurmExecutor
    assert type(kubernetes()) is run.KubeflowExecutor


def test_slurm_gives_one_rank_per_gpu_under_torchrun():
    from nemo_recipes.executors import DEFAULT_IMAGE, slurm

    ex = slurm(account="a", nodes=4, gpus_per_node=8)
    assert (ex.nnodes(), ex.nproc_per_node()) == (4, 8)
    assert ex.container_image == DEFAULT_IMAGE == "nemo-recipes:0.1.0"
    ex.get_launcher()  # NeMo-Run's torchrun setup: one task per node, 8 processes each
    assert (ex.ntasks_per_node, ex.torchrun_nproc_per_node) == (1, 8)
    cpu = slurm(account="a", gpus_per_node=0, processes_per_node=3, container_image=None)
    assert (cpu.gpus_per_node, cpu.nproc_per_node(), cpu.exclusive) == (None, 3, None)


def test_slurm_reports_every_problem_at_once():
    from nemo_recipes.executors import slurm

    with pytest.raises(InvalidRecipeError) as info:
        slurm(account="", nodes=0, gpus_per_node=8, processes_per_node=4, time="soon", retries=-1,
              tunnel="ssh", env={"1BAD": "x", "HF_TOKEN": "hf_secret_value"})
    assert fields(info.value) == ["account", "nodes", "processes_per_node", "time", "retries", "env.1BAD",
                                  "env.HF_TOKEN", "host", "user", "job_dir"]
    assert "hf_secret_value" not in str(info.value)
    assert "export it in the environment that runs sbatch" in str(info.value)


def test_local_preset_rejects_unknown_gpu_with_suggestion():
    from nemo_recipes.executors import local

    with pytest.raises(InvalidRecipeError, match="gpu='h100-8': unknown GPU \\(did you mean"):
        local(2, gpu="h100-8")


def test_kubernetes_without_kubeconfig_says_what_to_set(tmp_path, monkeypatch):
    from nemo_recipes.executors import kubernetes

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InvalidRecipeError, match="set KUBECONFIG to your cluster's kubeconfig"):
        kubernetes(nodes=2)


def test_kubernetes_without_the_package_says_what_to_install(monkeypatch):
    from nemo_recipes.executors.kubernetes import kubernetes

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # how Python marks a module as not importable
    with pytest.raises(InvalidRecipeError, match=r"pip install 'nemo-recipes\[kubernetes\]'"):
        kubernetes()


def test_kubernetes_secrets_are_secret_key_refs_never_values(tmp_path, monkeypatch):
    from nemo_recipes.executors import kubernetes

    (tmp_path / "config").write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "
                                     "'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
                                     "current-context: c\nusers: [{name: u, user: {token: t}}]\n")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    ex = kubernetes(secrets={"WANDB_API_KEY": "wandb/api-key", "HF_TOKEN": "hf"})
    body = ex.get_job_body("job", ["python", "train.py"])
    env = body["spec"]["trainer"]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}} in env
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}} in env
    with pytest.raises(InvalidRecipeError, match="create a Kubernetes Secret"):
        kubernetes(env={"WANDB_API_KEY": "value"})


# ---- quoting: the sbatch environment block, executed by a real bash ----

def test_slurm_env_block_reproduces_every_value_in_bash():
    from nemo_recipes.executors import slurm

    ex = slurm(account="a", env={**TRICKY, "PLAIN": "simple-value"})
    assert ex.env_vars == {"PLAIN": "simple-value"}  # NeMo-Run renders this one correctly itself
    script = ex.setup_lines + "\n" + "\n".join(
        f'printf "%s\\0" "${name}"' for name in TRICKY)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env={"PATH": os.environ["PATH"]})
    assert out.stdout.decode().split("\0")[:-1] == list(TRICKY.values())


def test_nemo_run_alone_would_mangle_these_values():
    """The bug we work around (NeMo-Run #234): its own env_vars rendering, run by bash, loses the values."""
    lines = [f"export {k.upper()}={v}" for k, v in TRICKY.items()]
    script = "\n".join(lines) + "\nprintf '%s' \"$SPACES\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, env={"PATH": os.environ["PATH"]})
    assert out.stdout.decode() != TRICKY["SPACES"]


def test_plugin_moves_later_env_additions_and_secrets_out_of_the_script(monkeypatch):
    import nemo_run as run
    from nemo_recipes.executors import RecipePlugin, slurm

    monkeypatch.setenv("WANDB_API_KEY", "k-123")
    ex = slurm(account="a", gpus_per_node=0, container_image=None)
    ex.env_vars.update({"WANDB_API_KEY": "k-123", "LATER": "a b $c"})  # as NeMo's WandbPlugin and users do
    task = run.Script(inline="true", env={"TASK_VAR": "x y"})
    RecipePlugin().setup(task, ex)
    assert "WANDB_API_KEY" not in ex.env_vars and "LATER" not in ex.env_vars and task.env == {}
    assert ex.additional_parameters["export"] == "ALL,WANDB_API_KEY"
    assert "export LATER='a b $c'" in ex.setup_lines and "export TASK_VAR='x y'" in ex.setup_lines
    assert "k-123" not in ex.setup_lines
    RecipePlugin().setup(task, ex)  # idempotent
    assert ex.setup_lines.count("export LATER=") == 1


def test_plugin_refuses_a_secret_missing_from_the_submitting_environment(monkeypatch):
    import nemo_run as run
    from nemo_recipes.executors import RecipePlugin, slurm

    monkeypatch.delenv("MY_TOKEN", raising=False)
    ex = slurm(account="a", gpus_per_node=0, secrets=["MY_TOKEN"])
    with pytest.raises(InvalidRecipeError, match="export MY_TOKEN=... before submitting"):
        RecipePlugin().setup(run.Script(inline="true"), ex)


# ---- cluster profiles ----

PROFILES = """
big_slurm:
  preset: slurm
  gpu: h100
  account: acct
  partition: batch
  nodes: 4
laptop:
  preset: local
  devices: 2
"""


def test_profiles_from_the_config_dir_and_the_override(tmp_path, monkeypatch):
    from nemo_recipes.executors import executor_for, load_profiles, profiles_path

    monkeypatch.delenv("NEMO_RECIPES_CLUSTERS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "nemo-recipes").mkdir()
    (tmp_path / "nemo-recipes" / "clusters.yaml").write_text(PROFILES)
    assert profiles_path() == tmp_path / "nemo-recipes" / "clusters.yaml"
    assert sorted(load_profiles()) == ["big_slurm", "laptop"]
    ex, gpu = executor_for("big_slurm")
    assert (type(ex).__name__, ex.nodes, ex.partition, gpu, ex.env_vars["NEMO_RECIPES_GPU"]) == (
        "SlurmExecutor", 4, "batch", "h100-80gb", "h100-80gb")
    assert executor_for("big_slurm", nodes=8)[0].nodes == 8
    other = tmp_path / "other.yaml"
    other.write_text("only:\n  preset: local\n")
    monkeypatch.setenv("NEMO_RECIPES_CLUSTERS", str(other))
    assert list(load_profiles()) == ["only"]


def test_profile_errors_name_profile_field_and_fix(tmp_path):
    from nemo_recipes.executors import get_profile, load_profiles

    path = tmp_path / "clusters.yaml"
    path.write_text("a:\n  preset: slurmm\nb:\n  preset: slurm\n  acount: x\n  gpu: h1000\nc:\n  preset: local\n"
                    "  devices: 2\n")
    with pytest.raises(InvalidRecipeError) as info:
        load_profiles(path)
    text = str(info.value)
    assert str(path) in text
    assert "a.preset='slurmm': unknown or missing preset (did you mean 'slurm'?)" in text
    assert "b.acount='x': is not an argument of the slurm preset (did you mean 'account'?)" in text
    assert "b.account=None: is required by the slurm preset" in text
    assert "b.gpu='h1000'" in text
    path.write_text("laptop:\n  preset: local\n")
    with pytest.raises(InvalidRecipeError, match="did you mean 'laptop'"):
        get_profile("lapto", path)


# ---- NeMo-Run CLI factories ----

def test_cli_factories_resolve_presets_profiles_and_the_plugin(tmp_path, monkeypatch):
    import nemo_run as run
    from nemo_run.cli.api import RunContext

    (tmp_path / "clusters.yaml").write_text(PROFILES)
    monkeypatch.setenv("NEMO_RECIPES_CLUSTERS", str(tmp_path / "clusters.yaml"))
    from nemo_recipes.executors import cli

    cli.register()
    ctx = RunContext(name="t")
    ctx.parse_args(["executor=big_slurm", "executor.nodes=8", "plugins=recipe_plugin"])
    assert type(ctx.executor) is run.SlurmExecutor and ctx.executor.nodes == 8
    assert ctx.executor.env_vars["NEMO_RECIPES_GPU"] == "h100-80gb"
    assert type(ctx.plugins[0]).__name__ == "RecipePlugin" and ctx.plugins[0].gpu is None
    ctx = RunContext(name="t")
    ctx.parse_args(["executor=local", "executor.ntasks_per_node=4"])
    assert type(ctx.executor) is run.LocalExecutor and ctx.executor.nproc_per_node() == 4
    monkeypatch.setenv("SBATCH_ACCOUNT", "from-env")
    ctx = RunContext(name="t")
    ctx.parse_args(["executor=slurm", "executor.nodes=2"])
    assert (ctx.executor.account, ctx.executor.nodes) == ("from-env", 2)


def test_cli_kubernetes_factory_passes_the_shared_home_claim(kubeconfig_file, monkeypatch):
    import fiddle as fdl
    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors import cli

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    executor = fdl.build(cli.kubernetes(nodes=2, shared_home_pvc="nemo-run-home"))
    claims = [v["persistentVolumeClaim"]["claimName"] for v in executor.volumes if "persistentVolumeClaim" in v]
    assert "nemo-run-home" in claims
    assert get_nemorun_home() in [m["mountPath"] for m in executor.volume_mounts]


# ---- the plugin with real recipes ----

@pytest.fixture(scope="module")
def recipes():
    import nemo_recipes

    return nemo_recipes


def test_plugin_sets_trainer_from_executor_and_plan_env(recipes):
    from nemo_recipes.executors import RecipePlugin, slurm

    recipe = recipes.gpt_70b()
    ex = slurm(account="a", nodes=8, gpu="h100")
    RecipePlugin().setup(recipe, ex)
    assert (recipe.trainer.num_nodes, recipe.trainer.devices) == (8, 8)
    assert ex.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert ex.env_vars["NCCL_P2P_NET_CHUNKSIZE"] == "2097152"
    b200 = slurm(account="a", nodes=8, gpu="b200")
    RecipePlugin().setup(recipes.gpt_70b(), b200)
    assert b200.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    one_gpu = slurm(account="a", nodes=1, gpus_per_node=1)
    RecipePlugin().setup(recipes.gpt_1_3b(num_gpus_per_node=1, global_batch_size=8), one_gpu)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in one_gpu.env_vars  # TP 1


def test_plugin_refuses_an_invalid_plan_and_nothing_is_submitted(recipes, tmp_path):
    import nemo_run as run
    from nemo_recipes.executors import RecipePlugin, slurm

    ex = slurm(account="a", nodes=1, gpu="h100", job_dir=str(tmp_path))  # gpt_70b needs TP 8 x PP 4 = 32 GPUs
    with run.Experiment("refused", log_level="ERROR") as exp:
        with pytest.raises(InvalidRecipeError) as info:
            exp.add(recipes.gpt_70b(), executor=ex, plugins=[RecipePlugin()])
        assert exp.jobs == []
    assert "not submitted" in str(info.value)
    assert any(p.severity == "error" for p in info.value.problems)
    assert not list(tmp_path.rglob("*_sbatch.sh"))


def test_plugin_checks_memory_only_with_a_gpu_type(recipes):
    from nemo_recipes.executors import RecipePlugin, local

    # gpt_13b (TP 2) on 2 x 40 GB: structurally fine, but it does not fit in memory.
    RecipePlugin().setup(recipes.gpt_13b(), local(2))
    with pytest.raises(InvalidRecipeError, match="a100-40gb"):
        RecipePlugin().setup(recipes.gpt_13b(), local(2, gpu="a100-40gb"))


# ---- Kubernetes: the pods read the config NeMo-Run writes under NEMORUN_HOME on this machine ----

@pytest.fixture
def kube(kubeconfig_file, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    # NeMo-Run runs shell commands through invoke, which reads stdin; pytest's captured stdin refuses reads.
    with open(os.devnull) as devnull:
        monkeypatch.setattr(sys, "stdin", devnull)
        yield


def test_kubernetes_shared_home_pvc_mounts_the_claim_at_nemorun_home(kube):
    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors import kubernetes

    ex = kubernetes(shared_home_pvc="home")
    assert {"name": "nemorun-home", "persistentVolumeClaim": {"claimName": "home"}} in ex.volumes
    assert {"name": "nemorun-home", "mountPath": get_nemorun_home()} in ex.volume_mounts
    sub = kubernetes(shared_home_pvc="home/alice/.nemo_run")
    assert {"name": "nemorun-home", "mountPath": get_nemorun_home(), "subPath": "alice/.nemo_run"} in sub.volume_mounts
    assert not [v for v in kubernetes().volumes if v["name"] == "nemorun-home"]


def test_kubernetes_shared_home_pvc_errors_name_the_field_and_fix(kube, monkeypatch):
    import nemo_run.config
    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors import kubernetes

    for bad in ("Home_Claim", "home/../etc", "home//x", "home/"):
        with pytest.raises(InvalidRecipeError) as info:
            kubernetes(shared_home_pvc=bad)
        assert fields(info.value) == ["shared_home_pvc"], bad
    with pytest.raises(InvalidRecipeError, match="another volume is mounted at NEMORUN_HOME") as info:
        kubernetes(shared_home_pvc="home", pvcs={"other": get_nemorun_home()})
    assert fields(info.value) == ["shared_home_pvc"]
    with pytest.raises(InvalidRecipeError) as info:
        kubernetes(shared_home_pvc="home", pvcs={"nemorun-home": "/data"})
    assert fields(info.value) == ["volumes"]
    monkeypatch.setattr(nemo_run.config, "_NEMORUN_HOME", "relative/home")
    with pytest.raises(InvalidRecipeError, match="export NEMORUN_HOME=/absolute/path") as info:
        kubernetes(shared_home_pvc="home")
    assert fields(info.value) == ["NEMORUN_HOME"]


def test_plugin_warns_on_a_dry_run_without_a_shared_home_and_still_renders(kube, recipes):
    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors import RecipePlugin, kubernetes
    from nemo_recipes.executors.plugin import ConfigNotSharedWarning
    from nemo_recipes.executors.render import artifact

    with pytest.warns(ConfigNotSharedWarning) as record:
        text = artifact(recipes.gpt_7b(), kubernetes(gpu="h100"), name="gpt_7b", plugins=[RecipePlugin()])
    assert "nemo_run.core.runners.fdl_runner" in text  # the manifest is still produced
    (warning,) = [w for w in record if w.category is ConfigNotSharedWarning]
    message = str(warning.message)
    assert message.startswith("warning: shared_home_pvc=None:")
    assert f"{get_nemorun_home()}/experiments/" in message and "Fix: pass shared_home_pvc=" in message


def test_plugin_is_quiet_when_a_pod_volume_covers_the_config(kube, recipes):
    import warnings

    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors import RecipePlugin, kubernetes
    from nemo_recipes.executors.plugin import ConfigNotSharedWarning
    from nemo_recipes.executors.render import artifact

    above = os.path.dirname(get_nemorun_home())  # a workspace volume mounted above NEMORUN_HOME covers it too
    for ex in (kubernetes(gpu="h100", shared_home_pvc="home"), kubernetes(gpu="h100", pvcs={"workspace": above})):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConfigNotSharedWarning)
            artifact(recipes.gpt_7b(), ex, name="gpt_7b", plugins=[RecipePlugin()])


def test_plugin_warns_when_the_experiment_lies_outside_the_shared_home(kube, recipes, tmp_path):
    import nemo_run as run

    from nemo_recipes.executors import RecipePlugin, kubernetes
    from nemo_recipes.executors.plugin import ConfigNotSharedWarning

    ex = kubernetes(gpu="h100", shared_home_pvc="home")
    with run.Experiment("outside", base_dir=str(tmp_path), log_level="ERROR") as exp:
        with pytest.warns(ConfigNotSharedWarning, match="run the experiment under NEMORUN_HOME"):
            exp.add(recipes.gpt_7b(), executor=ex, plugins=[RecipePlugin()])
        assert str(tmp_path) in exp.jobs[0].executor.job_dir


def test_profile_passes_shared_home_pvc_to_the_kubernetes_preset(kube, tmp_path):
    from nemo_run.config import get_nemorun_home

    from nemo_recipes.executors import executor_for

    path = tmp_path / "clusters.yaml"
    path.write_text("gke:\n  preset: kubernetes\n  gpu: h100\n  shared_home_pvc: team-home/alice\n")
    ex, gpu = executor_for("gke", path)
    assert gpu == "h100-80gb"
    assert {"name": "nemorun-home", "mountPath": get_nemorun_home(), "subPath": "alice"} in ex.volume_mounts
