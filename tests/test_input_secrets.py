"""Secrets are never quoted back (issue 23, point 2): every shape a user gives a secret in (a `secrets=` mapping or
list, a profile's `secrets:` written as a mapping, an `env` value, a value of the environment put in another field)
through every message path (str(error), the CLI's text on stderr, the CLI's --json on stdout). Values of two looks:
a token (`hf_...`, which credentials.token_like recognises) and a passphrase that looks like any other text, which
only the key it is given under, or its presence in the environment, can give away."""

from __future__ import annotations

import json

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
