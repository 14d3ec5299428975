"""Presets, cluster profiles, env quoting, secrets, NeMo-Run CLI factories and the recipe plugin (no cluster)."""

import json
import os
import subprocess
import sys

import pytest

from nemo_recipes.errors import InvalidRecipeError

pytestmark = pytest.mark.nemo

TRICKY = {
    "SPACES": "two  words\tand a tab",
    "QUOTES": 'it\'s "quoted"',
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
    for version in ("v2.1", "v2.2", "v2.3"):
        assert type(kubernetes(trainer_version=version)) is run.KubeflowExecutor


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
        slurm(
            account="",
            nodes=0,
            gpus_per_node=8,
            processes_per_node=4,
            time="soon",
            retries=-1,
            tunnel="ssh",
            env={"1BAD": "x", "HF_TOKEN": "hf_secret_value"},
        )
    assert fields(info.value) == [
        "account",
        "nodes",
        "processes_per_node",
        "time",
        "retries",
        "env.1BAD",
        "env.HF_TOKEN",
        "host",
        "user",
        "job_dir",
    ]
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


@pytest.mark.parametrize(
    "text, message", [("a: [unclosed\n", "is not valid YAML"), ("- a list\n", "must be a mapping of profile names")]
)
def test_configuration_problems_are_config_errors_not_recipe_errors(tmp_path, monkeypatch, text, message):
    # A kubeconfig or a cluster profile file is not a recipe: its errors say so by their class, and stay
    # InvalidRecipeErrors so that every handler (and the CLI's exit code 2) treats them as before.
    from nemo_recipes.errors import InvalidConfigError
    from nemo_recipes.executors import kubernetes
    from nemo_recipes.executors.profiles import load_profiles

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InvalidConfigError, match="no kubeconfig file") as kubeconfig:
        kubernetes(nodes=2)
    profiles = tmp_path / "clusters.yaml"
    profiles.write_text(text)
    with pytest.raises(InvalidConfigError, match=message) as profile:
        load_profiles(profiles)
    assert isinstance(kubeconfig.value, InvalidRecipeError) and isinstance(profile.value, InvalidRecipeError)


def test_kubernetes_without_the_package_says_what_to_install(monkeypatch):
    from nemo_recipes.executors.kubernetes_executor.preset import kubernetes

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # how Python marks a module as not importable
    with pytest.raises(InvalidRecipeError, match=r"pip install 'nemo-recipes\[kubernetes\]'"):
        kubernetes()


def test_kubernetes_secrets_are_secret_key_refs_never_values(tmp_path, monkeypatch):
    from nemo_recipes.executors import kubernetes

    (tmp_path / "config").write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "
        "'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\nusers: [{name: u, user: {token: t}}]\n"
    )
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
    # NeMo-Run renders these correctly itself
    assert ex.env_vars == {"NEMO_LOG_MEMORY_USAGE": "1", "PLAIN": "simple-value"}
    script = ex.setup_lines + "\n" + "\n".join(f'printf "%s\\0" "${name}"' for name in TRICKY)
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
        "SlurmExecutor",
        4,
        "batch",
        "h100-80gb",
        "h100-80gb",
    )
    assert executor_for("big_slurm", nodes=8)[0].nodes == 8
    other = tmp_path / "other.yaml"
    other.write_text("only:\n  preset: local\n")
    monkeypatch.setenv("NEMO_RECIPES_CLUSTERS", str(other))
    assert list(load_profiles()) == ["only"]


def test_profile_errors_name_profile_field_and_fix(tmp_path):
    from nemo_recipes.executors import get_profile, load_profiles

    path = tmp_path / "clusters.yaml"
    path.write_text(
        "a:\n  preset: slurmm\nb:\n  preset: slurm\n  acount: x\n  gpu: h1000\nc:\n  preset: local\n  devices: 2\n"
    )
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
    from nemo_recipes.executors import nemo_run_factories as cli

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

    from nemo_recipes.executors.kubernetes_executor.preset import cli_factory
    from nemo_recipes.executors.kubernetes_executor.trainer import pod_volumes, trainer_volume_mounts

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    for version in ("v2.1", "v2.3"):
        executor = fdl.build(cli_factory(nodes=2, shared_home_pvc="nemo-run-home", trainer_version=version))
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in pod_volumes(executor) if "persistentVolumeClaim" in v
        ]
        assert "nemo-run-home" in claims
        assert get_nemorun_home() in [m["mountPath"] for m in trainer_volume_mounts(executor)]
        assert ("runtimePatches" in executor.spec_kwargs) is (version == "v2.3")


