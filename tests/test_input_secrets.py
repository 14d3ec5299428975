"""Secrets are never quoted back (issue 23, point 2): every shape a user gives a secret in (a `secrets=` mapping or
list, a profile's `secrets:` written as a mapping, an `env` value, a value of the environment put in another field)
through every message path (str(error), the CLI's text on stderr, the CLI's --json on stdout). Values of two looks:
a token (`hf_...`, which credentials.token_like recognises) and a passphrase that looks like any other text, which
only the key it is given under, or its presence in the environment, can give away."""

from __future__ import annotations

import json
import os
import sys

import pytest
from _cli import assert_no_canary
from conftest import SECRET_CANARY

from nemo_recipes.cli.main import main
from nemo_recipes.errors import REDACTED_VALUE, InvalidRecipeError, Problem

TOKEN = "hf_Zq8Wm3Xn5Vb7Lk2JpR4tY6uI9oP1aS"
PASSPHRASE = "correct-horse-battery-staple-forty-two"
VALUES = {"token": TOKEN, "passphrase": PASSPHRASE}


def slurm_call(shape: str, value: str):
    from nemo_recipes.executors import kubernetes, local, slurm

    return {
        "secrets mapping": lambda: slurm(account="a", gpus_per_node=0, secrets={"WANDB_API_KEY": value}),
        "secrets mapping, own name": lambda: slurm(account="a", gpus_per_node=0, secrets={"MY_SERVICE": value}),
        "secrets list": lambda: slurm(account="a", gpus_per_node=0, secrets=[value, "HF_TOKEN"]),
        "env, secret name": lambda: slurm(account="a", gpus_per_node=0, env={"HF_TOKEN": value}),
        "env, password key": lambda: local(env={"DB_PASSWORD": value, "1BAD": "x"}),
        "kubernetes secrets": lambda: kubernetes(secrets={"WANDB_API_KEY": value}),
    }[shape]


SHAPES = [
    "secrets mapping",
    "secrets mapping, own name",
    "secrets list",
    "env, secret name",
    "env, password key",
    "kubernetes secrets",
]


def assert_hidden(text: str, value: str) -> None:
    assert value not in text, text
    assert SECRET_CANARY not in text


@pytest.mark.nemo
@pytest.mark.parametrize("kind", sorted(VALUES))
@pytest.mark.parametrize("shape", SHAPES)
def test_a_refused_secret_is_never_in_the_message(kubeconfig_file, monkeypatch, shape, kind):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    value = VALUES[kind]
    try:
        slurm_call(shape, value)()
    except InvalidRecipeError as error:
        assert_hidden(str(error), value)
        assert_hidden(json.dumps([p.to_dict() for p in error.problems]), value)
        return
    # Accepted (a list entry that is a name, a Kubernetes Secret reference): then it was no secret value.
    assert shape == "kubernetes secrets" and kind == "passphrase"


@pytest.mark.parametrize(
    "problem",
    [
        Problem("secrets", {"WANDB_API_KEY": PASSPHRASE}, "must be a list of names.", "list names."),
        Problem("clusters.mine.secrets", {"A": PASSPHRASE}, "x.", "y."),
        Problem("env.MY_API_KEY", PASSPHRASE, "is a secret.", f"do not write {PASSPHRASE} here."),
        Problem("profile", {"preset": "slurm", "secrets": {"X": PASSPHRASE}}, "x.", "y."),
        Problem("profile", {"preset": "slurm", "db_password": PASSPHRASE}, "x.", "y."),
        Problem("account", [TOKEN], "x.", "y."),
        Problem("account", SECRET_CANARY, "is not an account.", f"not {SECRET_CANARY}."),  # a value of the environment
    ],
)
def test_every_problem_redacts_itself_in_text_and_json(problem):
    for text in (str(problem), json.dumps(problem.to_dict())):
        assert PASSPHRASE not in text and TOKEN not in text and SECRET_CANARY not in text, text
        assert REDACTED_VALUE in text


def test_names_of_secrets_are_still_shown():
    """What is redacted is values: a list of names (secrets=[...], image_pull_secrets) still reads."""
    assert "'1BAD'" in str(Problem("secrets", ["1BAD"], "is not a name.", "fix it."))
    assert "'regcred'" in str(Problem("image_pull_secrets", "regcred", "x.", "y."))


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    path = tmp_path / "clusters.yaml"
    path.write_text(
        "mapped:\n  preset: slurm\n  account: a\n  gpus_per_node: 0\n"
        f"  secrets: {{WANDB_API_KEY: {PASSPHRASE}, OTHER: {TOKEN}}}\n"
        f"listed:\n  preset: local\n  secrets: [{TOKEN}]\n"
        f"enved:\n  preset: local\n  env: {{HF_TOKEN: {PASSPHRASE}}}\n"
    )
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert_no_canary(out, err)
    return code, out + err


