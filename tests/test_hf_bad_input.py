"""`hf export` and `hf import` given what they cannot convert, one case per test: exit 2 with the field, its value
and the fix, and nothing written, not even a partial directory; a disk that fills exits 1 (not the user's input)
and leaves nothing either. The checkpoint is a real one written without training: `hf import` of a tiny GPT-2
model, exported with the recipe and the shape fields the import printed (what `--recipe` takes for a job's
checkpoint); the --force case shows that the undamaged checkpoint exports, so each refusal is its damage's."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _cli import ENV, SCRIPT, cli

pytestmark = [pytest.mark.nemo]

GPT2 = dict(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new")
#: The file size limit of the disk-full tests (KiB): the tiny model's weights take ~400 KiB.
FULL_KIB = 64


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(a Hugging Face model directory, its import as a checkpoint, the recipe and fields that export it)."""
    torch = pytest.importorskip("torch")
    from transformers import GPT2Config, GPT2LMHeadModel

    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.conversion.hf_import import import_hf

    root = tmp_path_factory.mktemp("bad-input")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(**GPT2)).to(torch.bfloat16).save_pretrained(root / "hf")
    report = import_hf(str(root / "hf"), get_recipe("gpt_1_3b"), str(root / "ckpt"))
    fields = [f"{k}={v}" for k, v in report.overrides.items()]
    return root / "hf", root / "ckpt", ["--recipe", "gpt_1_3b", *fields]


def _refused(tmp_path: Path, verb: str, *args: str, out: Path) -> str:
    result = cli("hf", verb, *args, "--out", str(out), timeout=300)
    assert result.returncode == 2, result.stderr
    assert "Fix:" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not list(tmp_path.glob("**/.*.partial-*"))  # nothing half-written
    return result.stderr


def _nothing_at(out: Path) -> None:
    assert not out.exists(), list(out.iterdir())


def _copy(ckpt: Path, tmp_path: Path) -> Path:
    shutil.copytree(ckpt, tmp_path / "ckpt")
    return tmp_path / "ckpt"


# --- export --------------------------------------------------------------------------------------------------------


def test_export_of_a_directory_that_is_not_a_checkpoint_is_refused(made, tmp_path):
    _, _, recipe = made
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no checkpoint here")
    error = _refused(tmp_path, "export", str(tmp_path / "notes"), *recipe, out=tmp_path / "hf")
    assert f"CHECKPOINT={str(tmp_path / 'notes')!r}" in error and "holds no Megatron checkpoint" in error
    _nothing_at(tmp_path / "hf")


def test_export_with_another_recipes_shape_is_refused_tensor_by_tensor(made, tmp_path):
    _, ckpt, _ = made
    error = _refused(tmp_path, "export", str(ckpt), "--recipe", "gpt_1_3b", out=tmp_path / "hf")
    assert "decoder.layers.self_attention.linear_qkv.weight=[2, 192, 64]" in error and "[24, 6144, 2048]" in error
    assert "export with the recipe (and overrides) the checkpoint was trained with" in error
    _nothing_at(tmp_path / "hf")


def test_export_of_a_checkpoint_whose_save_did_not_finish_is_refused(made, tmp_path):
    """A save killed before its index was written: the data files without `.metadata`."""
    _, ckpt, recipe = made
    weights = _copy(ckpt, tmp_path) / "weights"
    (weights / ".metadata").unlink()
    error = _refused(tmp_path, "export", str(weights.parent), *recipe, out=tmp_path / "hf")
    assert f"CHECKPOINT={str(weights)!r}" in error and "has no index (.metadata): the save did not finish" in error
    _nothing_at(tmp_path / "hf")


def test_export_of_a_checkpoint_with_a_file_cut_short_is_refused(made, tmp_path):
    _, ckpt, recipe = made
    weights = _copy(ckpt, tmp_path) / "weights"
    part = sorted(weights.glob("*.distcp"))[0]
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    error = _refused(tmp_path, "export", str(weights.parent), *recipe, out=tmp_path / "hf")
    assert f"CHECKPOINT={str(part)!r}" in error and "torn or truncated" in error
    _nothing_at(tmp_path / "hf")