def test_every_preset_logs_memory_for_a_job_on_gpus_and_none_on_cpus(kubeconfig_file, monkeypatch):
    """NEMO_LOG_MEMORY_USAGE=1 puts the peak memory `watch` reads in NeMo's progress line; on a machine without CUDA
    NeMo 2.7.3 fails with it (pinned memory), so a job that asks for no GPU does not get it. The user's value wins."""
    from nemo_recipes.executors import kubernetes, local, slurm

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    on = {"NEMO_LOG_MEMORY_USAGE": "1"}.items()
    assert on <= local().env_vars.items()
    assert on <= slurm(account="a", gpus_per_node=8).env_vars.items()
    assert on <= kubernetes(gpus_per_node=8).env_vars.items()
    assert "NEMO_LOG_MEMORY_USAGE" not in slurm(account="a", gpus_per_node=0).env_vars
    assert "NEMO_LOG_MEMORY_USAGE" not in kubernetes(gpus_per_node=0).env_vars
    assert local(env={"NEMO_LOG_MEMORY_USAGE": "0"}).env_vars["NEMO_LOG_MEMORY_USAGE"] == "0"


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


@pytest.mark.parametrize(
    "gpu, connections",
    [("b200-180gb", "32"), ("GB200-NVL72", "32"), ("b200", "32"), ("h100-sxm", "1"), ("h200-141gb", "1")],
)
def test_plugin_reads_blackwell_through_the_gpu_table(recipes, gpu, connections):
    # The plugin is given the user's spelling, not the preset's canonical name: an alias of a Blackwell GPU must get
    # Blackwell's 32 hardware queues, as the GPU it names does.
    from nemo_recipes.executors import RecipePlugin, slurm

    executor = slurm(account="a", nodes=8)
    RecipePlugin(gpu=gpu).setup(recipes.gpt_70b(), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == connections


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
    from nemo_recipes.executors.kubernetes_executor.trainer import pod_volumes, trainer_volume_mounts

    for version in ("v2.1", "v2.2", "v2.3"):
        ex = kubernetes(shared_home_pvc="home", trainer_version=version)
        assert {"name": "nemorun-home", "persistentVolumeClaim": {"claimName": "home"}} in pod_volumes(ex)
        assert {"name": "nemorun-home", "mountPath": get_nemorun_home()} in trainer_volume_mounts(ex)
        sub = kubernetes(shared_home_pvc="home/alice/.nemo_run", trainer_version=version)
        assert {
            "name": "nemorun-home",
            "mountPath": get_nemorun_home(),
            "subPath": "alice/.nemo_run",
        } in trainer_volume_mounts(sub)
        assert not [v for v in pod_volumes(kubernetes(trainer_version=version)) if v["name"] == "nemorun-home"]


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
    from nemo_recipes.executors.kubernetes_executor.trainer import trainer_volume_mounts

    path.write_text("gke:\n  preset: kubernetes\n  gpu: h100\n  shared_home_pvc: team-home/alice\n")
    ex, gpu = executor_for("gke", path)
    assert gpu == "h100-80gb"
    assert {"name": "nemorun-home", "mountPath": get_nemorun_home(), "subPath": "alice"} in trainer_volume_mounts(ex)


# ---- Kubernetes: the TrainJob shape of the cluster's Kubeflow Trainer release ----


def _pod_spec(body: dict) -> dict:
    spec = body["spec"]
    if "podTemplateOverrides" in spec:
        return spec["podTemplateOverrides"][0]["spec"]
    (job,) = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return job["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    "given,version", [("v2.1", "v2.1"), ("2.2", "v2.2"), ("v2.3.0", "v2.3"), ("2.3.1", "v2.3"), (" V2.2 ", "v2.2")]
)
def test_trainer_version_is_normalised(given, version):
    from nemo_recipes.executors.kubernetes_executor.trainer import normalise_version

    assert normalise_version(given) == (version, [])


def test_trainer_version_decides_where_every_pod_setting_goes(kube, no_network):
    """v2.1: podTemplateOverrides (NeMo-Run's own fields); v2.2+: one runtimePatches entry, manager nemo-recipes/...,
    for the `node` job; the same pod spec either way. Building the executor touches no network."""
    from nemo_recipes.executors import kubernetes

    settings = dict(
        pvcs={"datasets": "/data"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
        node_selector={"pool": "h100"},
        image_pull_secrets=["regcred"],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            }
        },
    )
    bodies = {
        v: kubernetes(trainer_version=v, **settings).get_job_body("job", ["true"]) for v in ("v2.1", "v2.2", "v2.3")
    }
    assert "runtimePatches" not in bodies["v2.1"]["spec"]
    assert bodies["v2.1"]["spec"]["podTemplateOverrides"][0]["targetJobs"] == [{"name": "node"}]
    for version in ("v2.2", "v2.3"):
        assert "podTemplateOverrides" not in bodies[version]["spec"]
        (patch,) = bodies[version]["spec"]["runtimePatches"]
        assert patch["manager"] == "nemo-recipes/preset"
        assert [j["name"] for j in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]] == ["node"]
    pod = _pod_spec(bodies["v2.1"])
    assert pod == _pod_spec(bodies["v2.2"]) == _pod_spec(bodies["v2.3"])
    assert list(pod) == ["volumes", "imagePullSecrets", "tolerations", "affinity", "containers", "nodeSelector"]
    assert pod["affinity"] == settings["affinity"] and no_network == []


