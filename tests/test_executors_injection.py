"""Command injection into generated scripts (issue 23, points 1 and 5), generated: hostile strings ($(...),
backticks, ';', '&&', '|', newlines, quotes, spaces, globs, '~', '#') pushed through every string field of every
preset, through every script writer (render: the sbatch script, the TrainJob manifest, the torchrun line).

Each one is either refused with a Problem naming the field, or arrives as one literal word: the sbatch script is
checked by `bash -n` and then run by bash against stub `srun`/`scontrol` commands that record their arguments and
environment; nothing may run (the payload would create a marker file) and the value must be found whole in one
argument, one `#SBATCH` word (shlex) or the environment of srun. A manifest is parsed as YAML: its command is an
argument list (no shell), and the value must be one of its strings. The local torchrun line is parsed by shlex.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nemo_recipes.errors import InvalidRecipeError

pytestmark = pytest.mark.nemo

MARK = Path(os.environ.get("TMPDIR", "/tmp")) / f"nemo-recipes-injected-{os.getpid()}"
PAYLOADS = [
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f";touch {MARK}",
    f" ; touch {MARK}",
    f"&&touch {MARK}",
    f"|touch {MARK}",
    f"\ntouch {MARK}\n",
    f"' ; touch {MARK} ; '",
    f'" ; touch {MARK} ; "',
    f"${{IFS}}touch${{IFS}}{MARK}",
    " ",
    "*",
    "?",
    "[a]",
    "~",
    " #2",
    "\\",
    ",/x:/y",
]

# preset -> {field: a valid value}; list fields (mounts) take the hostile value as one item.
SLURM = {
    "account": "acct",
    "partition": "batch",
    "qos": "normal",
    "constraint": "h100",
    "mem": "0",
    "container_image": "nvcr.io/nvidia/nemo:25.09",
    "container_mounts": "/lustre/data:/data",
    "job_dir": "/lustre/jobs",
    "env": "value",
    "time": "04:00:00",
    "gpu": "h100",
}
KUBERNETES = {
    "image": "nvcr.io/nvidia/nemo:25.09",
    "namespace": "training",
    "runtime": "torch-distributed",
    "cpu": "16",
    "memory": "64Gi",
    "shm_size": "64Gi",
    "pvcs": "/data",
    "env": "value",
    "shared_home_pvc": "home",
    "gpu": "h100",
}
LOCAL = {"env": "value", "gpu": "h100"}
FIELDS = [(p, f) for p, fields in (("slurm", SLURM), ("kubernetes", KUBERNETES), ("local", LOCAL)) for f in fields]


def executor_for(preset: str, field: str, value: str):
    from nemo_recipes.executors import kubernetes, local, slurm

    base = {"slurm": SLURM, "kubernetes": KUBERNETES, "local": LOCAL}[preset]
    args = {k: v for k, v in base.items() if k not in ("env", "container_mounts", "pvcs")}
    args[field] = value
    if field == "env":
        args["env"] = {"NEMO_VALUE": value}
    if preset == "slurm":
        args["container_mounts"] = [value if field == "container_mounts" else base["container_mounts"]]
        return slurm(nodes=1, **args)
    if preset == "kubernetes":
        args["pvcs"] = {"datasets": value if field == "pvcs" else base["pvcs"]}
        return kubernetes(nodes=1, **args)
    return local(devices=8, **args)


@pytest.fixture(scope="module")
def recipe(kubeconfig_file):
    import nemo_recipes

    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig_file)
    stdin, sys.stdin = sys.stdin, open(os.devnull)  # NeMo-Run's invoke reads stdin
    yield nemo_recipes.gpt_7b()
    sys.stdin.close()
    sys.stdin = stdin
    if saved is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = saved


def run_sbatch_script(script: str, tmp: Path) -> tuple[list[list[str]], list[str]]:
    """`bash -n`, then the script run by bash with stub srun/scontrol: (argv of each srun, environment of srun)."""
    path = tmp / "job.sh"
    path.write_text(script)
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "srun").write_text(
        '#!/bin/bash\nprintf \'%s\\0\' "$@" >> "$STUB_OUT/argv"; printf \'\\n\\0\' >> "$STUB_OUT/argv"\n'
        'env -0 >> "$STUB_OUT/env"\n'
    )
    (stubs / "scontrol").write_text("#!/bin/bash\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "STUB_OUT": str(out), "HOME": str(tmp)}
    subprocess.run(["bash", str(path)], cwd=tmp, env=env, capture_output=True, timeout=30)
    argv_text = (out / "argv").read_text() if (out / "argv").exists() else ""
    calls = [[a for a in call.split("\0") if a] for call in argv_text.split("\n\0")]
    environment = (out / "env").read_text().split("\0") if (out / "env").exists() else []
    return calls, environment


def sbatch_words(script: str) -> list[str]:
    return [word for line in script.splitlines() if line.startswith("#SBATCH ") for word in shlex.split(line[8:])]


def check(recipe, preset: str, field: str, value: str, tmp: Path) -> None:
    from nemo_recipes.executors import RecipePlugin
    from nemo_recipes.executors.render import artifact

    MARK.unlink(missing_ok=True)
    try:
        executor = executor_for(preset, field, value)
    except InvalidRecipeError as error:
        named = [p for p in error.problems if p.field.split(".")[0] in (field, "env")]
        assert named and all(p.fix for p in named), str(error)
        return
    text = artifact(recipe, executor, name="gpt_7b", plugins=[RecipePlugin()])
    if preset == "slurm":
        calls, environment = run_sbatch_script(text, tmp)
        assert not MARK.exists(), f"{field}={value!r} ran a command:\n{text}"
        carried = [a for call in calls for a in call] + sbatch_words(text) + environment
        assert any(value in word for word in carried), f"{field}={value!r} was split or changed:\n{text}"
    elif preset == "kubernetes":
        manifest = yaml.safe_load(text)
        strings = list(_strings(manifest))
        assert any(value in s for s in strings), f"{field}={value!r} is not one string of the manifest"
        command = manifest["spec"]["trainer"]["command"]
        assert command[0] != "sh" and command[0] != "bash" and "-c" not in command
    else:
        words = shlex.split(text)
        assert words[0] == "torchrun" and executor.env_vars.get("NEMO_VALUE", value) == value


def _strings(data):
    if isinstance(data, dict):
        for key, value in data.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(data, list):
        for item in data:
            yield from _strings(item)
    elif isinstance(data, str):
        yield data


@st.composite
def hostile(draw) -> str:
    parts = draw(st.lists(st.sampled_from(PAYLOADS), min_size=1, max_size=3))
    keep_base = draw(st.booleans())
    return ("{base}" if keep_base else "") + "".join(parts)


@pytest.mark.slow  # about 60 s: each accepted value is rendered by NeMo-Run and its script run by bash
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(FIELDS), template=hostile())
@example(where=("slurm", "container_image"), template=f"nvcr.io/x:1 $(touch {MARK})")  # the examples
@example(where=("slurm", "container_mounts"), template=f"/data:/data;touch {MARK}")
@example(where=("slurm", "env"), template=f"{{base}}$(touch {MARK}) `touch {MARK}`\n';touch {MARK}'")
@example(where=("slurm", "constraint"), template="h100&a100|[b*2]")  # quoted in #SBATCH: kept whole
def test_a_hostile_value_is_refused_or_arrives_as_one_literal_word(recipe, tmp_path_factory, where, template):
    preset, field = where
    base = {"slurm": SLURM, "kubernetes": KUBERNETES, "local": LOCAL}[preset][field]
    value = template.replace("{base}", base)
    try:
        check(recipe, preset, field, value, tmp_path_factory.mktemp("job"))
    finally:
        assert not MARK.exists()


def test_every_valid_value_above_is_accepted_and_carried(recipe, tmp_path):
    """The oracle's other side: the base values pass, and are found where the check looks."""
    for preset, field in FIELDS:
        base = {"slurm": SLURM, "kubernetes": KUBERNETES, "local": LOCAL}[preset][field]
        executor_for(preset, field, base)
    check(recipe, "slurm", "container_mounts", "/lustre/data:/data", tmp_path)


