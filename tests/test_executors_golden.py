"""Golden files: the sbatch script, the TrainJob manifest and the torchrun command each preset produces for a few
recipes, rendered by NeMo-Run's own dry run with the recipe plugin applied (as in a real submission).

Random parts are normalised: experiment ids, the NEMORUN_HOME path, torchrun's --rdzv-id and the TrainJob name's
random suffix. Each TrainJob manifest is validated against the CRD of the Kubeflow Trainer release it is written for
(vendored in tests/data/kubeflow-trainer/), with the API server's pruning emulated (tests/_crd.py): nothing we set
may be dropped. Manifests without `_trainer_v2.x` in their name are the default release's (v2.3).

Regenerate after an intended change:   UPDATE_GOLDEN=1 pytest tests/test_executors_golden.py
"""

import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from _crd import (
    CRD_DIRS,
    DATA,
    manager_errors,
    patched_jobs_and_containers,
    pruned,
    runtime,
    runtime_jobs,
    schema,
    schema_errors,
)

pytestmark = pytest.mark.nemo

GOLDEN = Path(__file__).parent / "golden"
SECRET_VALUE = "golden-secret-value-must-not-appear"


def _slurm(**kw):
    from nemo_recipes.executors import slurm

    return slurm(**kw)


def _kubernetes(**kw):
    from nemo_recipes.executors import kubernetes

    return kubernetes(**kw)


def _local(**kw):
    from nemo_recipes.executors import local

    return local(**kw)


# Pod-level settings of every kind (claims, /dev/shm, tolerations, node selector), a secret and a tricky value.
K8S_70B = dict(
    nodes=4,
    gpu="h100",
    namespace="training",
    pvcs={"datasets": "/data", "checkpoints": "/checkpoints"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    env={"NEMO_MSG": "tokens: 'GPT' $PATH `x`"},
    secrets={"WANDB_API_KEY": "wandb/api-key"},
)
# The shared NEMORUN_HOME claim, without which the pods cannot read their config.
K8S_HOME = dict(nodes=1, gpu="h100", pvcs={"datasets": "/data"}, shared_home_pvc="nemo-run-home")

# name -> (recipe factory name, recipe overrides, executor factory, executor arguments, golden suffix)
CASES = {
    "slurm_gpt_7b_1x8": ("gpt_7b", {}, _slurm, dict(account="acct", partition="batch", nodes=1, gpu="h100"), "sh"),
    "slurm_gpt_70b_4x8": (
        "gpt_70b",
        {},
        _slurm,
        dict(
            account="acct",
            partition="batch",
            nodes=4,
            gpu="h100",
            time="1-00:00:00",
            mem="0",
            container_mounts=["/lustre/data:/data", "/lustre/ckpt:/checkpoints"],
            retries=2,
            env={"NEMO_MSG": "tokens: 'GPT' $PATH `x`", "DATA_PREFIX": "/data/pile_text_document"},
            secrets=["WANDB_API_KEY"],
        ),
        "sh",
    ),
    "slurm_gpt_175b_8x8_ssh": (
        "gpt_175b",
        {},
        _slurm,
        dict(
            account="acct",
            partition="batch",
            nodes=8,
            gpu="h100",
            tunnel="ssh",
            host="login.example.com",
            user="alice",
            job_dir="/lustre/alice/nemo_run",
        ),
        "sh",
    ),
    "kubernetes_gpt_7b_1x8": ("gpt_7b", {}, _kubernetes, dict(nodes=1, gpu="h100"), "yaml"),
    "kubernetes_gpt_70b_4x8": ("gpt_70b", {}, _kubernetes, K8S_70B, "yaml"),
    "kubernetes_gpt_70b_4x8_trainer_v2.1": ("gpt_70b", {}, _kubernetes, {**K8S_70B, "trainer_version": "v2.1"}, "yaml"),
    "kubernetes_gpt_70b_4x8_trainer_v2.2": ("gpt_70b", {}, _kubernetes, {**K8S_70B, "trainer_version": "v2.2"}, "yaml"),
    "kubernetes_gpt_7b_1x8_shared_home": ("gpt_7b", {}, _kubernetes, K8S_HOME, "yaml"),
    "kubernetes_gpt_7b_1x8_shared_home_trainer_v2.1": (
        "gpt_7b",
        {},
        _kubernetes,
        {**K8S_HOME, "trainer_version": "v2.1"},
        "yaml",
    ),
    "kubernetes_gpt_7b_1x8_shared_home_trainer_v2.2": (
        "gpt_7b",
        {},
        _kubernetes,
        {**K8S_HOME, "trainer_version": "v2.2"},
        "yaml",
    ),
    "local_gpt_1_3b_2": ("gpt_1_3b", {}, _local, dict(devices=2), "txt"),
    "local_gpt_7b_8": ("gpt_7b", {}, _local, dict(devices=8, gpu="h100"), "txt"),
}


@pytest.fixture(scope="module")
def environment(kubeconfig_file):
    config = kubeconfig_file
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "WANDB_API_KEY")}
    os.environ["KUBECONFIG"] = str(config)
    os.environ["WANDB_API_KEY"] = SECRET_VALUE
    # NeMo-Run runs shell commands through invoke, which reads stdin; pytest's captured stdin refuses reads.
    stdin = sys.stdin
    with open(os.devnull) as devnull:
        sys.stdin = devnull
        yield
    sys.stdin = stdin
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def normalise(text: str) -> str:
    from nemo_run.config import get_nemorun_home

    text = text.replace(get_nemorun_home(), "<NEMORUN_HOME>")
    text = re.sub(r"render_\d+", "render_<ID>", text)
    text = re.sub(r"--rdzv-id \d+", "--rdzv-id <RDZV_ID>", text)
    text = re.sub(r"(name: gpt[-_0-9a-z]*?)-[0-9a-f]{6}\n", r"\1-<UID>\n", text)
    return text