@pytest.mark.parametrize("version", ["v2.1", "v2.2", "v2.3"])
def test_nothing_the_preset_sets_is_pruned_by_its_release(kube, version):
    """Every pod setting the preset takes, at once, against the release's vendored CRD (goldens cover fewer)."""
    from _crd import manager_errors, pruned, schema, schema_errors

    from nemo_recipes.executors import kubernetes

    body = kubernetes(
        trainer_version=version,
        pvcs={"datasets": "/data"},
        shared_home_pvc="home/alice",
        volumes=[{"name": "cache", "emptyDir": {}}],
        volume_mounts=[{"name": "cache", "mountPath": "/c"}],
        tolerations=[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        node_selector={"pool": "gpu"},
        image_pull_secrets=["regcred"],
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                ]
            }
        },
        secrets={"WANDB_API_KEY": "wandb/api-key"},
        cpu="16",
        memory="64Gi",
    ).get_job_body("j", ["t"])
    assert pruned(body, schema(version)) == []
    assert schema_errors(body, schema(version)) == [] and manager_errors(body) == []


def test_unknown_trainer_version_gets_the_allowed_ones_and_a_fix(kube):
    from nemo_recipes.executors import kubernetes

    for bad in ("v2.0", "latest", "2", "v2.1.0-rc.1"):
        with pytest.raises(InvalidRecipeError) as info:
            kubernetes(trainer_version=bad)
        (problem,) = info.value.problems
        assert problem.field == "trainer_version" and problem.value == bad
        assert "'v2.1', 'v2.2', 'v2.3'" in problem.message and "kubectl get crd" in problem.fix
    with pytest.raises(
        InvalidRecipeError,
        match="knows Trainer up to v2.3: if your cluster's TrainJob CRD still "
        "declares spec.runtimePatches, use trainer_version='v2.3'",
    ):
        kubernetes(trainer_version="v2.4.0")
    # What YAML makes of `trainer_version: 2.10` (2.1), `2.3` and `2`: the number cannot say which release was
    # written, so the fix never offers the number's own reading (2.10 must not become 'v2.1').
    for number, alike in ((2.1, "'2.1' and '2.10' alike"), (2.3, "'2.3' and '2.30' alike"), (2, "2 as a number")):
        with pytest.raises(InvalidRecipeError) as info:
            kubernetes(trainer_version=number)
        (problem,) = info.value.problems
        assert problem.field == "trainer_version" and problem.value == number
        assert f"YAML reads {alike}" in problem.fix and "kubectl get crd" in problem.fix
        assert f'"v{number}"' not in problem.fix or number == 2.3  # v2.3 is only the example, the newest release
    with pytest.raises(InvalidRecipeError) as info:
        kubernetes(trainer_version="v2.0", node_selector="gpu", affinity=["nodeAffinity"])
    assert fields(info.value) == ["trainer_version", "node_selector", "affinity"]  # every problem at once


