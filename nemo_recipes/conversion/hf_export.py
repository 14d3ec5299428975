"""A checkpoint a recipe trained, as a Hugging Face model directory that `transformers` loads offline:
`config.json`, the weights as safetensors (sharded above `shard_bytes`), and the tokenizer the data was prepared with.

The family's declared mapping (`families.hf_mapping.HFMapping`, its module's `HF`) turns Megatron's tensors into the
Hugging Face class's, one layer at a time: memory holds one shard being written and one layer being converted, never
the model twice. Everything is written into a directory beside the output and renamed into place at the end, so a
failure (a full disk, a signal) leaves no half-written model where one is expected.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.conversion.megatron_checkpoint import MegatronCheckpoint
from nemo_recipes.conversion.safetensors_writer import Planned, StreamingFile, plan_files
from nemo_recipes.conversion.write_errors import not_made, staged, unwritable
from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.families import Architecture, family_of, mapping_of
from nemo_recipes.user_paths import exclusive, output_problems

#: Above this many bytes the weights are split into several safetensors files (transformers' own default size).
DEFAULT_SHARD_BYTES = 5 * 10**9
IMPORT_RECORD = "hf_import.json"  # what `hf import` writes beside the checkpoint: the spec, as a smoke run does
RUN_RECORDS = ("train.json", "resume.json", IMPORT_RECORD)  # what a `smoke --dir` run writes: the spec it trained


@dataclass
class ExportReport:
    out: str
    recipe: str
    architecture: str
    checkpoint: str
    parameters: int
    vocab_size: int
    files: list[str]
    tokenizer: Optional[str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def spec_of_run(checkpoint: str) -> Optional[RecipeSpec]:
    """The spec a `smoke --dir` run recorded, found in the directories above `checkpoint` (None elsewhere)."""
    path = Path(checkpoint).resolve()
    for directory in (path, *path.parents):
        for name in RUN_RECORDS:
            record = directory / name
            if record.is_file():
                try:
                    values = json.loads(record.read_text(encoding="utf-8"))["spec"]
                    return RecipeSpec(**values)
                except (OSError, ValueError, KeyError, TypeError):
                    continue
    return None


def _out_problems(out: Path, force: bool, inputs: list[tuple[str, Any]], doing: str = "exporting") -> list[Problem]:
    """--out checked before anything is written: a directory (or nothing yet), no input in it, around it or it,
    empty unless --force."""
    problems = output_problems(out, inputs, "--out", directory=True)
    if problems:
        return problems
    if out.is_dir() and any(out.iterdir()) and not force:
        return [
            Problem(
                "--out",
                str(out),
                f"exists and is not empty; {doing} would mix two models' files.",
                "give a new directory, or --force to replace its content.",
            )
        ]
    return []


def _tokenizer(spec: RecipeSpec) -> tuple[Optional[Any], list[str]]:
    """(the data's tokenizer as transformers loads it, notes): None for a run on mock data, which has none."""
    if not spec.tokenizer_path:
        return None, [
            "no tokenizer: the run trained on mock data, which has none; AutoTokenizer will not load this "
            "directory. Train on `data prepare`d text (data_paths=, tokenizer_path=) to export one."
        ]
    from nemo_recipes.data import tokenizers

    path = Path(spec.tokenizer_path)
    directory = path.parent if path.is_file() else path
    if tokenizers.kind_of(directory) != "huggingface":
        return None, [f"no tokenizer: {directory} is not a Hugging Face tokenizer (tokenizer.json); copy yours."]
    from transformers import PreTrainedTokenizerFast

    encoder = tokenizers.load(directory)
    eod = encoder.decode([encoder.eod_id])
    fast = PreTrainedTokenizerFast(
        tokenizer_file=str(directory / "tokenizer.json"),
        eos_token=eod,
        bos_token=eod,
        # Not token_type_ids, the class's default: GPT-2 would add them to the input as position-like embeddings.
        model_input_names=["input_ids", "attention_mask"],
    )
    return fast, []


def export_hf(
    checkpoint: str,
    out: str,
    spec: Optional[RecipeSpec] = None,
    *,
    force: bool = False,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: Optional[Callable[[str], None]] = None,
) -> ExportReport:
    """Write the checkpoint at `checkpoint` (a run directory, a checkpoint, or its `weights/`) as a Hugging Face
    model in `out`. `spec` is the recipe it trained (with its overrides); a `smoke --dir` run records its own.
    Raises InvalidConfigError with every problem (field, value, fix) before anything is written."""
    problems: list[Problem] = []
    spec = spec or spec_of_run(checkpoint)
    if spec is None:
        problems.append(
            Problem(
                "--recipe",
                None,
                "the checkpoint's recipe is not recorded beside it (a `smoke --dir` run and `hf import` record it).",
                "name the recipe and the overrides it trained with: hf export CKPT --recipe gpt_1_3b key=value ...",
            )
        )
    mapping = mapping_of(family_of(spec.name)) if spec is not None else None
    if spec is not None and mapping is not None:
        problems += mapping.problems(spec)
    target = Path(out)
    inputs = [("CHECKPOINT", checkpoint), *(spec.input_paths if spec is not None else [])]
    ckpt = MegatronCheckpoint.open(checkpoint)
    shape = ckpt.shape_problems(Architecture.of(spec)) if spec is not None else []
    with writing(target, "hf export"):
        problems += _out_problems(target, force, [*inputs, ("CHECKPOINT", str(ckpt.path))]) + shape
        if problems or spec is None or mapping is None:  # (a missing spec is among the problems)
            raise InvalidConfigError(problems, context=f"hf export {checkpoint}: nothing written")
        return _export(ckpt, spec, mapping, target, shard_bytes, progress)


@contextlib.contextmanager
def writing(target: Path, verb: str) -> Iterator[None]:
    """One `verb` at a time into `target`: a second one, started while the first writes, is refused at once
    (exit 2) instead of both renaming into place and one model being lost. The lock is a hidden file beside
    `target`, which is renamed into place at the end and so cannot hold it."""

    def refusal() -> Exception:
        return InvalidConfigError(
            [
                Problem(
                    "--out",
                    str(target),
                    f"another `{verb}` is writing there now.",
                    "wait for it to finish, or choose another --out.",
                )
            ],
            context=f"{verb}: nothing written",
        )

    # The lock needs the parent; the directories made for it are removed again when nothing is written.
    made = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
    try:
        with contextlib.ExitStack() as stack:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                stack.enter_context(exclusive(target.parent / f".{target.name}.lock", refusal, remove=True))
            except OSError as error:
                raise not_made(target, target.parent, error, context=verb) from None
            yield
    except BaseException:
        for directory in made:  # deepest first; one that holds anything stays
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _export(
    ckpt: MegatronCheckpoint,
    spec: RecipeSpec,
    mapping: Any,
    target: Path,
    shard_bytes: int,
    progress: Optional[Callable[[str], None]],
) -> ExportReport:
    tokenizer, notes = _tokenizer(spec)
    say = progress or (lambda _line: None)
    stage = staged(target, context="hf export")
    try:
        arch = Architecture.of(spec)
        files, parameters, dtype, non_finite = _write_weights(
            ckpt, arch, mapping, spec.vocab_size, stage, shard_bytes, say
        )
        if non_finite:
            # Written all the same: the export is the checkpoint as trained, and a diverged run's weights are worth
            # reading; but a model that computes NaN is never handed over without a word.
            shown = ", ".join(non_finite[:5]) + (f" and {len(non_finite) - 5} more" if len(non_finite) > 5 else "")
            notes.append(
                f"NaN or infinite weights in {shown}: the model computes NaN or infinity; the training diverged "
                "before this checkpoint (export an earlier one)."
            )
        _write_config(mapping, spec, tokenizer, dtype, stage)
        for name in files:  # safetensors writes 0600: the weights are shared as the config is
            shutil.copymode(stage / "config.json", stage / name)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(stage))
        _replace(stage, target)
    except OSError as error:
        shutil.rmtree(stage, ignore_errors=True)
        raise unwritable(target, error, context="hf export") from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return ExportReport(
        out=str(target),
        recipe=spec.name,
        architecture=mapping.architecture,
        checkpoint=str(ckpt.path),
        parameters=parameters,
        vocab_size=spec.vocab_size,
        files=files,
        tokenizer=str(spec.tokenizer_path) if tokenizer is not None else None,
        notes=notes,
    )