def render(case: str, raw: bool = False) -> str:
    import nemo_recipes
    from nemo_recipes.executors import RecipePlugin
    from nemo_recipes.executors.render import artifact

    recipe_name, overrides, make_executor, args, _ = CASES[case]
    recipe = getattr(nemo_recipes, recipe_name)(**overrides)
    text = artifact(recipe, make_executor(**args), name=recipe_name, plugins=[RecipePlugin()])
    return text if raw else normalise(text)


@pytest.mark.parametrize("case", sorted(CASES))
def test_artifact_matches_golden(case, environment):
    text = render(case)
    assert SECRET_VALUE not in text
    golden = GOLDEN / f"{case}.{CASES[case][4]}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run UPDATE_GOLDEN=1 pytest {__file__}"
    assert text == golden.read_text(), f"{case} differs from {golden} (UPDATE_GOLDEN=1 to accept an intended change)"


def test_goldens_have_no_leftover_random_parts():
    for path in (p for p in GOLDEN.rglob("*") if p.is_file()):  # recipes/: tests/test_recipe_outputs.py's records
        text = path.read_text()
        assert not re.search(r"--rdzv-id \d", text), path
        assert not re.search(r"render_\d", text), path
        assert "/tmp/" not in text, path


KUBERNETES = sorted(c for c in CASES if c.startswith("kubernetes"))


def trainer_version(case: str) -> str:
    from nemo_recipes.executors.kubernetes_executor.trainer import DEFAULT_TRAINER_VERSION

    return CASES[case][3].get("trainer_version", DEFAULT_TRAINER_VERSION)


def manifest(case: str) -> dict:
    return yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())


