"""Tier (b): our factories through NeMo's own CLI (`nemo llm pretrain --factory gpt_*`).

Each `nemo` process imports all of NeMo (~15-20 s here), so the dry runs of every recipe and the bad-input command
lines run in one process through NeMo-Run's own CLI application (tests/_nemo_cli.py says what that changes: the
process, nothing else); one dry run with a factory argument, and `--to-yaml`, go through the `nemo` executable itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from nemo_recipes.catalog import RECIPES, config_class_name  # noqa: E402

# One pytest-xdist worker for the module (scripts/test.sh: --dist loadgroup): its command lines run once.
pytestmark = [pytest.mark.nemo, pytest.mark.slow, pytest.mark.xdist_group("nemo_cli")]

NEMO = shutil.which("nemo") or str(Path(sys.executable).with_name("nemo"))
DRIVER = Path(__file__).with_name("_nemo_cli.py")

#: Factory calls the CLI must refuse -> (what the message must name, and say).
BAD_FACTORIES = {
    "gpt_13b(tensor_parallel=3)": ("tensor_parallel", "num_attention_heads"),
    "gpt_13b(micro_batch_sise=2)": ("micro_batch_sise", "did you mean 'micro_batch_size'?"),
    "gpt_13b(precision=fp9)": ("precision", "one of 'bf16', 'fp16', 'fp8'"),
    # Issue 13: a positional argument was taken as the name; "four" got NeMo-Run's nested "Failed to parse".
    "gpt_7b(4)": ("positional argument", "takes keyword arguments only"),
    "gpt_7b(num_nodes=four)": ("num_nodes='four'", "must be an integer. Fix: set num_nodes"),
    "gpt_7b(max_lr=inf)": ("max_lr=inf", "must be a finite number"),
}


#: NeMo's own factories whose names ours must not shadow (our rows are deepseek_v3_671b, ...): they still dry-run.
NEMOS_OWN = {"deepseek_v3": "DeepSeekV3Config"}


def _env(tmp: Path) -> dict[str, str]:
    # A wide terminal keeps rich from folding values; a private NeMo-Run home keeps the user's untouched.
    return {
        **os.environ,
        "COLUMNS": "250",
        "NEMORUN_HOME": str(tmp / "nemo_run"),
        "NO_COLOR": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def _dry_run(factory: str) -> list[str]:
    return ["llm", "pretrain", "--factory", factory, "--dryrun", "--yes"]


# Session scope: a worker may run other modules' tests between this module's, and a module fixture would then start
# the runs again (seen in CI: 144 s of set-up twice).
@pytest.fixture(scope="session")
def dry_runs(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """factory call -> (exit code, output) of `nemo llm pretrain --factory CALL --dryrun --yes`: every recipe and
    every bad call in one process, `gpt_70b(num_nodes=8)` through the `nemo` executable beside it."""
    tmp = tmp_path_factory.mktemp("dry")
    calls = [*RECIPES, *BAD_FACTORIES, *NEMOS_OWN]
    outside = "gpt_70b(num_nodes=8)"
    own = subprocess.Popen(
        [NEMO, *_dry_run(outside)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(tmp), cwd=tmp
    )
    together = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps([_dry_run(call) for call in calls])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(tmp),
        cwd=tmp,
        timeout=900,
    )
    found = {}
    for index, call in enumerate(calls):
        framed = re.search(rf"@@@ begin {index}\n(.*?)\n@@@ end {index} code=(\d+)", together.stdout, re.DOTALL)
        assert framed, f"no output framed for {call} (driver exit {together.returncode}):\n{together.stdout[-3000:]}"
        found[call] = (int(framed.group(2)), framed.group(1))
    found[outside] = (own.wait(timeout=600), own.stdout.read())
    return found


def _value(output: str, key: str) -> int:
    found = re.findall(rf"\b{key}=(\d+)", output)
    if len(found) != 1:
        raise AssertionError(f"{key} appears {len(found)} times in the dry run:\n{output}")
    return int(found[0])


@pytest.mark.parametrize("name", list(RECIPES))
def test_dry_run_through_nemo_cli_prints_the_table_values(dry_runs, name):
    code, output = dry_runs[name]
    assert code == 0, output
    assert "Dry run for pretrain" in output
    spec = RECIPES[name]
    assert _value(output, "tensor_model_parallel_size") == spec.tensor_parallel
    assert _value(output, "pipeline_model_parallel_size") == spec.pipeline_parallel
    assert _value(output, "micro_batch_size") == spec.micro_batch_size
    assert _value(output, "global_batch_size") == spec.global_batch_size
    assert _value(output, "num_nodes") == spec.num_nodes
    # GPTConfig70B, LlamaConfig70B: one class per row (DeepSeek-V3's prints the fields its class changes).
    assert f"config={config_class_name(spec)}(" in output
    # Mock data with a NullTokenizer: nothing to download.
    assert "NullTokenizer" in output


def test_the_deepseek_row_dry_runs_its_layout_and_nemos_own_factory_beside_it(dry_runs):
    code, output = dry_runs["deepseek_v3_671b"]
    assert code == 0, output
    assert _value(output, "expert_model_parallel_size") == 64
    assert _value(output, "num_layers_in_first_pipeline_stage") == 3
    assert _value(output, "num_layers_in_last_pipeline_stage") == 2
    for factory, config in NEMOS_OWN.items():
        code, output = dry_runs[factory]
        assert code == 0 and f"config={config}(" in output, output


def test_factory_arguments_on_the_command_line(dry_runs):
    code, output = dry_runs["gpt_70b(num_nodes=8)"]
    assert code == 0, output
    assert _value(output, "num_nodes") == 8


def test_to_yaml_round_trips(tmp_path):
    """`--to-yaml` writes every part; reading it back gives a Partial equal to the factory's. (NeMo-Run 0.11.1's
    own `--yaml` reader refuses the `_partial_` marker its `--to-yaml` writes, for NeMo's recipes too, so the file
    is read with nemo_recipes.training.serialization.load.)"""
    import nemo_recipes
    from nemo_recipes.training.serialization import load

    target = tmp_path / "gpt_7b.yaml"
    done = subprocess.run(
        [NEMO, "llm", "pretrain", "--factory", "gpt_7b(num_nodes=2)", "--to-yaml", str(target)],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = load(target)
    assert loaded == nemo_recipes.gpt_7b(num_nodes=2)
    assert loaded != nemo_recipes.gpt_7b()
    assert "tensor_model_parallel_size: 1" in target.read_text()


@pytest.mark.parametrize("factory", list(BAD_FACTORIES))
def test_bad_input_gets_one_clear_message(dry_runs, factory):
    code, output = dry_runs[factory]
    field, expected = BAD_FACTORIES[factory]
    assert code != 0
    assert field in output and expected in output, output
    assert "nemo_recipes/" not in output, f"a traceback through our code:\n{output}"