def test_profile_trainer_version_is_checked_when_read_and_normalised(kube, tmp_path):
    from nemo_recipes.executors import executor_for, load_profiles

    path = tmp_path / "clusters.yaml"
    path.write_text(
        "old:\n  preset: kubernetes\n  trainer_version: 2.1.0\nnew:\n  preset: kubernetes\n"
        "bad:\n  preset: kubernetes\n  trainer_version: v3\nnum:\n  preset: kubernetes\n"
        "  trainer_version: 2.2\ntypo:\n  preset: kubernetes\n  trainer_versoin: v2.1\n"
    )
    with pytest.raises(InvalidRecipeError) as info:
        load_profiles(path)
    assert fields(info.value) == ["bad.trainer_version", "num.trainer_version", "typo.trainer_versoin"]
    text = str(info.value)
    assert "bad.trainer_version='v3': is not a Kubeflow Trainer release" in text and "'v2.1', 'v2.2', 'v2.3'" in text
    assert 'quote the release your cluster runs, e.g. num.trainer_version: "v2.3"' in text
    assert "YAML reads '2.2' and '2.20' alike as the number 2.2" in text and '"v2.2"' not in text
    assert "(did you mean 'trainer_version'?)" in text
    path.write_text("old:\n  preset: kubernetes\n  trainer_version: 2.1.0\nnew:\n  preset: kubernetes\n")
    assert load_profiles(path)["old"].args["trainer_version"] == "v2.1"
    assert "podTemplateOverrides" in executor_for("old", path)[0].get_job_body("j", ["t"])["spec"]
    assert "runtimePatches" in executor_for("new", path)[0].get_job_body("j", ["t"])["spec"]


TOKENS = {
    "hugging face": "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3h",
    "github": "ghp_" + "x7Yk2Lm9Qp4Rs8Tv1Wz3Ab6Cd0Ef5Gh2Ij4K",
    "openai": "sk-" + "proj-Zq8Wm3Xn5Vb7Lk2Jh4Gf6Ds9Ap1Oi3Uy",
    "wandb": "0f3a9c2e7b1d4f6a8c0e2b4d6f8a1c3e5b7d9f0a",
    "random": "Zx8k2LmQ9pR4tY7wV1bN3cD6",
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_secret_value_given_as_a_reference_is_refused_and_never_echoed(kube, kind):
    from nemo_recipes.executors import kubernetes

    token = TOKENS[kind]
    for ref in (token, f"wandb/{token}"):
        with pytest.raises(InvalidRecipeError) as info:
            kubernetes(secrets={"WANDB_API_KEY": ref}, image_pull_secrets=[token])
        assert fields(info.value) == ["image_pull_secrets", "secrets.WANDB_API_KEY"]
        text = str(info.value) + repr([p.to_dict() for p in info.value.problems])
        assert token not in text and token[4:20] not in text
        assert "looks like a secret value, not the name of a Kubernetes Secret" in text
        assert "kubectl create secret generic NAME --from-literal=KEY=..." in text and "revoke it" in text


def test_secret_names_that_look_like_names_are_not_mistaken_for_tokens(kube):
    from nemo_recipes.executors import kubernetes

    refs = {
        "A": "wandb",
        "B": "hf-token/HF_TOKEN",
        "C": "team-wandb-2024/api-key",
        "D": "ml-platform/HuggingFaceHubToken",
        "E": "nemorecipeswandbapikey2024",
        "F": "k8s-a100x8-h100x16-pool/token",
        "G": "registry/.dockerconfigjson",
        "H": "sk-team-secrets-2024/api-key",
    }
    env = kubernetes(secrets=refs, image_pull_secrets=["regcred", "ngc-registry-2025"]).env_list
    assert [e["valueFrom"]["secretKeyRef"]["name"] for e in env] == [r.partition("/")[0] for r in refs.values()]


def test_a_secret_value_in_a_profile_is_refused_without_echoing_it(kube, tmp_path):
    from nemo_recipes.executors import executor_for

    path = tmp_path / "clusters.yaml"
    path.write_text(f"gke:\n  preset: kubernetes\n  secrets: {{HF_TOKEN: {TOKENS['hugging face']}}}\n")
    with pytest.raises(InvalidRecipeError) as info:
        executor_for("gke", path)
    assert "cluster profile 'gke'" in str(info.value) and TOKENS["hugging face"] not in str(info.value)
    assert "starts like a Hugging Face token (hf_...)" in str(info.value)


def test_plugin_refuses_pod_settings_a_v2_2_server_would_drop(kube, recipes):
    """Pod fields set on a runtimePatches executor after the preset built it would go to podTemplateOverrides: no
    release keeps both, so the plugin refuses instead of letting the server drop them."""
    from nemo_recipes.executors import RecipePlugin, kubernetes

    ex = kubernetes(gpu="h100", shared_home_pvc="home")
    ex.tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists"})
    ex.volumes.append({"name": "extra", "emptyDir": {}})
    with pytest.raises(InvalidRecipeError) as info:
        RecipePlugin().setup(recipes.gpt_7b(), ex)
    assert fields(info.value) == ["executor.volumes", "executor.tolerations"]
    assert "spec.podTemplateOverrides, which a Trainer v2.2+ API server" in str(info.value)
    old = kubernetes(gpu="h100", shared_home_pvc="home", trainer_version="v2.1")
    old.tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists"})
    RecipePlugin().setup(recipes.gpt_7b(), old)  # v2.1 keeps them where NeMo-Run writes them


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_unreachable_kubernetes_api_is_named_with_the_server_and_the_fix(host, tmp_path, monkeypatch):
    """A real submission through NeMo-Run's KubeflowExecutor to an API server that is not there (a port nothing
    listens on): the failure names the kubeconfig's server, says nothing was submitted, and how to check."""
    import socket

    import nemo_run as run

    from nemo_recipes.executors import kubernetes
    from nemo_recipes.executors.submission import SubmissionError, submit

    with socket.socket() as probe:  # a port free now: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "https://{host}:{port}"}}}}]\n'
        "contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]\n"
        "current-context: c\nusers: [{name: u, user: {token: placeholder}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.setenv("NEMORUN_HOME", str(tmp_path / "home"))
    with open(os.devnull) as devnull:
        monkeypatch.setattr(sys, "stdin", devnull)
        with pytest.raises(SubmissionError) as info:
            submit(run.Script(inline="true"), kubernetes(), name="unreachable")
    (problem,) = info.value.problems
    assert problem.field == "kubeconfig" and problem.value == f"https://{host}:{port}"
    assert "cannot be reached (Connection refused)" in problem.message and "nothing was submitted" in problem.message
    assert "kubectl cluster-info" in problem.fix


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["smoke", "launch"])
def test_smoke_and_launch_ask_the_kubernetes_api_once_before_anything_starts(verb, tmp_path):
    """`smoke --executor kubernetes` failed after NeMo-Run's minute of retries with "internal error (MaxRetryError)"
    (issue 33): one short request first, then exit 1 (a scheduler that cannot be reached) naming the server."""
    import socket

    from _cli import cli

    with socket.socket() as probe:  # a port free now: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}"}}}}]\n'
        "contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]\n"
        "current-context: c\nusers: [{name: u, user: {token: placeholder}}]\n"
    )
    result = cli(verb, "gpt_1_3b", "--executor", "kubernetes", "--json", timeout=300, KUBECONFIG=str(config),
                 NEMORUN_HOME=str(tmp_path / "home"))  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "kubeconfig" and problem["value"] == f"https://127.0.0.1:{port}"
    assert "cannot be reached (Connection refused)" in problem["message"] and "kubectl cluster-info" in problem["fix"]
    assert not (tmp_path / "home" / "experiments").exists()  # nothing was started