@pytest.mark.nemo
@pytest.mark.parametrize("profile", ["mapped", "listed", "enved"])
@pytest.mark.parametrize("as_json", [False, True])
def test_the_cli_never_prints_a_secret_of_a_profile(capsys, profiles, profile, as_json):
    argv = ["launch", "gpt_1_3b", "--executor", profile, "--clusters", str(profiles), "--dryrun"]
    code, output = run_cli(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 2, output
    assert PASSPHRASE not in output and TOKEN not in output, output
    assert "Fix:" in output or '"fix"' in output


@pytest.mark.nemo
@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "item",
    [f"account={SECRET_CANARY} x", f"partition={TOKEN}!", f"secrets={PASSPHRASE}", f"nosuchfield={TOKEN}"],
)
def test_the_cli_never_prints_a_secret_given_as_an_executor_argument(capsys, item, as_json):
    """The environment's secret put in a plain field, a token where a name belongs, an unknown argument."""
    code, output = run_cli(
        capsys, "launch", "gpt_1_3b", "--executor", "slurm", "-E", item, "--dryrun", *(["--json"] if as_json else [])
    )
    assert code == 2, output
    assert SECRET_CANARY not in output and TOKEN not in output, output


# ---- Secrets in clear (issue 47, class 2): one set of rules (credentials.py) for every value that reaches a job
# script, a manifest, a printed dry run, an exported configuration, a card or a log. Secrets pass by reference; a
# field that can only carry a value refuses a secret's value. Planted here: names the rules know only by their words
# (MY_SERVICE_APIKEY, DB_PASS) and a value of a secret environment variable under an innocent name (REPORT_LABEL).

APIKEY = "zebra-quartz-seven-seventy-one"
DB_PASS = "plum-tree-nine-orchard"
SMTP = "orchid-velvet-harbour-lamp"  # the value of SMTP_PASSWORD, planted under the innocent REPORT_LABEL
PLANTED = (APIKEY, DB_PASS, SMTP, SECRET_CANARY)


@pytest.fixture
def planted(monkeypatch):
    """The submitting environment holds the planted secrets, as a user's shell would."""
    monkeypatch.setenv("MY_SERVICE_APIKEY", APIKEY)
    monkeypatch.setenv("DB_PASS", DB_PASS)
    monkeypatch.setenv("SMTP_PASSWORD", SMTP)


def assert_nowhere(output: str, *roots) -> None:
    from conftest import files_holding

    assert not [v for v in PLANTED if v in output], output
    assert files_holding(roots, PLANTED) == []


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "argv, field",
    [
        (["plan", "gpt_1_3b", "tokenizer_path=/data/{secret}/tok"], "tokenizer_path"),  # an override
        (["launch", "gpt_1_3b", "--executor", "slurm", "-E", "account=a", "-E", "qos={secret}", "--dryrun"], "qos"),
        (["export", "gpt_1_3b", "--name", "{secret}"], "--name"),  # an exported configuration
        (["watch", "run", "--card", "cards/{secret}.yaml"], "--card"),  # a card
    ],
)
def test_a_secret_value_in_any_argument_is_refused_before_the_verb_runs(
    capsys, planted, tmp_path, monkeypatch, argv, field, as_json
):
    """Any verb, any kind of argument: refused (exit 2, field named, value redacted) before anything is written."""
    monkeypatch.chdir(tmp_path)
    argv = [a.format(secret=SMTP) for a in argv] + (["--json"] if as_json else [])
    code, output = run_cli(capsys, *argv)
    assert code == 2, output
    assert field in output and "SMTP_PASSWORD" in output and "by reference" in output, output
    assert_nowhere(output, tmp_path, os.environ["NEMORUN_HOME"])