def test_export_of_a_checkpoint_whose_index_would_run_code_is_refused_and_runs_nothing(made, tmp_path):
    """Issue 47: the index is a pickle; one that names a callable no index holds is refused before it is called."""
    from _pickles import plant_index

    _, ckpt, recipe = made
    weights = _copy(ckpt, tmp_path) / "weights"
    index = plant_index(weights, tmp_path / "ran", "pathlib.Path.touch")
    error = _refused(tmp_path, "export", str(weights.parent), *recipe, out=tmp_path / "hf")
    assert f"CHECKPOINT={str(index)!r}" in error and "names pathlib.Path.touch, which no checkpoint holds" in error
    assert not (tmp_path / "ran").exists()
    _nothing_at(tmp_path / "hf")


def test_export_of_a_checkpoint_whose_tensor_would_run_code_is_refused_and_runs_nothing(made, tmp_path):
    """The tensors are read by torch's weights-only loader, which refuses a pickle that runs code: said as a refusal
    of the checkpoint (in-process: the CLI's exit 2 for the same error is the test above)."""
    from _pickles import plant_tensor

    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.conversion.hf_export import export_hf
    from nemo_recipes.errors import InvalidConfigError

    _, ckpt, _ = made
    weights = _copy(ckpt, tmp_path) / "weights"
    part = plant_tensor(weights, tmp_path / "ran", "builtins.exec")
    overrides = json.loads((ckpt / "hf_import.json").read_text())["overrides"]  # the shape `recipe` gives
    spec = get_recipe("gpt_1_3b").replace(**overrides)
    with pytest.raises(InvalidConfigError) as refused:
        export_hf(str(weights.parent), str(tmp_path / "hf"), spec)
    [problem] = refused.value.problems
    assert problem.value == str(part) and "(names exec, which no tensor holds)" in problem.message
    assert not (tmp_path / "ran").exists()
    _nothing_at(tmp_path / "hf")


def test_export_into_a_directory_that_is_not_empty_is_refused_unless_forced(made, tmp_path):
    _, ckpt, recipe = made
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    error = _refused(tmp_path, "export", str(ckpt), *recipe, out=out)
    assert f"--out={str(out)!r}" in error and "exists and is not empty" in error and "--force" in error
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    result = cli("hf", "export", str(ckpt), *recipe, "--out", str(out), "--force", timeout=300)
    assert result.returncode == 0, result.stderr
    assert not (out / "notes.txt").exists() and (out / "config.json").is_file()
    assert not list(tmp_path.glob(".*.lock"))  # the lock beside --out goes with the export that held it


def _on_a_full_disk(*args: str) -> subprocess.CompletedProcess:
    """The command with files limited to FULL_KIB (ulimit -f, SIGXFSZ ignored: each write past the limit fails with
    EFBIG, as a write to a full disk fails with ENOSPC)."""
    return subprocess.run(
        ["bash", "-c", f'trap "" XFSZ; ulimit -f {FULL_KIB}; exec "$@"', "bash", SCRIPT, *args],
        capture_output=True, text=True, timeout=300, env=ENV,
    )  # fmt: skip


def test_export_onto_a_disk_that_fills_leaves_nothing(made, tmp_path):
    _, ckpt, recipe = made
    out = tmp_path / "hf"
    result = _on_a_full_disk("hf", "export", str(ckpt), *recipe, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert f"--out={str(out)!r}" in result.stderr and "has no room" in result.stderr
    assert "nothing was written there" in result.stderr and "Fix: free space there" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".*.partial-*"))


# --- import (the Hugging Face side's other cases are in test_hf_import.py) ----------------------------------------


def test_import_onto_a_disk_that_fills_leaves_nothing(made, tmp_path):
    hf, _, _ = made
    out = tmp_path / "ckpt"
    result = _on_a_full_disk("hf", "import", str(hf), "gpt_1_3b", "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert f"--out={str(out)!r}" in result.stderr and "has no room" in result.stderr
    assert "nothing was written there" in result.stderr and "Fix: free space there" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".*.partial-*"))


