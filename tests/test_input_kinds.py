"""Issue 13, one test per kind of bad input it found: each is refused with one message naming the field, the value
and the fix (exit 2; 1 for failures outside the user's input), never a traceback, and nothing wrong is accepted.
The generated cases are in test_input_properties.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import ENV, SCRIPT

from nemo_recipes import get_recipe
from nemo_recipes.cli.main import main
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan import Cluster, validate

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "pretrain_gpt.py"


@pytest.fixture
def cli_in_process(capsys):
    """`nemo-recipes ARGS` in this process: (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return code, out, err

    return run


def refused(error: pytest.ExceptionInfo, field: str) -> str:
    text = str(error.value)
    assert any(p.field == field for p in error.value.problems), text
    assert "Fix:" in text
    return text


# ---- 1. non-finite and unchecked numbers ----


@pytest.mark.parametrize(
    "override, field",
    [
        ("max_lr=inf", "max_lr"),
        ("clip_grad=inf", "clip_grad"),
        ("adam_eps=inf", "adam_eps"),
        ("weight_decay=nan", "weight_decay"),
        ("weight_decay=-0.1", "weight_decay"),
        ("seq_length=1e400", "seq_length"),
        ("global_batch_size=1e27", "global_batch_size"),
        ("warmup_tokens=1T", "warmup_tokens"),
        ("decay_tokens=400B", "decay_tokens"),
        ("warmup_tokens=270B", "warmup_tokens"),
        ("max_lr=2", "max_lr"),
        ("adam_eps=5", "adam_eps"),
        ("weight_decay=20000", "weight_decay"),
        ("num_layers=100000", "num_layers"),
        ("train_tokens=1e30", "train_tokens"),
        ("global_batch_size=100000000", "global_batch_size"),
        ("hidden_dropout=nan", "hidden_dropout"),
        ("checkpoint_every_minutes=inf", "checkpoint_every_minutes"),
    ],
)
def test_non_finite_huge_and_inconsistent_numbers_are_refused(cli_in_process, override, field):
    code, out, err = cli_in_process("show", "gpt_7b", override)
    assert code == 2 and out == ""
    assert f"{field}=" in err and "Fix:" in err


def test_numbers_that_overflow_a_float_are_refused_not_crashed_on(cli_in_process):
    code, _, err = cli_in_process("plan", "gpt_7b", "--tokens", "inf")
    assert code == 2 and "tokens='inf': is not a token count" in err
    with pytest.raises(InvalidRecipeError) as error:
        get_recipe("gpt_7b").replace(max_lr=10**400, num_layers=10**5000)
    text = refused(error, "max_lr")
    assert "<an integer of about 5001 digits>" in text  # Python cannot print it; the message still can


def test_weights_whose_sum_overflows_are_refused_not_planned_as_nan(cli_in_process):
    # Issue 33 (red team): each weight finite, the sum infinite; plan failed on NaN shares.
    for verb in ("show", "plan"):
        code, _, err = cli_in_process(verb, "gpt_7b", "data_paths=[/d/a,/d/b]", "data_weights=[1e308,1e308]")
        assert code == 2 and "data_weights=" in err and "overflows" in err, err


@pytest.mark.parametrize("field", ["tokenizer_path", "data_paths"])
def test_a_path_the_system_refuses_to_look_up_is_named_not_crashed_on(cli_in_process, field):
    # Issue 33 (red team): a 100,000-character path made plan fail with OSError (File name too long).
    path = "a" * 100_000
    argument = f"{field}={path}" if field == "tokenizer_path" else f"{field}=[{path}]"
    code, out, err = cli_in_process("plan", "gpt_7b", argument)
    text = out + err
    assert code == 2 and f"{field}=" in text and "cannot be read" in text and "100,000 characters" in text, text[:2000]
    assert "internal error" not in text


def test_a_step_larger_than_the_run_names_the_batch_that_fits():
    with pytest.raises(InvalidRecipeError) as error:
        get_recipe("gpt_7b").replace(global_batch_size=2**24, seq_length=2**15)
    assert "holds more than the whole run" in refused(error, "global_batch_size")


# ---- 2. rules Megatron enforces at run time ----


def test_sequence_parallelism_needs_the_sequence_divisible_by_tp(cli_in_process):
    code, out, _ = cli_in_process("plan", "gpt_70b", "seq_length=4095", "--json")
    data = json.loads(out)
    assert code == 2 and data["valid"] is False
    problem = next(p for p in data["problems"] if p["field"] == "seq_length")
    assert problem["value"] == 4095 and "tensor_parallel=8" in problem["message"] and "multiple of 8" in problem["fix"]
    assert validate(get_recipe("gpt_70b").replace(seq_length=4095, sequence_parallel=False), Cluster.of(4, 8)).valid
    cp = validate(
        get_recipe("gpt_13b").replace(tensor_parallel=4, context_parallel=2, seq_length=4100), Cluster.of(1, 8)
    )
    assert [p.field for p in cp.errors] == ["seq_length"]  # 4100 / CP 2 = 2050 tokens, not divisible by TP 4


# ---- 3. overrides lost or silently resolved ----


def test_cluster_overrides_are_the_planned_cluster(cli_in_process):
    code, out, _ = cli_in_process("plan", "gpt_7b", "num_nodes=4", "num_gpus_per_node=4", "--json")
    assert code == 0
    assert json.loads(out)["cluster"] == {"nodes": 4, "gpus_per_node": 4, "gpu": "h100-80gb", "world_size": 16}


@pytest.mark.parametrize(
    "argv, field",
    [
        (("plan", "gpt_7b", "--tp", "8", "tensor_parallel=2"), "tensor_parallel"),
        (("plan", "gpt_7b", "--nodes", "2", "num_nodes=4"), "num_nodes"),
        (("show", "gpt_7b", "tensor_parallel=2", "tensor_parallel=4"), "tensor_parallel"),
    ],
)
def test_a_field_given_twice_with_two_values_is_refused(cli_in_process, argv, field):
    code, _, err = cli_in_process(*argv)
    assert code == 2 and f"{field}=" in err and "is given twice" in err and "Fix: give " in err


def test_the_example_refuses_flags_its_executor_does_not_take():
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import pretrain_gpt
    finally:
        sys.path.pop(0)
    with pytest.raises(InvalidRecipeError) as error:
        pretrain_gpt.executor_arguments(
            pretrain_gpt.parse_args(["--executor", "slurm", "--account", "a", "--devices", "8"])
        )
    assert "does not apply to the slurm executor" in refused(error, "--devices")


@pytest.mark.nemo
def test_a_positional_factory_argument_is_refused_not_taken_as_the_name():
    import fiddle as fdl
    from nemo_run.cli.cli_parser import parse_cli_args

    import nemo_recipes

    with pytest.raises(InvalidRecipeError) as error:
        nemo_recipes.gpt_7b(4)
    assert "takes keyword arguments only" in refused(error, "positional argument")
    with pytest.raises(InvalidRecipeError) as error:  # `nemo llm pretrain --factory "gpt_7b(4)"`
        fdl.build(parse_cli_args(nemo_recipes.gpt_7b, ["4"]))()
    refused(error, "positional argument")


# ---- 4. cluster profiles ----


@pytest.mark.parametrize(
    "text, field, words",
    [
        ("a:\n  preset: local\na:\n  preset: slurm\n  account: x\n", "clusters", "has 'a' twice (lines 1 and 3)"),
        ("slurm:\n  preset: slurm\n  account: x\n", "profile", "has the name of a preset"),
        (b"a:\n  preset: local\n  gpu: h\xff100\n", "clusters", "is not UTF-8 text"),
        ("a:\n  preset: local\n  devices: 2\n  devices: 4\n", "clusters", "has 'devices' twice"),
    ],
)
def test_profile_files_that_yaml_would_resolve_silently_are_refused(tmp_path, text, field, words):
    from nemo_recipes.executors.profiles import load_profiles

    path = tmp_path / "clusters.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InvalidRecipeError) as error:
        load_profiles(path)
    assert words in refused(error, field)


@pytest.mark.parametrize("preset", ["local", "slurm", "kubernetes"])
def test_a_profile_named_like_the_preset_asked_for_is_refused_not_passed_over(preset, tmp_path, monkeypatch):
    """`--executor slurm` always means the preset; a `slurm:` profile in the file (given, or the default file)
    would never apply, and its settings would be dropped without a word."""
    from nemo_recipes.executors.profiles import ENV_VAR, executor_for

    path = tmp_path / "clusters.yaml"
    path.write_text(f"{preset}:\n  preset: local\n  devices: 2\n")
    for given in (path, None):
        monkeypatch.setenv(ENV_VAR, str(path))
        with pytest.raises(InvalidRecipeError) as error:
            executor_for(preset, given)
        assert f"rename the profile (e.g. my_{preset})" in refused(error, "profile")
    other = next(p for p in ("local", "slurm") if p != preset)
    path.write_text(f"{other}_mine:\n  preset: local\n")  # a profile of another name shadows nothing
    assert executor_for("local", path)[0] is not None


def test_a_newline_in_a_slurm_value_is_refused_before_it_breaks_the_header(tmp_path):
    from nemo_recipes.executors.profiles import executor_for

    path = tmp_path / "clusters.yaml"
    path.write_text('eos:\n  preset: slurm\n  account: "proj\\n#SBATCH --qos=high"\n  partition: batch\n')
    with pytest.raises(InvalidRecipeError) as error:
        executor_for("eos", path)
    assert "newline" in refused(error, "account")
    with pytest.raises(InvalidRecipeError) as error:
        executor_for("slurm", account="a", time="04:00:00\n")
    refused(error, "time")


# ---- 5. safety checks that were skipped ----


def test_names_that_would_write_outside_their_directory_are_refused(cli_in_process, tmp_path):
    code, _, err = cli_in_process("launch", "gpt_1_3b", "--executor", "local", "--name", "../../x", "--dryrun")
    assert code == 2 and "name='../../x': must be a plain name" in err
    code, _, err = cli_in_process("export", "gpt_1_3b", "--name", "a/b", "-o", str(tmp_path / "x.yaml"))
    assert code == 2 and "name='a/b'" in err and list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidRecipeError):
        get_recipe("gpt_7b").replace(name="..")