def test_a_gpu_recipe_on_a_slurm_executor_without_gpus_is_refused(recipes):
    """Issue 33 (red team): gpt_1_3b on `slurm(gpus_per_node=0)` was called valid, then the job failed at its first
    CUDA call after its wait in the queue. The plugin refuses it naming gpus_per_node; CPU work (no trainer, or a
    trainer on CPU as smoke runs it) and an executor asking for GPUs by gres pass."""
    import nemo_run as run

    from nemo_recipes.errors import InvalidRecipeError
    from nemo_recipes.executors import RecipePlugin, slurm

    with pytest.raises(InvalidRecipeError) as refused:
        RecipePlugin().setup(recipes.gpt_1_3b(), slurm(account="a", gpus_per_node=0, processes_per_node=8))
    (problem,) = refused.value.problems
    assert (problem.field, problem.value) == ("gpus_per_node", 0)
    assert "trainer.accelerator='gpu'" in problem.message and "-E gpus_per_node=8" in problem.fix
    on_cpu = recipes.gpt_1_3b(num_gpus_per_node=1, global_batch_size=8)
    on_cpu.trainer.accelerator = "cpu"
    RecipePlugin().setup(on_cpu, slurm(account="a", gpus_per_node=0, processes_per_node=1))
    RecipePlugin().setup(run.Script(inline="true"), slurm(account="a", gpus_per_node=0))
    by_gres = slurm(account="a", gpus_per_node=0, processes_per_node=8)
    by_gres.gres = "gpu:8"
    RecipePlugin().setup(recipes.gpt_1_3b(), by_gres)


