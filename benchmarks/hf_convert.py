"""Seconds and peak memory of `nemo-recipes hf export` and `hf import` on full-size models, beside NeMo's own
exporter (`llm.export_ckpt`, HFLlamaExporter) on the same Llama checkpoint.

    python benchmarks/hf_convert.py            # gpt_1_3b at full size and a ~1.3B Llama (llama_8b's shape, smaller)
    python benchmarks/hf_convert.py --quick    # the same steps on 2-layer models (a minute)

Each model's checkpoint is made the way a recipe's training makes it, on CPU, in one process: the recipe's model
built by NeMo's `GPTConfig.configure_model` (random weights, BF16 parameters) and saved by NeMo's own
`MegatronCheckpointIO` (Megatron's torch_dist) into `weights/`; beside it, for NeMo's exporter only, a `context/`
that describes the same shape as NeMo's `LlamaModel` (NeMo's Llama exporter is registered for `LlamaModel`, not for
the `GPTModel` the recipes build) with a Hugging Face tokenizer of the same vocabulary (the exporter reads its
bos/eos ids; NullTokenizer, which mock-data runs use, has none).

Every conversion runs in a process of its own; its peak RSS is the kernel's `ru_maxrss` for that process (wait4).
The model's size is the bytes of its parameters in the checkpoint. Checkpoints and outputs go under --work (default
build/hf_convert), removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: (label, recipe, overrides): the shapes measured. The Llama one keeps llama_8b's grouped-query attention (4 query
#: heads per group, head width 128 -> 64 here as in Llama 3.2 1B), SwiGLU, RoPE base and 128,256-entry vocabulary.
FULL = [
    ("gpt_1_3b", "gpt_1_3b", []),
    ("llama_1b", "llama_8b", ["num_layers=12", "hidden_size=2048", "ffn_hidden_size=8192", "num_attention_heads=32",
                              "num_query_groups=8"]),
]  # fmt: skip
QUICK = [
    ("gpt_1_3b (2 layers, hidden 256)", "gpt_1_3b", ["num_layers=2", "hidden_size=256", "ffn_hidden_size=1024",
                                                      "num_attention_heads=4"]),
    ("llama (2 layers, hidden 256)", "llama_8b", ["num_layers=2", "hidden_size=256", "ffn_hidden_size=768",
                                                  "num_attention_heads=8", "num_query_groups=2"]),
]  # fmt: skip
ONE_PROCESS = ["tensor_parallel=1", "pipeline_parallel=1", "virtual_pipeline=null", "context_parallel=1"]


def _spec(recipe: str, overrides: list[str]) -> Any:
    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.overrides import apply_overrides

    spec, _given = apply_overrides(get_recipe(recipe), ONE_PROCESS + overrides)
    return spec


# ---- the stages, each run as `python benchmarks/hf_convert.py --stage NAME ...` in its own process ----


def _single_process() -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    from nemo_recipes.smoke_training import cpu_compat
    from nemo_recipes.smoke_training.launchers import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    cpu_compat.engage()


def stage_make(recipe: str, overrides: list[str], ckpt: Path) -> None:
    """The recipe's model with random BF16 weights, saved as the recipe's training saves it."""
    import fiddle as fdl
    import torch
    from nemo.lightning.io.pl import MegatronCheckpointIO

    from nemo_recipes.smoke_training import cpu_compat
    from nemo_recipes.training import parts
    from nemo_recipes.training.model import model

    spec = _spec(recipe, overrides)
    _single_process()
    from nemo.lightning.megatron_init import _set_random_seed

    _set_random_seed(1234)
    config = cpu_compat.cpu_model_settings(model(spec).config)
    config.params_dtype = torch.bfloat16  # the parameters as BF16 training holds them (and half the bytes)
    built = fdl.build(config)
    with cpu_compat.cpu_scope():
        gpt = built.configure_model(fdl.build(parts.tokenizer(spec)))
        MegatronCheckpointIO(save_ckpt_format="torch_dist").save_checkpoint(gpt.sharded_state_dict(prefix="module."),
                                                                            ckpt)  # fmt: skip
    if recipe.startswith("llama"):
        _nemo_context(spec, ckpt)


def _nemo_context(spec: Any, ckpt: Path) -> None:
    """`context/` as NeMo's trainer writes it (TrainerContext.io_dump), for a NeMo LlamaModel of `spec`'s shape."""
    from nemo import lightning as nl
    from nemo.collections import llm
    from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer
    from nemo.collections.llm.gpt.model.llama import Llama3Config
    from nemo.lightning.io.pl import TrainerContext

    from nemo_recipes.smoke_training import cpu_compat
    from nemo_recipes.training.model import model_config_values

    tokenizer_dir = ckpt / "tokenizer"
    _tokenizer(spec.vocab_size, tokenizer_dir)
    # The recipe's own config values (the same shape, norms, RoPE base and vocabulary padding) on NeMo's Llama class.
    # (with the CPU settings the recipe's CPU runs use: the config refuses TE's fused RoPE where TE is absent)
    config = Llama3Config(**{**model_config_values(spec), **cpu_compat.CPU_MODEL_SETTINGS})
    tokenizer = AutoTokenizer(pretrained_model_name=str(tokenizer_dir), use_fast=True)
    nemo_model = llm.LlamaModel(config, tokenizer=tokenizer)
    trainer = nl.Trainer(accelerator="cpu", devices=1, strategy=nl.MegatronStrategy(ddp="pytorch"))
    TrainerContext(model=nemo_model, trainer=trainer, extra={}).io_dump(ckpt / "context", yaml_attrs=["model"])


def _tokenizer(vocab: int, directory: Path) -> None:
    """A word-level Hugging Face tokenizer of exactly `vocab` entries (the model's), its last one the end of text."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab - 1)} | {"<eos>": vocab - 1}
    backend = Tokenizer(WordLevel(words, unk_token="w0"))
    backend.pre_tokenizer = WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<eos>", eos_token="<eos>", unk_token="w0")
    fast.save_pretrained(str(directory))


def stage_nemo_export(ckpt: Path, out: Path) -> None:
    """NeMo's own exporter, as `nemo llm export path=CKPT target=hf` runs it."""
    from nemo.collections import llm

    from nemo_recipes.smoke_training import cpu_compat

    cpu_compat.engage()
    _local_norm_names()
    with cpu_compat.cpu_scope():
        llm.export_ckpt(path=ckpt, target="hf", output_path=out, overwrite=True)


#: NeMo's Llama exporter names the norms as Transformer Engine's layer spec fuses them into the next linear layer; a
#: model built without Transformer Engine (any CPU run: TE needs CUDA) holds them as the local spec names them, so
#: the exporter's own mapping finds no source for them (IndexError in state.py's StateDictTransform). Renamed here,
#: and nothing else changed: NeMo's load, its transforms, its Hugging Face model and its save_pretrained all run.
LOCAL_NORMS = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
}