@pytest.mark.parametrize(
    "item, field",
    [
        ("account=ci\n#SBATCH --wrap=id", "account"),  # YAML read it as 'ci'
        ("partition=batch #2", "partition"),  # YAML read it as 'batch'
        ("partition=batch\t2", "partition"),
        ("container_image=img:1 $(id)", "container_image"),
    ],
)
def test_launch_takes_executor_arguments_as_written_or_refuses_them(item, field):
    from _cli import cli

    result = cli("launch", "gpt_1_3b", "--executor", "slurm", "-E", "account=acct", "-E", item, "--dryrun")
    assert result.returncode == 2, result.stdout + result.stderr
    value = item.partition("=")[2]
    assert f"{field}={value!r}" in result.stderr and "Fix: " in result.stderr


@given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30))
@settings(max_examples=300, deadline=None)
def test_an_executor_argument_never_loses_a_character(text):
    """Taken as written (the exact text), read as a YAML number/boolean/null/flow list, or refused: never a YAML
    reading that drops a comment, quotes or what follows a newline."""
    from nemo_recipes.overrides import read_yaml_values

    try:
        value = read_yaml_values([f"k={text}"], field="executor-arg", flag="-E ", example="nodes=4")["k"]
    except InvalidRecipeError as error:
        assert any(ord(c) < 32 or ord(c) == 127 for c in text), str(error)
        assert error.problems[0].field == "k"
        return
    if isinstance(value, str):
        assert value == text
    else:
        assert "#" not in text
        if not isinstance(value, (list, dict)):
            assert (
                value is None
                or str(value).lower() in (text.strip().lower(), "true", "false")
                or float(text) == float(value)
            )