def test_a_name_too_long_for_a_file_name_is_refused_before_nemo_run_makes_its_directory(cli_in_process):
    # Issue 33 (red team): a 300-character --name reached NeMo-Run, which failed on "File name too long".
    for argv in (("launch", "gpt_7b", "--executor", "local", "--dryrun"), ("export", "gpt_7b")):
        code, _, err = cli_in_process(*argv, "--name", "n" * 300)
        assert code == 2 and "name=" in err and "longer than 128 bytes" in err and "redacted" not in err, err
    assert cli_in_process("show", "gpt_7b", f"name={'n' * 128}")[0] == 0


def test_a_missing_slurm_account_is_a_message_not_a_type_error():
    from nemo_recipes.executors.profiles import executor_for

    with pytest.raises(InvalidRecipeError) as error:
        executor_for("slurm", nodes=2)
    assert "is required by the slurm preset" in refused(error, "account")


@pytest.mark.nemo
@pytest.mark.slow
def test_a_nemo_dry_run_with_the_recipe_plugin_refuses_what_the_submission_refuses(tmp_path):
    env = {**ENV, "NEMORUN_HOME": str(tmp_path / "nemo_run"), "COLUMNS": "200"}
    nemo = str(Path(sys.executable).with_name("nemo"))
    done = subprocess.run(
        [
            nemo,
            "llm",
            "pretrain",
            "--factory",
            "gpt_70b",
            "run.executor=local",
            "run.plugins=recipe_plugin",
            "--dryrun",
            "--yes",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "not submitted" in output and "world_size=1" in output


# ---- 6. tracebacks instead of messages ----


def test_closed_full_and_ascii_outputs_get_a_message(tmp_path):
    closed = subprocess.run(
        [SCRIPT, "ls"],
        capture_output=False,
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=lambda: os.close(1),
    )
    assert closed.returncode == 1
    assert closed.stderr == "nemo-recipes ls: error: cannot write to standard output: it is closed\n"
    with open("/dev/full", "w") as full:
        done = subprocess.run([SCRIPT, "show", "gpt_7b"], stdout=full, stderr=subprocess.PIPE, text=True, env=ENV)
    assert done.returncode == 1
    assert done.stderr == "nemo-recipes show: error: cannot write to standard output: No space left on device\n"
    ascii_out = subprocess.run(
        [SCRIPT, "show", "gpt_7b", "tokenizer_path=tok\u00e9"],
        capture_output=True,
        env={**ENV, "PYTHONIOENCODING": "ascii"},
    )
    assert ascii_out.returncode == 0 and b"tok\\xe9" in ascii_out.stdout and ascii_out.stderr == b""


@pytest.mark.parametrize(
    "raw",
    [
        "\u00fc\u65e5\u672c".encode(),  # UTF-8 text that a C locale cannot decode
        b"caf\xe9",  # Latin-1: undecodable in any UTF-8 reading too
        b"a\xff\xfeb",  # bytes that are no text at all
    ],
)
def test_undecodable_arguments_are_written_back_as_their_bytes(raw):
    """In a C locale without UTF-8 mode Python holds undecodable argument bytes as lone surrogates; every stream we
    write (the report on stdout, an error on stderr) gives those bytes back unchanged, as plain Python does."""
    env = {**ENV, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env.pop("PYTHONIOENCODING", None)
    plain = subprocess.run([sys.executable, "-c", "import sys; print(sys.argv[1])", raw], capture_output=True, env=env)
    assert plain.stdout == raw + b"\n"  # what the issue compares with
    report = subprocess.run([SCRIPT, "plan", "gpt_7b", b"name=" + raw], capture_output=True, env=env)
    assert report.returncode == 0 and report.stdout.startswith(raw + b" on 1 x 8 "), report.stdout[:80]
    assert b"\\udc" not in report.stdout
    error = subprocess.run([SCRIPT, "plan", raw], capture_output=True, env=env)
    assert error.returncode == 2 and b"\\udc" not in error.stderr
    # A character the encoding lacks (not an undecodable byte) still becomes an escape, never an exception.
    ascii_env = {**ENV, "PYTHONIOENCODING": "ascii"}
    escaped = subprocess.run([SCRIPT, "plan", "gpt_7b", "name=\u65e5"], capture_output=True, env=ascii_env)
    assert escaped.returncode == 0 and escaped.stdout.startswith(b"\\u65e5 on 1 x 8 ")


def test_debug_shows_the_traceback_and_keeps_the_exit_code(capsys):
    assert main(["--debug", "show", "gpt70b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith(
        "Fix: use one of: gpt_1_3b, gpt_7b, gpt_13b, gpt_70b, gpt_175b, llama_8b, llama_70b, llama_405b, "
        "qwen3_dense_8b, qwen3_dense_32b, mixtral_moe_8x7b, mixtral_moe_8x22b, "
        "qwen3_moe_30b_a3b, qwen3_moe_235b_a22b.\n"
    )


def test_an_unexpected_error_is_one_message_with_exit_1(cli_in_process, monkeypatch):
    from nemo_recipes.cli import show

    monkeypatch.setattr(show, "render", lambda *a, **k: 1 / 0)
    code, _, err = cli_in_process("show", "gpt_7b")
    assert code == 1
    assert err.startswith(
        "nemo-recipes show: error: internal error (ZeroDivisionError: division by zero); this is "
        "a bug: run again with --debug or NEMO_RECIPES_DEBUG=1"
    )


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: get_recipe(None), "recipe"),
        (lambda: __import__("nemo_recipes").closest_recipe("big"), "num_parameters"),
        (lambda: __import__("nemo_recipes").closest_recipe(math.inf), "num_parameters"),
        (lambda: validate("gpt_7b", Cluster.of(1, 8)), "spec"),
        (lambda: validate(get_recipe("gpt_7b"), (1, 8)), "cluster"),
        (lambda: Cluster.of(10**9, 8), "nodes"),
        (
            lambda: __import__("nemo_recipes.plan", fromlist=["GPU"]).GPU(
                name="x",
                memory_gib=math.nan,
                bf16_tflops=1,
                fp8_tflops=None,
                hbm_tb_s=1,
                nvlink_gb_s=1,
                network_gb_s=1,
                nvlink_domain=8,
            ),
            "memory_gib",
        ),
    ],
)
def test_wrong_types_in_the_python_api_are_problems(call, field):
    with pytest.raises(InvalidRecipeError) as error:
        call()
    refused(error, field)


def test_malformed_kubeconfig_is_a_message_that_never_echoes_it(tmp_path, monkeypatch):
    from nemo_recipes.executors.kubernetes_executor.preset import kubernetes

    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nclusters: [oops\nusers: [{name: u, user: {token: sk-live-TOKEN-1234567890}}]\n")
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(InvalidRecipeError) as error:
        kubernetes(nodes=1)
    text = refused(error, "kubeconfig")
    assert "line 3" in text and "TOKEN" not in text
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(InvalidRecipeError) as error:
        kubernetes(nodes=1)
    refused(error, "kubeconfig")


def test_unknown_executor_arguments_and_malformed_items_get_did_you_mean(cli_in_process):
    code, _, err = cli_in_process("launch", "gpt_1_3b", "--executor", "local", "-E", "devices", "--dryrun")
    assert code == 2 and "executor-arg='devices': is not of the form key=value. Fix: write it as -E key=value" in err
    from nemo_recipes.executors.profiles import executor_for

    with pytest.raises(InvalidRecipeError) as error:
        executor_for("local", devicez=2)
    assert "did you mean 'devices'" in refused(error, "devicez")


def test_the_example_answers_bad_set_items_and_unknown_recipes_in_one_message(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--recipe",
            "gpt_8b",
            "--set",
            "tensor_parallel",
            "--executor",
            "local",
            "--name",
            "../x",
            "--dryrun",
        ],
        capture_output=True,
        text=True,
        env={**ENV, "NEMORUN_HOME": str(tmp_path)},
        timeout=600,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for words in ("name='../x'", "recipe='gpt_8b': unknown recipe (did you mean", "override='tensor_parallel'"):
        assert words in done.stderr


# ---- 7. JSON whose shape changed on error ----


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "gpt_175b", "--nodes", "1", "--fit"),
        ("plan", "gpt70b"),
        ("plan", "gpt_7b", "--nodes", "x"),
        ("plan", "gpt_7b", "max_lr=inf"),
        ("plan", "gpt_7b", "recompute=selective"),
    ],
    ids=["impossible-fit", "catalog", "usage", "value", "invalid-plan"],
)
def test_every_plan_json_answer_has_the_plan_keys(cli_in_process, argv):
    code, out, _ = cli_in_process(*argv, "--json")
    data = json.loads(out)
    assert code == 2
    assert data["valid"] is False and data["problems"] is not None and "memory_gib" in data