def pod_spec(trainjob: dict) -> dict:
    """The pod spec our TrainJob patches into the `node` pods, in either release's shape."""
    spec = trainjob["spec"]
    if "podTemplateOverrides" in spec:
        (override,) = spec["podTemplateOverrides"]
        return override["spec"]
    (patch,) = spec["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return job["template"]["spec"]["template"]["spec"]


def test_every_trainer_version_has_goldens_and_a_vendored_crd():
    from nemo_recipes.executors.kubernetes_executor.trainer import DEFAULT_TRAINER_VERSION, TRAINER_VERSIONS

    assert tuple(CRD_DIRS) == TRAINER_VERSIONS and DEFAULT_TRAINER_VERSION == "v2.3"
    assert sorted({trainer_version(c) for c in KUBERNETES}) == list(TRAINER_VERSIONS)
    for folder in CRD_DIRS.values():
        assert (DATA / folder / "trainer.kubeflow.org_trainjobs.yaml").is_file()
    assert "Apache License" in (DATA / "LICENSE").read_text()
    assert all(
        commit in (DATA / "SOURCE.txt").read_text()
        for commit in (
            "73c9bece741ce17d2124abda3ec6bfcf5b5b8e87",
            "c505fc7ccec98bb326cee56144bc5ee92be5048d",
            "658725bdae5c7e3a0854d93ac6ff492e109a22ab",
        )
    )


@pytest.mark.parametrize("case", KUBERNETES)
def test_trainjob_manifest_validates_against_its_crd(case):
    """Accepted by the release's API server and Trainer webhook: schema, list-map keys, the patch manager, and every
    replicated job and container we patch exists in that release's torch-distributed runtime."""
    version, trainjob = trainer_version(case), manifest(case)
    assert schema_errors(trainjob, schema(version)) == []
    assert manager_errors(trainjob) == []
    runtime_manifest = runtime(version)
    assert trainjob["spec"]["runtimeRef"]["name"] == runtime_manifest["metadata"]["name"]
    jobs = runtime_jobs(runtime_manifest)
    for job, containers in patched_jobs_and_containers(trainjob):
        assert job in jobs and set(containers) <= set(jobs[job]), (job, containers, jobs)
    trainer = trainjob["spec"]["trainer"]
    assert trainer["numProcPerNode"] == int(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"])


@pytest.mark.parametrize("case", KUBERNETES)
def test_no_manifest_field_is_pruned_by_the_api_server(case):
    """What the issue was about: a server of the release keeps volumes, mounts, tolerations and node selector."""
    assert pruned(manifest(case), schema(trainer_version(case))) == []


#: The 70b manifest (every kind of pod setting) of each release.
BY_VERSION = {
    "v2.1": "kubernetes_gpt_70b_4x8_trainer_v2.1",
    "v2.2": "kubernetes_gpt_70b_4x8_trainer_v2.2",
    "v2.3": "kubernetes_gpt_70b_4x8",
}
#: What a server of the wrong release drops: all pod-level settings, silently.
WRONG_RELEASE = {
    ("v2.1", "v2.2"): [".spec.podTemplateOverrides"],
    ("v2.1", "v2.3"): [".spec.podTemplateOverrides"],
    ("v2.2", "v2.1"): [".spec.runtimePatches"],
    ("v2.3", "v2.1"): [".spec.runtimePatches"],
}


@pytest.mark.parametrize("written_for", sorted(BY_VERSION))
@pytest.mark.parametrize("served_by", sorted(BY_VERSION))
def test_a_manifest_for_the_wrong_release_loses_its_pod_settings(written_for, served_by):
    """The check fails where it should: a v2.1 manifest on a v2.2+ server loses podTemplateOverrides, a v2.2+ one
    on a v2.1 server loses runtimePatches. v2.2 and v2.3 declare the same fields for what we set."""
    expected = WRONG_RELEASE.get((written_for, served_by), [])
    assert pruned(manifest(BY_VERSION[written_for]), schema(served_by)) == expected


def test_v2_2_and_v2_3_manifests_are_the_same_and_their_crds_still_differ():
    """Our v2.2 and v2.3 TrainJobs are identical: both CRDs declare the same runtimePatches fields for everything
    we set (the releases differ in how the controller merges a patch, which only matters for a replicated job the
    runtime lacks). The pruning check still tells the two CRDs apart: terminationGracePeriodSeconds, new in
    v2.3's pod patch, is dropped by v2.2."""
    for v22, v23 in (
        ("kubernetes_gpt_70b_4x8_trainer_v2.2", "kubernetes_gpt_70b_4x8"),
        ("kubernetes_gpt_7b_1x8_shared_home_trainer_v2.2", "kubernetes_gpt_7b_1x8_shared_home"),
    ):
        assert (GOLDEN / f"{v22}.yaml").read_text() == (GOLDEN / f"{v23}.yaml").read_text()
    trainjob = manifest("kubernetes_gpt_70b_4x8")
    pod_spec(trainjob)["terminationGracePeriodSeconds"] = 30
    path = (
        ".spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template"
        ".spec.terminationGracePeriodSeconds"
    )
    assert pruned(trainjob, schema("v2.2")) == [path]
    assert pruned(trainjob, schema("v2.3")) == []


def test_the_pruning_check_can_fail():
    """Declared fields (and env/resources/nodeSelector maps) pass; undeclared ones are found, at any depth."""
    trainjob = manifest("kubernetes_gpt_70b_4x8")
    trainjob["spec"]["trainer"]["numNodez"] = 4
    pod_spec(trainjob)["containers"][0]["volumeMountz"] = []
    trainjob["metadata"]["labelz"] = {}
    assert pruned(trainjob, schema("v2.3")) == [
        ".metadata.labelz",
        ".spec.trainer.numNodez",
        ".spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".containers[0].volumeMountz",
    ]


def test_a_broken_manifest_is_rejected_by_the_schema_and_the_webhook():
    """The validation can fail: a wrong type, a duplicate volume name (a list map keyed by name) and a manager
    that is not "domain/path" (the bare name "nemo-recipes" would be refused by the Trainer webhook)."""
    for version, case in BY_VERSION.items():
        trainjob = manifest(case)
        trainjob["spec"]["trainer"]["numNodes"] = "four"
        volumes = pod_spec(trainjob)["volumes"]
        volumes.append(dict(volumes[0]))
        errors = schema_errors(trainjob, schema(version))
        assert any(e.startswith("spec.trainer.numNodes:") for e in errors), errors
        assert any("duplicate ['name']=('datasets',)" in e for e in errors), errors
    trainjob = manifest("kubernetes_gpt_70b_4x8")
    trainjob["spec"]["runtimePatches"][0]["manager"] = "nemo-recipes"
    assert manager_errors(trainjob) == [
        "manager 'nemo-recipes': must be a domain-prefixed path (such as \"acme.io/foo\")"
    ]


#: examples/README.md tells users to run this to find their Trainer release.
FIND_VERSION = (
    "{range .spec.versions[*].schema.openAPIV3Schema.properties.spec.properties}"
    "{.podTemplateOverrides.type}/{.runtimePatches.type}/{.trainer.properties.command.items.maxLength}"
    '{"\\n"}{end}'
)


def test_the_documented_kubectl_command_tells_the_three_releases_apart(tmp_path):
    """Run the jsonpath of examples/README.md with kubectl (offline: `label --local`) on the vendored CRDs."""
    import shutil
    import subprocess

    readme = (Path(__file__).parent.parent / "examples" / "README.md").read_text()
    assert f"-o jsonpath='{FIND_VERSION}'" in readme
    expected = {"v2.1": "array//", "v2.2": "/array/65536", "v2.3": "/array/1048576"}
    for line in expected.values():
        assert f"`{line}`" in readme
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: the README's outputs were checked against the CRDs only")
    for version, line in expected.items():
        crd_file = DATA / CRD_DIRS[version] / "trainer.kubeflow.org_trainjobs.yaml"
        out = subprocess.run(
            ["kubectl", "label", "--local", "-f", str(crd_file), "probe=1", "-o", f"jsonpath={FIND_VERSION}"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "KUBECONFIG": str(tmp_path / "none")},
        )
        assert out.stdout == line + "\n", (version, out.stdout, out.stderr)


def test_gpt_70b_on_4x8_slurm_is_one_torchrun_per_node_with_8_ranks():
    script = (GOLDEN / "slurm_gpt_70b_4x8.sh").read_text()
    assert "#SBATCH --nodes=4" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "#SBATCH --gpus-per-node=8" in script and "#SBATCH --exclusive" in script
    assert "--nnodes 4 --nproc-per-node 8" in script
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script  # TP 8
    assert "export NCCL_P2P_NET_CHUNKSIZE=2097152" in script  # PP 4 across nodes
    assert "export NEMO_MSG='tokens: '\"'\"'GPT'\"'\"' $PATH `x`'" in script
    assert "#SBATCH --export=ALL,WANDB_API_KEY" in script


@pytest.mark.parametrize("case", sorted(c for c in CASES if "shared_home" in c))
def test_shared_home_is_mounted_where_the_command_reads_its_config(case, environment):
    """The pod command's config path lies under the shared-home mount, which is this machine's NEMORUN_HOME, in
    every release's shape."""
    from nemo_run.config import get_nemorun_home

    trainjob = yaml.safe_load(render(case, raw=True))
    pod = pod_spec(trainjob)
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "nemorun-home"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "nemorun-home"]
    assert volume["persistentVolumeClaim"] == {"claimName": "nemo-run-home"}
    assert mount["mountPath"] == get_nemorun_home()
    command = trainjob["spec"]["trainer"]["command"]
    assert command[:3] == ["python", "-m", "nemo_run.core.runners.fdl_runner"]
    config = command[-1]
    assert config.startswith(mount["mountPath"] + "/experiments/"), (config, mount)
    # the datasets claim keeps its own mount beside it
    assert {"name": "datasets", "mountPath": "/data"} in container["volumeMounts"]