def test_import_into_a_directory_that_is_not_empty_leaves_it_as_it_was(made, tmp_path):
    hf, _, _ = made
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    error = _refused(tmp_path, "import", str(hf), "gpt_1_3b", out=out)
    assert f"--out={str(out)!r}" in error and "exists and is not empty" in error and "--force" in error
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_an_out_where_no_directory_can_be_made_is_refused_by_both_verbs(made, tmp_path, capsys):
    """/proc answers ENOENT, a path below a file ENOTDIR, /sys EPERM: each an --out the user must change (exit 2,
    field, value, fix), not a failure of the run (exit 1 without a fix, before)."""
    from nemo_recipes.cli.main import main

    hf, ckpt, recipe = made
    (tmp_path / "a-file").write_text("not a directory")
    for verb, given in (("import", [str(hf), "gpt_1_3b"]), ("export", [str(ckpt), *recipe])):
        for out in ("/proc/nemo-recipes-test", str(tmp_path / "a-file" / "out"), "/sys/nemo-recipes-test"):
            code = main(["hf", verb, *given, "--out", out])
            error = capsys.readouterr().err
            assert code == 2, (verb, out, error)
            assert f"--out={out!r}" in error and "Fix: give --out" in error and "Traceback" not in error
    assert not list(tmp_path.glob("**/.*.partial-*"))


# --- issue 47: no input destroyed, no output lost to a second writer, no weight changed silently, no wait for ever --


def _main(capsys, *argv: str) -> tuple[int, str]:
    """`nemo-recipes hf ARGV` in this process (torch is imported already): (exit code, what it printed)."""
    from nemo_recipes.cli.main import main

    code = main(["hf", *argv])
    said = capsys.readouterr()
    return code, said.out + said.err


