"""`export`, `diff` against an exported file, and `launch --dryrun`: the verbs that import NeMo (about 20-25 s per
subprocess on a 2-core machine, so few of them). Input errors are caught before NeMo is imported, and are fast."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest
from _cli import ENV, cli

from nemo_recipes.catalog import RECIPES

# ---- fast: refused before NeMo is imported ----


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("gpt_70b", "-o", "out.txt"),
            "nemo-recipes export: error: output='out.txt': has no known extension (.txt). "
            "Fix: end it in .yaml, .json or .toml, or give --format.\n",
        ),
        (
            ("gpt_70b", "--format", "json", "-o", "out.yaml"),
            "nemo-recipes export: error: format='json': disagrees with the extension of 'out.yaml'. "
            "Fix: use --format yaml or name the file *.json.\n",
        ),
        (
            ("gpt_70", "-o", "out.yaml"),
            "nemo-recipes export: error: recipe='gpt_70': unknown recipe (did you mean 'gpt_70b'?). "
            f"Fix: use one of: {', '.join(RECIPES)}.\n",
        ),
    ],
    ids=["extension", "format-mismatch", "recipe"],
)
def test_export_input_errors(args, message, tmp_path):
    result = cli("export", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == message
    assert list(tmp_path.iterdir()) == []


def test_an_output_whose_directory_is_missing_is_refused_before_nemo(tmp_path):
    """Exit 2 with field, value and fix (before: NeMo imported for seconds, then exit 1 without a fix)."""
    for output in ("missing/out.yaml", "a-file/out.yaml"):
        (tmp_path / "a-file").write_text("a file, not a directory")
        result = cli("export", "gpt_70b", "-o", output, cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        folder = tmp_path / output.split("/")[0]
        assert result.stderr == (
            f"nemo-recipes export: error: output={output!r}: cannot be written ({folder} is not a directory). "
            "Fix: give -o a file in a directory you can write.\n"
        )


def test_launch_needs_an_executor():
    result = cli("launch", "gpt_1_3b", "--dryrun")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "nemo-recipes launch: error: the following arguments are required: --executor"
    )


# ---- with NeMo ----


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """gpt_1_3b with num_nodes=2, exported once as YAML by the CLI (shared by the tests below)."""
    folder = tmp_path_factory.mktemp("export")
    path = folder / "gpt_1_3b.yaml"
    result = cli("export", "gpt_1_3b", "num_nodes=2", "-o", str(path), "--json", timeout=300)
    return path, result


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo") is None, reason="needs NeMo")
def test_export_writes_a_checked_nemo_run_file(exported):
    path, result = exported
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {
        "recipe": "gpt_1_3b",
        "format": "yaml",
        "output": str(path),
        "bytes": path.stat().st_size,
        "overrides": {"num_nodes": 2},
        "round_trip": True,
    }
    text = path.read_text()
    assert text.startswith("_partial_: true\n_target_: nemo.collections.llm.api.pretrain\n")
    assert "  num_nodes: 2\n" in text


ROUND_TRIP = textwrap.dedent("""
    import sys, tempfile, os
    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.training.factories import build_recipe
    from nemo_recipes.cli.export import load, serialize
    expected = build_recipe(get_recipe("gpt_1_3b").replace(num_nodes=2), name="gpt_1_3b")
    results = {"cli_yaml": load(sys.argv[1]) == expected}
    folder = tempfile.mkdtemp()
    for fmt in ("json", "toml"):
        path = os.path.join(folder, "recipe." + fmt)
        with open(path, "w") as handle:
            handle.write(serialize(expected, fmt))
        results[fmt] = load(path) == expected
    # The comparison can fail: a recipe that differs in one value is not equal.
    results["control"] = load(sys.argv[1]) == build_recipe(get_recipe("gpt_1_3b"), name="gpt_1_3b")
    # Every recipe, as `nemo-recipes export NAME` checks it (the interleaved ones once shared one tokenizer object
    # between model and data, which a file cannot say: they did not load back equal).
    from nemo_recipes.catalog import recipe_names
    failing = []
    for name in recipe_names():
        built = build_recipe(get_recipe(name), name=name)
        path = os.path.join(folder, name + ".yaml")
        with open(path, "w") as handle:
            handle.write(serialize(built, "yaml"))
        if load(path) != built:
            failing.append(name)
    results["failing"] = failing
    print("RESULT", results)
