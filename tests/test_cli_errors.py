"""User errors: one clear message (field, value, fix), no traceback, exit 2, "did you mean" where it helps."""

from __future__ import annotations

import json

from _cli import cli


def test_unknown_verb_suggests_the_closest():
    result = cli("lss")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "nemo-recipes: error: argument VERB: invalid choice: 'lss' (choose from 'ls', 'show', 'plan', 'diff', "
        "'export', 'launch', 'smoke', 'watch', 'hf', 'data', 'completion') (did you mean 'ls'?)"
    )


def test_unknown_recipe_suggests_the_closest():
    result = cli("show", "gpt70b")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "nemo-recipes show: error: recipe='gpt70b': unknown recipe (did you mean 'gpt_70b'?). "
        "Fix: use one of: gpt_1_3b, gpt_7b, gpt_13b, gpt_70b, gpt_175b, llama_8b, llama_70b, llama_405b, "
        "qwen3_dense_8b, qwen3_dense_32b, mixtral_moe_8x7b, mixtral_moe_8x22b, "
        "qwen3_moe_30b_a3b, qwen3_moe_235b_a22b.\n"
    )


def test_every_bad_override_is_reported_at_once():
    result = cli("show", "gpt_70b", "tensor_paralel=4", "pipeline_parallel=x", "oops")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "nemo-recipes show: recipe 'gpt_70b': 3 problem(s) found\n"
        "  - error: override='oops': is not of the form key=value. "
        "Fix: write it as key=value, for example tensor_parallel=4.\n"
        "  - error: tensor_paralel='4': unknown recipe field (did you mean 'tensor_parallel'?). "
        "Fix: use one of the fields listed by `nemo-recipes show gpt_70b`.\n"
        "  - error: pipeline_parallel='x': must be an integer. Fix: set pipeline_parallel to an integer.\n"
    )
    assert "Traceback" not in result.stderr


def test_errors_with_json_also_print_json():
    result = cli("show", "gpt70b", "--json")
    assert result.returncode == 2
    data = json.loads(result.stdout)
    assert list(data) == ["error", "problems"]
    assert data["problems"] == [
        {
            "severity": "error",
            "field": "recipe",
            "value": "gpt70b",
            "message": "unknown recipe (did you mean 'gpt_70b'?).",
            "fix": "use one of: gpt_1_3b, gpt_7b, gpt_13b, gpt_70b, gpt_175b, llama_8b, llama_70b, llama_405b, "
            "qwen3_dense_8b, qwen3_dense_32b, mixtral_moe_8x7b, mixtral_moe_8x22b, "
            "qwen3_moe_30b_a3b, qwen3_moe_235b_a22b.",
        }
    ]


def test_missing_argument_is_a_usage_error():
    result = cli("show")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "nemo-recipes show: error: the following arguments are required: NAME"


def test_an_argument_left_empty_by_a_double_dash_is_missing_too():
    # argparse stores [] for `B` when a second '--' is all that is left for it (found by test_input_properties).
    result = cli("diff", "gpt_7b", "--", "--")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == "nemo-recipes diff: error: the following arguments are required: B"


def test_a_reader_that_leaves_early_is_not_an_error():
    # `nemo-recipes completion fish | head -0`: stdout closed before anything is written.
    import subprocess

    from _cli import ENV, SCRIPT

    process = subprocess.Popen([SCRIPT, "completion", "fish"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    process.stdout.close()
    assert process.wait(timeout=60) == 0
    assert process.stderr.read() == b""


def test_each_kind_of_error_has_its_exit_code_and_one_message(capsys):
    # The tree of errors.py, as the CLI maps it: input refused -> 2, a failure outside the input -> 1; the names
    # before 0.2 are the same classes (issue 32).
    import argparse

    from nemo_recipes import errors
    from nemo_recipes.cli.main import _failed
    from nemo_recipes.data.sources import BadInput, InvalidDataError, bad
    from nemo_recipes.smoke_training.cpu_compat import CompatError
    from nemo_recipes.smoke_training.launchers import SmokeError

    assert errors.InvalidRecipeError is errors.InvalidInputError and errors.RecipeError is errors.InputError
    assert BadInput is InvalidDataError
    assert issubclass(errors.InvalidConfigError, errors.InvalidRecipeError)  # as before: caught by the old name
    assert not issubclass(InvalidDataError, errors.InvalidConfigError)
    assert not issubclass(errors.RunFailedError, errors.InputError)
    problem = errors.Problem("tensor_parallel", 3, "must divide.", "use 1.")
    args = argparse.Namespace(verb="smoke", json=False)
    cases = [
        (errors.InvalidInputError([problem], context="recipe 'gpt_7b'"), 2),
        (errors.InvalidConfigError([problem]), 2),
        (bad("inputs", "x.jsonl", "is empty.", "give text."), 2),
        (SmokeError("DIR holds an earlier smoke run"), 2),
        (CompatError("the CPU compatibility layer refuses"), 2),
        (errors.RunFailedError("the one-process reference failed (status 1); log: LOG"), 1),
    ]
    for error, code in cases:
        assert _failed(error, args, debug=False) == code, error
        stderr = capsys.readouterr().err
        assert stderr.startswith("nemo-recipes smoke: ") and "Traceback" not in stderr
        assert "internal error" not in stderr, stderr


def test_the_package_uses_the_current_names_of_its_errors():
    # The deprecated names stay for users' code (ARCHITECTURE.md promises them); the package itself raises and
    # catches the current ones, so the aliases can go one day without touching it.
    import ast
    from pathlib import Path

    deprecated = {"RecipeError", "InvalidRecipeError", "BadInput"}
    package = Path(__file__).resolve().parent.parent / "nemo_recipes"
    defining = {package / "errors.py", package / "data" / "sources.py", package / "__init__.py"}
    users = []
    for path in sorted(set(package.rglob("*.py")) - defining):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if isinstance(node, ast.alias):
                name = node.name
            if name in deprecated:
                users.append(f"{path.relative_to(package.parent)}:{node.lineno}: {name}")
    assert not users, "the package uses deprecated error names:\n" + "\n".join(users)