def _local_norm_names() -> None:
    from nemo.lightning import io

    original = io.apply_transforms

    def apply_transforms(source: Any, target: Any, mapping: dict[str, str], *args: Any, **kwargs: Any) -> Any:
        renamed = {}
        for key, value in mapping.items():
            for te, local in LOCAL_NORMS.items():
                key = key.replace(te, local)
            renamed[key] = value
        return original(source, target, renamed, *args, **kwargs)

    io.apply_transforms = apply_transforms


# ---- the driver ----


def _measure(argv: list[str], log: Path) -> dict[str, Any]:
    """Seconds and peak RSS (bytes) of one process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    start = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        _pid, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime  # steadier than wall time on a machine shared with other work
    result = {
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "peak_rss": usage.ru_maxrss * 1024,
        "exit": code,
    }
    if code != 0:
        result["error"] = log.read_text(errors="replace")[-1500:]
    return result


def _stage(name: str, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--stage", name, *args]


def _model_bytes(ckpt: Path) -> int:
    from nemo_recipes.conversion.megatron_checkpoint import MegatronCheckpoint

    metadata = MegatronCheckpoint.open(str(ckpt)).metadata.state_dict_metadata
    total = 0
    for entry in metadata.values():
        if hasattr(entry, "size"):
            count = 1
            for n in entry.size:
                count *= n
            total += count * entry.properties.dtype.itemsize
    return total


def _differences(ours: Path, theirs: Path) -> list[str]:
    """The tensors (names) that two Hugging Face directories do not hold bit for bit alike, read one at a time."""
    import torch
    from safetensors import safe_open

    def where(directory: Path) -> dict[str, Path]:
        found = {}
        for file in sorted(directory.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                found.update({key: file for key in handle.keys()})
        return found

    a, b = where(ours), where(theirs)
    differ = sorted(set(a) ^ set(b))
    for key in sorted(set(a) & set(b)):
        with safe_open(str(a[key]), framework="pt") as x, safe_open(str(b[key]), framework="pt") as y:
            if not torch.equal(x.get_tensor(key), y.get_tensor(key)):
                differ.append(key)
    return differ


def run(models: list[tuple[str, str, list[str]]], work: Path) -> list[dict[str, Any]]:
    cli = [str(Path(sys.executable).with_name("nemo-recipes"))]  # the console script, with this checkout first
    rows = []
    for label, recipe, overrides in models:
        base = work / recipe
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        ckpt = base / "ckpt"
        row: dict[str, Any] = {"model": label, "recipe": recipe, "overrides": overrides}
        row["make"] = _measure(_stage("make", recipe, str(ckpt), *overrides), base / "make.log")
        if row["make"]["exit"] != 0:
            rows.append(row)
            continue
        row["model_bytes"] = _model_bytes(ckpt)
        keys = ONE_PROCESS + overrides
        row["export"] = _measure(cli + ["hf", "export", str(ckpt), "--recipe", recipe, *keys, "--out",
                                        str(base / "hf")], base / "export.log")  # fmt: skip
        row["import"] = _measure(cli + ["hf", "import", str(base / "hf"), recipe, *keys, "--out",
                                        str(base / "back")], base / "import.log")  # fmt: skip
        if recipe.startswith("llama"):
            row["nemo_export"] = _measure(_stage("nemo_export", str(ckpt), str(base / "hf_nemo")),
                                          base / "nemo_export.log")  # fmt: skip
            if row["export"]["exit"] == 0 and row["nemo_export"]["exit"] == 0:
                row["differs_from_nemo"] = _differences(base / "hf", base / "hf_nemo")
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | bytes | conversion | seconds | CPU-s | peak RSS | RSS / model | vs NeMo's export (s, CPU-s) |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for row in rows:
        size = row.get("model_bytes")
        nemo = row.get("nemo_export")
        for name in ("export", "import", "nemo_export"):
            if name not in row:
                continue
            r = row[name]
            if r["exit"] != 0:
                lines.append(f"| {row['model']} | | {name} | failed (exit {r['exit']}) | | | | |")
                continue
            ratio = ""
            if nemo and nemo["exit"] == 0:
                ratio = f"{r['seconds'] / nemo['seconds']:.2f}x, {r['cpu_seconds'] / nemo['cpu_seconds']:.2f}x"
            lines.append(
                f"| {row['model']} | {size / 1e9:.2f} GB | {name} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} "
                f"| {r['peak_rss'] / 1e9:.2f} GB | {r['peak_rss'] / size:.2f} | {ratio} |"
            )
        if "differs_from_nemo" in row:
            same = not row["differs_from_nemo"]
            lines.append(
                f"| {row['model']} | | ours vs NeMo's tensors | {'bit-identical' if same else 'DIFFER'} | | | | |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2-layer models: the steps, not the figures")
    parser.add_argument("--only", choices=["gpt", "llama"], help="one of the two models")
    parser.add_argument("--work", default=str(ROOT / "build" / "hf_convert"), help="checkpoints and outputs here")
    parser.add_argument("--keep", action="store_true", help="leave the checkpoints and outputs in --work")
    parser.add_argument("--json", help="write the rows here as well")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.stage == "make":
        stage_make(rest[0], rest[2:], Path(rest[1]))
        return 0
    if args.stage == "nemo_export":
        stage_nemo_export(Path(rest[0]), Path(rest[1]))
        return 0
    models = QUICK if args.quick else FULL
    if args.only:
        models = [m for m in models if m[1].startswith(args.only)]
    work = Path(args.work)
    rows = run(models, work)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(_table(rows))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    failed = [f"{r['model']} {k}" for r in rows for k in ("make", "export", "import", "nemo_export")
              if k in r and r[k]["exit"] != 0]  # fmt: skip
    if failed:
        print("failed: " + ", ".join(failed) + " (logs kept in --work with --keep)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