""")


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo") is None, reason="needs NeMo")
def test_exported_files_load_back_equal_in_every_format(exported):
    path, result = exported
    assert result.returncode == 0
    run = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(path)], capture_output=True, text=True, timeout=300, env=ENV
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = [l for l in run.stdout.splitlines() if l.startswith("RESULT ")][-1]
    assert line == "RESULT {'cli_yaml': True, 'json': True, 'toml': True, 'control': False, 'failing': []}"


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo") is None, reason="needs NeMo")
def test_diff_of_a_recipe_and_its_exported_override_shows_only_the_override(exported):
    path, _ = exported
    result = cli("diff", "gpt_1_3b", str(path), "--json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert data["kind"] == "config"
    assert data["differences"] == [{"key": "trainer.num_nodes", "a": 1, "b": 2, "derived": False}]


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo_run") is None, reason="needs NeMo-Run")
def test_launch_dryrun_hands_recipe_executor_and_plugin_to_nemo_run(tmp_path):
    result = cli(
        "launch",
        "gpt_1_3b",
        "--executor",
        "local",
        "-E",
        "devices=8",
        "--dryrun",
        "--json",
        timeout=300,
        cwd=tmp_path,
        NEMORUN_HOME=str(tmp_path / "nemo_run"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert {k: v for k, v in data.items() if k != "experiment_id"} == {
        "recipe": "gpt_1_3b",
        "executor": "local",
        "executor_class": "LocalExecutor",
        "gpu": None,
        "nodes": 1,
        "devices": 8,
        "dryrun": True,
        "overrides": {},
        "slurm": None,
        "job": None,
    }  # slurm: the job's Slurm state, Slurm only; job: NeMo-Run's state of a job that ran (none in a dry run)
    assert data["experiment_id"].startswith("gpt_1_3b_")
    assert "torchrun" in result.stderr  # NeMo-Run's dry run shows the command it would start


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo_run") is None, reason="needs NeMo-Run")
def test_launch_validates_the_recipe_once_on_the_executors_cluster(tmp_path):
    # Issue 33: PP 8 fits the executor's 8 nodes (64 GPUs); the recipe was refused for the row's own 4 nodes.
    result = cli(
        "launch", "gpt_70b", "--executor", "slurm", "-E", "nodes=8", "-E", "account=a", "-E", "partition=p",
        "pipeline_parallel=8", "--dryrun",
        timeout=300, cwd=tmp_path, NEMORUN_HOME=str(tmp_path / "nemo_run"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "#SBATCH --nodes=8" in result.stdout + result.stderr


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo_run") is None, reason="needs NeMo-Run")
def test_launch_refuses_a_plan_the_executor_cannot_hold(tmp_path):
    result = cli(
        "launch",
        "gpt_70b",
        "--executor",
        "local",
        "--dryrun",
        timeout=300,
        cwd=tmp_path,
        NEMORUN_HOME=str(tmp_path / "nemo_run"),
    )
    assert result.returncode == 2
    assert "not submitted" in result.stderr
    assert (
        "error: world_size=1: 1 GPUs (1 node(s) x 1) are not divisible by TP x PP x CP = 8 x 4 x 1 = 32"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nemo_run") is None, reason="needs NeMo-Run")
def test_a_local_job_that_fails_exits_1_with_its_state_and_log(tmp_path):
    """A real local job whose command fails at once (the job's Python cannot start: PYTHONHOME names nothing):
    NeMo-Run says FAILED, and so must the exit status, with the log that holds the reason."""
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text("broken:\n  preset: local\n  env:\n    PYTHONHOME: /nonexistent\n")
    result = cli(
        "launch",
        "gpt_1_3b",
        "--executor",
        "broken",
        "--clusters",
        str(clusters),
        "--json",
        timeout=300,
        cwd=tmp_path,
        NEMORUN_HOME=str(tmp_path / "nemo_run"),
    )
    assert result.returncode == 1, result.stderr[-3000:]
    job = json.loads(result.stdout)["job"]
    assert job["state"] == "FAILED" and len(job["logs"]) == 1
    log = job["logs"][0]
    assert log.startswith(str(tmp_path / "nemo_run" / "experiments" / "gpt_1_3b")) and log.endswith("combined.log")
    assert "/nonexistent" in open(log).read()  # the job's own words on why it failed
    assert f"job gpt_1_3b of experiment {json.loads(result.stdout)['experiment_id']}: FAILED\nlogs: {log}\n" in (
        result.stderr
    )
    # `watch` finds the job's log through NEMORUN_HOME by the experiment's id and by its title, and refuses it as
    # it would the log itself: the job died before NeMo printed a step.
    home = str(tmp_path / "nemo_run")
    for target in (json.loads(result.stdout)["experiment_id"], "gpt_1_3b"):
        watched = cli("watch", target, "--json", NEMORUN_HOME=home)
        assert watched.returncode == 2, watched.stderr
        (problem,) = json.loads(watched.stdout)["problems"]
        assert problem["value"] == log and problem["message"].startswith("holds no NeMo progress line")
    # The recipe the plugin validated is recorded beside the job's files and read back by `watch` (no NeMo): the
    # recipe as launched on this executor (its 1 GPU), for tokens/s, TFLOP/s and the plan.
    from nemo_recipes.catalog import RECIPES
    from nemo_recipes.executors.plugin import RECIPES_RECORD, recipes_record
    from nemo_recipes.watching import experiments
    from nemo_recipes.watching.sources import spec_of

    assert RECIPES_RECORD == experiments.RECIPES_RECORD
    (directory,) = [d for d in (tmp_path / "nemo_run" / "experiments" / "gpt_1_3b").iterdir() if d.is_dir()]
    assert recipes_record(directory).is_file() and list(experiments.recorded_recipes(directory)) == ["gpt_1_3b"]
    assert spec_of(directory) == RECIPES["gpt_1_3b"].replace(num_nodes=1, num_gpus_per_node=1)
    # An experiment NeMo-Run never ran: field, value and fix, naming where experiments were looked for.
    unknown = cli("watch", "gpt_1_3b_1", "--json", NEMORUN_HOME=home)
    assert unknown.returncode == 2, unknown.stderr
    (problem,) = json.loads(unknown.stdout)["problems"]
    assert problem["field"] == "run" and problem["value"] == "gpt_1_3b_1"
    assert f"NeMo-Run experiment in {home}/experiments" in problem["message"] and "launch" in problem["fix"]