def test_paths_a_slurm_container_does_not_mount_are_warned_of(recipes, tmp_path):
    """A data prefix, tokenizer or checkpoint outside every container mount (and the job directory NeMo-Run mounts)
    is a file the job will not find after its wait in the queue: a warning each, with field, value and fix; none for
    a path under a mount, nor without a container (the node's own file system)."""
    import warnings

    from nemo_recipes.executors import RecipePlugin, slurm
    from nemo_recipes.executors.plugin import DataNotMountedWarning

    recipe = recipes.gpt_1_3b(
        data_paths=["/lustre/data/wiki", "/scratch/web/crawl"], tokenizer_path="/home/me/tok", restore_from="ckpt/a"
    )
    executor = slurm(account="a", container_mounts=["/lustre/data:/lustre/data:ro", "/home"], job_dir=str(tmp_path))
    with pytest.warns(DataNotMountedWarning) as record:
        RecipePlugin(validate=False).setup(recipe, executor)
    said = sorted(str(w.message) for w in record if w.category is DataNotMountedWarning)
    assert [m.split(":")[1].split("=")[0] for m in said] == [" data_paths", " restore_from"], said
    crawl, ckpt = said
    assert crawl.startswith("warning: data_paths='/scratch/web/crawl': lies outside every container mount")
    assert "(/lustre/data, /home, " in crawl and "Fix: mount it: container_mounts: [/scratch/web:/scratch/web]" in crawl
    assert ckpt.startswith("warning: restore_from='ckpt/a':")  # relative: the mount to add is its absolute folder
    assert f"container_mounts: [{os.path.abspath('ckpt')}:{os.path.abspath('ckpt')}]" in ckpt
    without_container = slurm(account="a", container_image=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataNotMountedWarning)
        RecipePlugin(validate=False).setup(recipes.gpt_1_3b(data_paths=["/scratch/web/crawl"]), without_container)


def test_export_warns_of_each_relative_path_it_keeps(recipes, tmp_path, capsys, monkeypatch):
    """A relative data path, tokenizer, checkpoint or --dir in an exported configuration names another file where the
    job runs: a warning each on stderr, the configuration still written; absolute ones pass without a word."""
    from nemo_recipes.cli.main import main

    monkeypatch.chdir(tmp_path)
    given = ["data_paths=[corpus/wiki,/abs/web]", "tokenizer_path=tok", "restore_from=/abs/ckpt", "--dir", "runs"]
    assert main(["export", "gpt_1_3b", *given, "--no-check", "-o", "x.yaml"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert [line.split(": ")[2].split("=")[0] for line in warned] == ["data_paths", "tokenizer_path", "dir"], warned
    assert warned[0].startswith("nemo-recipes export: warning: data_paths='corpus/wiki': is relative")
    assert f"Fix: give it as an absolute path (data_paths={tmp_path / 'corpus' / 'wiki'})." in warned[0]
    assert f"(--dir={tmp_path / 'runs'})" in warned[2] and (tmp_path / "x.yaml").is_file()


def test_a_shard_job_whose_container_does_not_mount_the_inputs_is_warned_of(tmp_path):
    """`data prepare --executor`: the ranks read the inputs and the tokenizer and write --out, in the job's container;
    each path no mount covers is warned of (field, value, the mount to add) before the job is submitted."""
    import json

    from nemo_recipes.cli.data_executor import unmounted_plan_paths
    from nemo_recipes.data import tokenizers
    from nemo_recipes.data.prepare import prepare
    from nemo_recipes.data.shard_plan import WORK_DIR
    from nemo_recipes.executors import slurm

    texts = [f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(50)]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tokenizer = tokenizers.train(texts, tmp_path / "tok", vocab_size=300)
    out = tmp_path / "cluster" / "out"
    prepare([str(tmp_path / "corpus")], out, tokenizer_path=str(tokenizer), progress="none")
    plan = out / WORK_DIR / "plan.json"
    mounted = slurm(account="a", gpus_per_node=0, container_mounts=[f"{tmp_path / 'cluster'}:{tmp_path / 'cluster'}"])
    problems = unmounted_plan_paths(mounted, plan)
    assert [(p.field, p.value, p.severity) for p in problems] == [
        ("inputs", str(tmp_path / "corpus" / "a.jsonl"), "warning"),
        ("tokenizer_path", str(tokenizer), "warning"),
    ]
    assert f"Fix: mount it: container_mounts: [{tmp_path / 'corpus'}:{tmp_path / 'corpus'}]" in str(problems[0])
    assert unmounted_plan_paths(slurm(account="a", gpus_per_node=0, container_image=None), plan) == []