def prune_padding(tensor: Any, vocab: int) -> Any:
    """The vocabulary's rows of an embedding or output layer: Megatron appends its padding rows after them."""
    return tensor[:vocab]


def hf_tensors(ckpt: MegatronCheckpoint, arch: Architecture, mapping: Any, vocab: int) -> Iterator[tuple[str, Any]]:
    """(Hugging Face key, tensor) of the whole model, one layer read at a time; the vocabulary's padding rows that
    Megatron adds (`make_vocab_size_divisible_by`) are left out."""
    spec = arch.spec
    for role, hf_key in mapping.GLOBALS.items():
        key = ckpt.key(role, layer=False)
        if key is None:
            continue
        tensor = ckpt.read(key)
        yield hf_key, prune_padding(tensor, vocab) if role in ("embedding.weight", "output.weight") else tensor
    roles = [t.role for t in arch.layer_tensors()]
    for index in range(spec.num_layers):
        megatron = {role: ckpt.read(ckpt.key(role, layer=True), index) for role in roles}  # type: ignore[arg-type]
        yield from mapping.layer_to_hf(arch, index, megatron).items()


def _planned(ckpt: MegatronCheckpoint, arch: Architecture, mapping: Any, vocab: int) -> list[Planned]:
    """What `hf_tensors` will yield, in its order, from shapes alone: the mapping run on meta tensors."""
    import torch

    def dtype(key: str) -> Any:
        return ckpt.metadata.state_dict_metadata[key].properties.dtype

    planned = []
    for role, hf_key in mapping.GLOBALS.items():
        key = ckpt.key(role, layer=False)
        if key is not None:
            shape = ckpt.shape(key)
            shape = (vocab, *shape[1:]) if role in ("embedding.weight", "output.weight") else shape
            planned.append(Planned(hf_key, shape, dtype(key)))
    keys = {t.role: ckpt.key(t.role, layer=True) for t in arch.layer_tensors()}
    for index in range(arch.spec.num_layers):
        meta = {role: torch.empty(ckpt.shape(k)[1:], dtype=dtype(k), device="meta") for role, k in keys.items()}  # type: ignore[arg-type]
        planned += [Planned(k, tuple(v.shape), v.dtype) for k, v in mapping.layer_to_hf(arch, index, meta).items()]
    return planned