def test_an_unreadable_file_to_diff_is_a_message(cli_in_process, tmp_path, monkeypatch):
    from nemo_recipes import yaml_files

    path = tmp_path / "mine.yaml"
    path.write_text("a: 1\n")

    def unreadable(*args, **kwargs):  # as chmod 0 would be, for any user (root reads everything)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(yaml_files, "open", unreadable, raising=False)  # the one reader of every file we are given
    code, _, err = cli_in_process("diff", "gpt_7b", str(path))
    assert code == 2 and "cannot be read: Permission denied" in err


@pytest.mark.nemo
def test_a_job_the_scheduler_refuses_is_one_message_in_the_example(monkeypatch, capsys, tmp_path):
    """An unknown partition is known only to the scheduler: sbatch refuses it when NeMo-Run submits."""
    import nemo_run

    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import pretrain_gpt
    finally:
        sys.path.pop(0)

    def refuse(self, *args, **kwargs):
        raise RuntimeError("sbatch: error: invalid partition specified: nope")

    monkeypatch.setattr(nemo_run.Experiment, "run", refuse)
    monkeypatch.chdir(tmp_path)
    assert pretrain_gpt.main(["--recipe", "gpt_1_3b", "--executor", "local", "--devices", "8"]) == 1
    err = capsys.readouterr().err
    assert "the job was not submitted: RuntimeError: sbatch: error: invalid partition specified: nope" in err
    assert "Fix: check the account, partition" in err and "Traceback" not in err