def _contents(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def test_an_out_that_is_contains_or_lies_inside_an_input_is_refused_and_the_input_kept(made, tmp_path, capsys):
    hf_made, ckpt_made, recipe = made
    hf, ckpt = tmp_path / "models" / "hf", tmp_path / "ckpt"
    shutil.copytree(hf_made, hf)
    shutil.copytree(ckpt_made, ckpt)
    (tmp_path / "alias").symlink_to(ckpt)
    before = {hf: _contents(hf), ckpt: _contents(ckpt)}
    cases = [
        (["export", str(ckpt), *recipe, "--out", str(ckpt)], "is the input CHECKPOINT"),
        (["import", str(hf), "gpt_1_3b", "--out", str(hf)], "is the input HF_DIR"),
        (["import", str(hf), "gpt_1_3b", "--out", str(hf.parent)], "contains the input HF_DIR"),
        (["export", str(ckpt), *recipe, "--out", str(ckpt / "new" / "hf")], "lies inside the input CHECKPOINT"),
        (["export", str(ckpt), *recipe, "--out", str(tmp_path / "alias")], "is the input CHECKPOINT"),  # a link
    ]
    for args, why in cases:
        code, error = _main(capsys, *args, "--force")
        assert code == 2 and why in error and "Fix: give an output path outside every input" in error, error
        assert {hf: _contents(hf), ckpt: _contents(ckpt)} == before, args
    # Not even the directory made for the lock beside --out is left.
    assert not (ckpt / "new").exists() and not list(tmp_path.glob("**/.*.partial-*"))
    # Another verb that writes a directory: a smoke run's --dir inside the checkpoint it starts from.
    smoke = cli("smoke", "gpt_1_3b", *recipe[2:], f"restore_from={ckpt}", "--dir", str(ckpt / "run"), timeout=120)
    assert smoke.returncode == 2 and "lies inside the input restore_from" in smoke.stderr, smoke.stderr
    assert _contents(ckpt) == before[ckpt] and not (ckpt / "run").exists()


def test_a_second_export_or_import_to_one_out_is_refused_while_the_first_writes(made, tmp_path, capsys):
    hf, ckpt, recipe = made
    out = tmp_path / "out"
    with open(tmp_path / ".out.lock", "a") as held:  # what a running export or import holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for args, verb in (([str(ckpt), *recipe], "export"), ([str(hf), "gpt_1_3b"], "import")):
            code, error = _main(capsys, verb, *args, "--out", str(out))
            assert code == 2 and f"another `hf {verb}` is writing there now" in error, error
    _nothing_at(out)


def test_an_import_records_its_recipe_and_tokenizer_and_says_what_it_rounds(tmp_path, capsys):
    """An FP32 model with a tokenizer: the import says it stores the weights as bf16, and its export back needs no
    --recipe and keeps the tokenizer. A tensor with an infinity (a new member of "non-finite weights") is refused."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    from nemo_recipes.data import tokenizers

    torch.manual_seed(0)
    model = tmp_path / "fp32"
    GPT2LMHeadModel(GPT2Config(**GPT2)).save_pretrained(model)  # float32, transformers' default
    trained = tokenizers.train([f"line {i}: the quick brown fox" for i in range(200)], tmp_path / "tok", vocab_size=300)
    for file in trained.iterdir():
        shutil.copy(file, model / file.name)
    code, said = _main(capsys, "import", str(model), "gpt_1_3b", "--out", str(tmp_path / "ckpt"))
    assert code == 0 and "the model's weights are float32; stored as bfloat16" in said, said
    code, error = _main(capsys, "export", str(tmp_path / "ckpt"), "--out", str(tmp_path / "back"))
    assert code == 0, error
    assert (tmp_path / "back" / "tokenizer.json").is_file()

    tensors = load_file(str(model / "model.safetensors"))
    tensors["transformer.h.1.mlp.c_fc.weight"][0, 0] = float("inf")
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    code, error = _main(capsys, "import", str(model), "gpt_1_3b", "--out", str(tmp_path / "bad"))
    assert code == 2 and "transformer.h.1.mlp.c_fc.weight" in error and "NaN or infinite" in error, error
    _nothing_at(tmp_path / "bad")
    assert not list(tmp_path.glob(".*.partial-*"))


def test_a_pipe_among_the_models_files_is_refused_at_once(made, tmp_path):
    """config.json or a safetensors file that is a named pipe: refused (exit 2) within the timeout, never opened."""
    hf, _, _ = made
    for name in ("config.json", "model.safetensors"):
        model = tmp_path / name
        shutil.copytree(hf, model)
        (model / name).unlink()
        os.mkfifo(model / name)
        result = cli("hf", "import", str(model), "gpt_1_3b", "--out", str(tmp_path / "out"), timeout=60)
        assert result.returncode == 2 and "is a named pipe (FIFO), not a regular file" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_an_export_of_weights_holding_nan_says_which(made, tmp_path, capsys):
    """A checkpoint whose training diverged (a NaN in layer 1's FC1, written as the import writes a checkpoint): the
    export is the checkpoint as trained (exit 0), and says which tensors hold NaN or infinity."""
    import torch

    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.conversion import hf_import
    from nemo_recipes.families import Architecture, family_of, get_family
    from nemo_recipes.overrides import apply_overrides

    hf, _, recipe = made
    spec, _ = apply_overrides(get_recipe("gpt_1_3b"), recipe[2:])

    class Diverged(hf_import._Converter):
        def __call__(self, chunk):
            tensor = super().__call__(chunk)
            if chunk.layer == 1 and chunk.key.endswith("mlp.linear_fc1.weight"):
                tensor = tensor.contiguous().clone()
                tensor.view(-1)[0] = float("nan")
            return tensor

    converter = Diverged(hf_import.HFWeights(str(hf)), Architecture.of(spec), get_family(family_of(spec.name)).hf)
    hf_import._write_checkpoint(converter, tmp_path / "ckpt" / "weights", torch.bfloat16)
    code, said = _main(capsys, "export", str(tmp_path / "ckpt"), *recipe, "--out", str(tmp_path / "hf"))
    assert code == 0 and "NaN or infinite weights in transformer.h.1.mlp.c_fc.weight:" in said, said
    assert "transformer.h.0." not in said.split("NaN or infinite weights in")[1].split(":")[0]
