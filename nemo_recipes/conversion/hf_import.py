"""A Hugging Face model (the class of the recipe's family: `HFMapping.architecture`) as a checkpoint a recipe's
training starts from (`restore_from=`, NeMo's RestoreConfig: weights only, a fresh optimizer and schedule).

The checkpoint is what the recipe's own training saves, `weights/` in Megatron's torch_dist format: the same sharded
keys at the same global shapes (every layer stacked on a leading axis, the vocabulary padded as Megatron pads it,
with zero rows), so that Megatron's loader reshards it to whatever TP/PP/VP the run uses, as it does its own. The
family's mapping (`layer_from_hf`) turns each layer's Hugging Face tensors into Megatron's. Everything is checked
before anything is written, and written beside --out, then renamed into place.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.conversion.checkpoint_writer import Chunk, save_streaming
from nemo_recipes.conversion.hf_config import layout_problems, read_config, shape_of
from nemo_recipes.conversion.hf_export import IMPORT_RECORD, _out_problems, _replace, writing
from nemo_recipes.conversion.megatron_checkpoint import GLOBAL_KEYS, LAYER_KEYS, PREFIX
from nemo_recipes.conversion.safetensors_files import Entry, HeaderError, Lie, read_header, read_tensor
from nemo_recipes.conversion.write_errors import staged, unwritable, write_failure
from nemo_recipes.errors import InvalidConfigError, InvalidInputError, Problem
from nemo_recipes.families import Architecture, family_of, mapping_of
from nemo_recipes.user_paths import not_regular

RECORD = IMPORT_RECORD  # beside weights/: where the checkpoint came from, the recipe fields it sets, the spec
TOKENIZER_DIR = "tokenizer"  # beside weights/: the model's tokenizer, which `hf export` writes back
#: Linear layers whose (empty) extra state Megatron saves per layer; its loader expects each of them: attention's,
#: then a dense MLP's, then (per expert) the routed experts'.
EXTRA_STATE = ("self_attention.linear_proj", "self_attention.linear_qkv")
DENSE_EXTRA_STATE = ("mlp.linear_fc1", "mlp.linear_fc2")
EXPERT_EXTRA_STATE = ("mlp.experts.experts.linear_fc1", "mlp.experts.experts.linear_fc2")
#: Roles whose key differs between Megatron's two layer specs in a checkpoint (a MoE layer's pre-norm:
#: `blocks.MoE.MEGATRON_KEYS`): written under every key, so that a run of either spec (Transformer Engine's on a GPU,
#: the local one on a CPU) finds it; a load reads the keys its model asks for and leaves the others.
EVERY_SPEC = ("pre_moe_norm.weight", "pre_moe_norm.bias")


@dataclass
class ImportReport:
    out: str
    recipe: str
    architecture: str
    source: str
    parameters: int
    overrides: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def continue_with(self) -> str:
        """The key=value items that train the imported shape from this checkpoint."""
        items = [f"{k}={v}" for k, v in self.overrides.items()] + [f"restore_from={self.out}"]
        return " ".join(items)


def plan_import(hf_dir: str, spec: RecipeSpec, given: Mapping[str, Any]) -> tuple[RecipeSpec, dict[str, Any]]:
    """The recipe with the Hugging Face config's shape, and the fields it set; every problem at once otherwise
    (no config, another family's, a shape field `given` disagrees with, a layout the shape does not divide)."""
    config, problems = read_config(hf_dir)
    if problems:
        raise InvalidConfigError(problems, context=f"hf import {hf_dir}: nothing written")
    fields, problems = shape_of(spec, config, given)
    shaped = spec
    if fields:
        try:
            shaped = spec.replace(**fields)
        except InvalidInputError as error:
            problems += error.problems
    if shaped is not spec or not problems:
        problems += layout_problems(shaped, config)
        problems += mapping_of(family_of(spec.name)).problems(shaped)
    if problems:
        raise InvalidConfigError(problems, context=f"hf import {hf_dir}: nothing written")
    changed = {k: v for k, v in fields.items() if getattr(spec, k) != v}
    return shaped, changed


class HFWeights:
    """The safetensors of a Hugging Face directory: their headers read, each tensor read when asked for."""

    def __init__(self, hf_dir: str):
        """HeaderError with the lies of every file, a tensor given by two files among them."""
        self.where: dict[str, Entry] = {}
        lies: list[Lie] = []
        for file in sorted(Path(hf_dir).glob("*.safetensors")):
            problem = not_regular(file, "HF_DIR", "save the model with save_pretrained(DIR).")
            if problem is not None:  # a pipe or a device: opening it would wait for ever
                lies.append(Lie(None, file.name, f"{file.name} {problem.message.removesuffix('.')}"))
                continue
            try:
                entries = read_header(file)
            except HeaderError as error:
                lies += [replace(lie, why=f"in {file.name}, {lie.why}") for lie in error.lies]
                continue
            for key, entry in entries.items():
                if key in self.where:
                    files = [self.where[key].file.name, file.name]
                    lies.append(Lie(key, files, "is in two files: which of them is the model's is not said"))
                self.where[key] = entry
        if lies:
            raise HeaderError(Path(hf_dir), lies)

    def shape(self, key: str) -> tuple[int, ...]:
        return self.where[key].shape

    def get(self, key: str) -> Any:
        return read_tensor(self.where[key])


def _expected(arch: Architecture, mapping: Any) -> dict[str, tuple[int, ...]]:
    """Every Hugging Face key of the model and its shape, as the mapping writes them."""
    import torch

    spec: Any = arch.spec  # a RecipeSpec: the vocabulary is the recipe's, not the architecture's
    shapes: dict[str, tuple[int, ...]] = {}
    global_shapes = {t.role: t.shape for t in arch.global_tensors()}
    for role, key in mapping.GLOBALS.items():
        if role in global_shapes:
            shape = global_shapes[role]
            shapes[key] = (spec.vocab_size, *shape[1:]) if role in ("embedding.weight", "output.weight") else shape
    layer = {t.role: torch.empty(t.shape, device="meta") for t in arch.layer_tensors()}
    for index in range(spec.num_layers):
        shapes.update({k: tuple(v.shape) for k, v in mapping.layer_to_hf(arch, index, layer).items()})
    return shapes


def _tensor_problems(
    weights: HFWeights, expected: Mapping[str, tuple[int, ...]], hf_dir: str, ignored: tuple[str, ...]
) -> list[Problem]:
    if not weights.where:
        return [
            Problem(
                "HF_DIR",
                hf_dir,
                "holds no .safetensors weights.",
                "save the model with save_pretrained(DIR) (safetensors, transformers' default).",
            )
        ]
    problems = []
    for key, shape in expected.items():
        if key not in weights.where:
            problems.append(Problem(key, None, "is missing from the model's weights.", "give the whole model."))
        elif weights.shape(key) != shape:
            problems.append(
                Problem(
                    key,
                    list(weights.shape(key)),
                    f"has this shape; the config's model has {list(shape)}.",
                    "give weights and config.json of the same model.",
                )  # fmt: skip
            )
    for key in sorted(set(weights.where) - set(expected)):
        if (ignored and key.endswith(ignored)) or (key == "lm_head.weight" and "lm_head.weight" not in expected):
            continue  # a buffer of the class (a causal mask); a tied output layer some savers write anyway
        problems.append(
            Problem(
                key,
                list(weights.shape(key)),
                "is not a tensor of the config's model.",
                "give weights and config.json of the same model (this one has more than its config describes).",
            )  # fmt: skip
        )
    return problems


def _header_problems(hf_dir: str, error: HeaderError) -> list[Problem]:
    """A Problem per lie of the safetensors' headers: the tensor and its entry, or the directory and the file."""
    fix = (
        "save the model again (save_pretrained, or safetensors' save_file, writes a header that matches its data); "
        "a header edited by hand or a file copied in part cannot be converted."
    )
    return [
        Problem(lie.tensor, lie.value, f"{lie.why}.", fix)
        if lie.tensor is not None
        else Problem("HF_DIR", hf_dir, f"has weights that cannot be read: {lie.why}.", fix)
        for lie in error.lies
    ]


def _normalise_keys(weights: HFWeights, mapping: Any) -> None:
    """The keys as the family's class names them, where a saved model spells them otherwise (`HFMapping.renamed`:
    the GPT-2 checkpoints on the Hub name their tensors without the `transformer.` prefix)."""
    if mapping.renamed is None:
        return
    for key in list(weights.where):
        ours = mapping.renamed(key)
        if ours is not None:
            weights.where[ours] = weights.where.pop(key)


def _params_dtype(spec: RecipeSpec) -> Any:
    import torch

    precision = str(spec.precision)
    return torch.bfloat16 if "bf16" in precision else torch.float16 if "16" in precision else torch.float32


def import_hf(
    hf_dir: str, spec: RecipeSpec, out: str, *, given: Optional[Mapping[str, Any]] = None, force: bool = False
) -> ImportReport:
    """Write the Hugging Face model in `hf_dir` as a checkpoint of `spec`'s recipe (its shape from the model's
    config) in `out`. Raises InvalidConfigError with every problem before anything is written."""
    shaped, changed = plan_import(hf_dir, spec, given or {})
    mapping = mapping_of(family_of(spec.name))
    arch = Architecture.of(shaped)
    try:
        weights = HFWeights(hf_dir)
    except HeaderError as error:
        problems = _header_problems(hf_dir, error)
        raise InvalidConfigError(problems, context=f"hf import {hf_dir}: nothing written") from None
    _normalise_keys(weights, mapping)
    target = Path(out)
    problems = _tensor_problems(weights, _expected(arch, mapping), hf_dir, mapping.ignored)
    with writing(target, "hf import"):
        problems = _out_problems(target, force, [("HF_DIR", hf_dir)], "importing") + problems
        if problems:
            raise InvalidConfigError(problems, context=f"hf import {hf_dir}: nothing written")
        return _import(weights, hf_dir, spec, shaped, changed, arch, mapping, target, given)


def _import(
    weights: HFWeights,
    hf_dir: str,
    spec: RecipeSpec,
    shaped: RecipeSpec,
    changed: dict[str, Any],
    arch: Architecture,
    mapping: Any,
    target: Path,
    given: Optional[Mapping[str, Any]],
) -> ImportReport:
    dtype = _params_dtype(shaped)
    converter = _Converter(weights, arch, mapping)
    stage = staged(target, context="hf import")
    try:
        parameters = _write_checkpoint(converter, stage / "weights", dtype)
        if converter.non_finite:  # found only by reading every tensor: the partial write is removed below
            raise InvalidConfigError(
                [_non_finite_problem(converter.non_finite)], context=f"hf import {hf_dir}: nothing written"
            )
        tokenizer = _copy_tokenizer(hf_dir, stage / TOKENIZER_DIR)
        # The spec as a `smoke --dir` run records it (what `hf export` reads back: no --recipe needed), with the
        # model's tokenizer kept beside the weights.
        recorded = {**shaped.to_dict(), "tokenizer_path": str(target.absolute() / TOKENIZER_DIR) if tokenizer else None}
        record = {"source": str(Path(hf_dir).resolve()), "recipe": spec.name, "overrides": changed, "spec": recorded}
        (stage / RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
        _replace(stage, target)
    except BaseException as error:
        shutil.rmtree(stage, ignore_errors=True)
        failed = write_failure(error)  # torch's writers report a full disk in their own exceptions
        if failed is None:
            raise
        raise unwritable(target, failed, context="hf import") from None
    notes = []
    narrowed = sorted(str(d).removeprefix("torch.") for d in converter.dtypes if d.itemsize > dtype.itemsize)
    if narrowed:
        notes.append(
            f"the model's weights are {', '.join(narrowed)}; stored as {str(dtype).removeprefix('torch.')}, the "
            f"parameters of {shaped.precision} training (rounded to its precision; the optimizer's FP32 copy starts "
            "from the rounded values)."
        )
    if not tokenizer:
        notes.append(f"no tokenizer: {hf_dir} holds none of a tokenizer's files; `hf export` will write none either.")
    if shaped.padded_vocab_size != shaped.vocab_size:
        notes.append(
            f"the vocabulary ({shaped.vocab_size:,}) is padded to {shaped.padded_vocab_size:,} rows with zeros, as "
            "Megatron pads it: the padding rows' logits (0) take part in the training loss's softmax."
        )
    overrides = {**{k: v for k, v in (given or {}).items() if k != "restore_from"}, **changed}
    return ImportReport(str(target), spec.name, mapping.architecture, hf_dir, parameters, overrides, notes)


def megatron_chunks(arch: Architecture, mapping: Any) -> list[Chunk]:
    """Megatron's sharded keys as its training saves them, at their global shapes: the globals whole (the vocabulary
    padded), then every layer role stacked over the layers, written one layer at a time."""
    spec = arch.spec
    chunks = []
    for tensor in arch.global_tensors():
        if tensor.role in mapping.GLOBALS:
            chunks.append(Chunk(PREFIX + GLOBAL_KEYS[tensor.role], tuple(tensor.shape)))
    for index in range(spec.num_layers):
        for t in arch.layer_tensors():
            # Transformer Engine's layer spec (the one the recipes train) fuses each norm into the next linear layer.
            keys = LAYER_KEYS[t.role] if t.role in EVERY_SPEC else LAYER_KEYS[t.role][:1]
            chunks += [Chunk(PREFIX + "decoder.layers." + key, (spec.num_layers, *t.shape), index) for key in keys]
    return chunks


class _Converter:
    """Makes each chunk of `megatron_chunks` from the Hugging Face tensors when the writer asks for it: one layer's
    tensors converted at a time, each dropped once given."""

    def __init__(self, weights: HFWeights, arch: Architecture, mapping: Any):
        self.weights, self.arch, self.mapping = weights, arch, mapping
        self.roles = {PREFIX + GLOBAL_KEYS[role]: role for role in GLOBAL_KEYS}
        # The architecture's roles only: a dense MLP's fused norm and a MoE's local-spec norm share a key.
        layer = {t.role for t in arch.layer_tensors()}
        self.roles.update({PREFIX + "decoder.layers." + key: role for role in layer for key in LAYER_KEYS[role]})
        self.layer: Optional[int] = None
        self.converted: dict[str, Any] = {}
        self.dtypes: set[Any] = set()  # of the model's tensors, as stored
        self.non_finite: list[str] = []  # keys of the tensors holding NaN or infinity

    def _read(self, key: str) -> Any:
        import torch

        tensor = self.weights.get(key)
        self.dtypes.add(tensor.dtype)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            self.non_finite.append(key)
        return tensor

    def __call__(self, chunk: Chunk) -> Any:
        import torch

        role = self.roles[chunk.key]
        if chunk.layer is None:
            tensor = self._read(self.mapping.GLOBALS[role])
            if role in ("embedding.weight", "output.weight"):
                padded = torch.zeros(chunk.size, dtype=tensor.dtype)
                padded[: tensor.shape[0]] = tensor
                tensor = padded
            return tensor
        if chunk.layer != self.layer:
            hf = {key: self._read(key) for key in self.mapping.layer_keys(self.arch, chunk.layer)}
            self.converted = self.mapping.layer_from_hf(self.arch, chunk.layer, hf)
            self.layer = chunk.layer
        # Each tensor dropped once given (a tensor written under every spec's key: given to each, one vector a layer).
        return self.converted[role] if role in EVERY_SPEC else self.converted.pop(role)


def _non_finite_problem(keys: list[str]) -> Problem:
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return Problem(
        "HF_DIR",
        shown,
        "hold NaN or infinite values: training from them gives a NaN loss from the first step.",
        "import a model whose weights are finite (save it again from a run that had not diverged).",
    )


def _copy_tokenizer(hf_dir: str, directory: Path) -> bool:
    """The model's tokenizer files (a Hugging Face tokenizer: tokenizers.TOKENIZER_FILES) copied into `directory`;
    False when it has none."""
    from nemo_recipes.data.tokenizers import TOKENIZER_FILES

    files = [Path(hf_dir) / name for name in TOKENIZER_FILES if (Path(hf_dir) / name).is_file()]
    if not any(f.name in ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json") for f in files):
        return False
    directory.mkdir()
    for file in files:
        shutil.copyfile(file, directory / file.name)
    return True


def _write_checkpoint(converter: "_Converter", directory: Path, dtype: Any) -> int:
    arch, mapping = converter.arch, converter.mapping
    chunks = megatron_chunks(arch, mapping)
    layers = arch.spec.num_layers
    # Megatron saves a list of each layer's extra state (None without FP8): torch.distributed.checkpoint serialises
    # a non-tensor value as Megatron's save planner serialises that list. An expert's is sharded by layer and global
    # expert (SequentialMLP's offsets: `shard_{layer}.{expert}_{layers}.{experts}`).
    names = EXTRA_STATE + (DENSE_EXTRA_STATE if arch.mlp is not None else ())
    objects = {
        f"{PREFIX}decoder.layers.{name}._extra_state/shard_{index}_{layers}": [None]
        for name in names
        for index in range(layers)
    }
    experts = arch.moe.experts if arch.moe is not None else 0
    objects.update({
        f"{PREFIX}decoder.layers.{name}._extra_state/shard_{index}.{expert}_{layers}.{experts}": [None]
        for name in EXPERT_EXTRA_STATE
        for index in range(layers)
        for expert in range(experts)
    })  # fmt: skip
    save_streaming(directory, chunks, converter, dtype, objects)
    first = {PREFIX + "decoder.layers." + LAYER_KEYS[t.role][0] for t in arch.layer_tensors()}  # each tensor once
    return sum(math.prod(c.size) for c in chunks if c.layer is None or (c.layer == 0 and c.key in first))