@pytest.fixture
def kube(kubeconfig_file, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    # NeMo-Run runs shell commands through invoke, which reads stdin; pytest's captured stdin refuses reads.
    with open(os.devnull) as devnull:
        monkeypatch.setattr(sys, "stdin", devnull)
        yield


@pytest.mark.nemo
def test_a_profile_passes_secrets_by_reference_and_never_writes_them(capsys, planted, tmp_path, kube):
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        "byvalue:\n  preset: slurm\n  account: a\n  container_image: null\n"
        f"  env: {{MY_SERVICE_APIKEY: {APIKEY}, DB_PASS: {DB_PASS}, REPORT_LABEL: {SMTP}, PLAIN: ok}}\n"
        "inline:\n  preset: slurm\n  account: a\n  container_image: null\n"
        f"  setup_lines: 'curl -u me:{SMTP} https://example.org'\n"
        "byref:\n  preset: slurm\n  account: a\n  container_image: null\n"
        "  secrets: [MY_SERVICE_APIKEY, DB_PASS]\n  env: {PLAIN: ok}\n"
        "pods:\n  preset: kubernetes\n  secrets: {MY_SERVICE_APIKEY: svc/apikey}\n"
        f"  env: {{DB_PASS: {DB_PASS}}}\n"
    )
    home = os.environ["NEMORUN_HOME"]
    launch = ["launch", "gpt_1_3b", "--clusters", str(clusters), "--dryrun", "--executor"]
    for profile, fields in [
        ("byvalue", ["env.MY_SERVICE_APIKEY", "env.DB_PASS", "env.REPORT_LABEL"]),
        ("inline", ["setup_lines"]),  # a field that can only carry a value
        ("pods", ["env.DB_PASS"]),
    ]:
        code, output = run_cli(capsys, *launch, profile)
        assert code == 2, output
        assert all(f"{field}=" in output for field in fields) and "env.PLAIN" not in output, output
        assert_nowhere(output, home)
    # Refused where the profile becomes an executor, for every verb (smoke and data prepare run no recipe plugin).
    from nemo_recipes.executors.profiles import executor_for

    with pytest.raises(InvalidRecipeError) as info:
        executor_for("inline", clusters)
    assert [p.field for p in info.value.problems] == ["setup_lines"]
    # By reference: the job script names the secrets and holds no value; sbatch copies them into the job.
    code, output = run_cli(capsys, *launch, "byref")
    assert code == 0, output
    assert "#SBATCH --export=ALL,DB_PASS,MY_SERVICE_APIKEY" in output and "export PLAIN=ok" in output, output
    assert_nowhere(output, home)
    options = ["-E", "account=a", "-E", "container_image=null", "-E", "secrets=[MY_SERVICE_APIKEY, DB_PASS]"]
    code, output = run_cli(capsys, *launch, "slurm", *options)  # the same, as executor options
    assert code == 0, output
    assert "#SBATCH --export=ALL,DB_PASS,MY_SERVICE_APIKEY" in output, output
    assert_nowhere(output, home)


@pytest.mark.nemo
def test_what_python_and_plugins_add_to_an_executor_is_passed_by_reference_or_refused(planted, kube):
    """Past the presets' checks (a Python caller, a NeMo plugin adding to env_vars), the recipe plugin applies the
    same rules before anything is written: secrets the environment holds leave by reference, the rest is refused."""
    import nemo_run as run

    from nemo_recipes.executors import RecipePlugin, kubernetes, local, render, slurm

    plugin = RecipePlugin(validate=False, performance_env=False)
    ex = slurm(account="a", gpus_per_node=0, container_image=None)
    ex.env_vars.update({"MY_SERVICE_APIKEY": APIKEY, "DB_PASS": DB_PASS, "PLAIN": "ok"})
    script = render.artifact(run.Script(inline="true"), ex, plugins=[plugin])
    assert "#SBATCH --export=ALL,DB_PASS,MY_SERVICE_APIKEY" in script and "PLAIN=ok" in script, script
    assert_nowhere(script)
    on_this_machine, task = local(1), run.Script(inline="true", env={"MY_SERVICE_APIKEY": APIKEY})
    on_this_machine.env_vars["DB_PASS"] = DB_PASS
    plugin.setup(task, on_this_machine)  # the job inherits both from this environment instead
    assert_nowhere(repr(on_this_machine) + repr(task))

    pods = kubernetes(secrets={"MY_SERVICE_APIKEY": "svc/apikey"})
    manifest = render.artifact(run.Script(inline="true"), pods, plugins=[plugin])
    assert "secretKeyRef:\n" in manifest and "name: svc\n" in manifest and "key: apikey\n" in manifest, manifest
    assert_nowhere(manifest)
    pods.env_vars["DB_PASS"] = DB_PASS  # a pod inherits nothing from here: only a Secret can carry it
    with pytest.raises(InvalidRecipeError, match="env.DB_PASS='<redacted"):
        plugin.setup(run.Script(inline="true"), pods)

    ex = slurm(account="a", gpus_per_node=0, container_image=None, setup_lines=f"login --key {APIKEY}")
    ex.env_vars["REPORT_LABEL"] = SMTP  # not in the environment under that name: no reference can carry it
    with pytest.raises(InvalidRecipeError) as info:
        plugin.setup(run.Script(inline="true", args=["--db", DB_PASS]), ex)
    assert sorted(p.field for p in info.value.problems) == ["env.REPORT_LABEL", "setup_lines", "task.args"]
    assert_nowhere(str(info.value) + json.dumps([p.to_dict() for p in info.value.problems]))