def _write_weights(
    ckpt: MegatronCheckpoint,
    arch: Architecture,
    mapping: Any,
    vocab: int,
    stage: Path,
    shard_bytes: int,
    say: Callable[[str], None],
) -> tuple[list[str], int, Any, list[str]]:
    """The weights as safetensors files, each tensor written as it is converted (the headers first, from the
    shapes): memory holds the layer being converted, not a file's worth of them; and the keys of the tensors that
    hold NaN or infinity."""
    groups = plan_files(_planned(ckpt, arch, mapping, vocab), shard_bytes)
    if len(groups) == 1:
        names = ["model.safetensors"]
    else:
        names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    import torch

    tensors = hf_tensors(ckpt, arch, mapping, vocab)
    parameters = 0
    non_finite = []
    for name, group in zip(names, groups, strict=True):
        out = StreamingFile(stage / name, group)
        try:
            for _planned_tensor in group:
                key, tensor = next(tensors)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    non_finite.append(key)
                out.write(key, tensor)
                parameters += tensor.numel()
        finally:
            out.handle.close()
        out.close()
        say(f"hf export: wrote {name}")
    dtype = groups[0][0].dtype
    if len(names) == 1:
        return names, parameters, dtype, non_finite
    weight_map = {t.key: name for name, group in zip(names, groups, strict=True) for t in group}
    total = sum((stage / name).stat().st_size for name in names)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (stage / "model.safetensors.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")
    return [*names, "model.safetensors.index.json"], parameters, dtype, non_finite


def _write_config(mapping: Any, spec: RecipeSpec, tokenizer: Any, dtype: Any, stage: Path) -> None:
    from transformers import AutoConfig

    eod = tokenizer.eos_token_id if tokenizer is not None else None
    values = mapping.config(spec, spec.vocab_size, eod)
    values.pop("model_type")
    config = AutoConfig.for_model(mapping.model_type, **values)
    config.dtype = dtype
    config.save_pretrained(str(stage))


def _replace(stage: Path, target: Path) -> None:
    """`stage` renamed to `target`; a `target` that exists (empty, or with --force) is replaced whole."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        target.rename(old)
    stage.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
