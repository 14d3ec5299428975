"""The recipe fields' NeMo side, both ways, from the paths of `recipe_fields`: `values_under(spec, owner)` gives the
arguments of one NeMo object (`trainer.strategy`, `model.config`, ...) that the recipe's fields decide, and
`read_fields(partial)` reads those fields back from a recipe's configuration (`introspect`). A field whose value is
copied as it is needs nothing here but its path in the table; one that is not (activation -> activation_func and
gated_linear_unit) names its conversion, and the conversion holds both directions side by side in `CONVERSIONS`.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Optional

import fiddle as fdl
import nemo_run as run
import torch
import torch.nn.functional as F
from nemo import lightning as nl
from nemo.collections.common.tokenizers.null_tokenizer import NullTokenizer

from nemo_recipes import budget
from nemo_recipes.catalog import FP8_RECIPES, RecipeSpec
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.plan.layout import Layout
from nemo_recipes.recipe_fields import FIELDS, RECIPE_FIELDS, RecipeField
from nemo_recipes.training.overlap import TensorParallelCommOverlap, comm_overlap_callbacks

#: A configuration path NeMo-Run's objects do not hold (as opposed to one holding None).
MISSING: Any = object()

#: The catalog's activation -> Megatron-Core's (activation_func, gated_linear_unit). Gating alone keeps MCore's default
#: GeLU (GeGLU); SwiGLU is SiLU with gating, as NeMo's LlamaConfig sets it (activation_func=F.silu). The functions are
#: torch's own, so NeMo-Run writes them by import path (torch.nn.functional.silu) and Megatron's fused kernels
#: recognise them (mlp.py compares activation_func with F.gelu and F.silu).
ACTIVATIONS: dict[str, tuple[Callable[..., Any], bool]] = {
    "gelu": (F.gelu, False),
    "geglu": (F.gelu, True),
    "swiglu": (F.silu, True),
}


def lookup(config: Any, path: str) -> Any:
    """The value at the dotted `path` of a NeMo-Run configuration; None below a None; MISSING where it is not set."""
    value = config
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part, MISSING)
        if value is MISSING:
            return MISSING
    return value


def _held(config: Any, path: str) -> Any:
    """`lookup`, with None for a path that is not set."""
    value = lookup(config, path)
    return None if value is MISSING else value


@dataclass(frozen=True)
class Conversion:
    """A recipe value NeMo holds in another form, both ways: `write` gives {path: value} (a path absent is not
    written), `read` the fields from a configuration ({} where the configuration does not say), and `settle` the
    catalog's spelling of what the configuration writes explicitly, once the spec is read (`tp_comm_overlap=None`
    where TP overlap is what the recipe would choose anyway)."""

    write: Callable[[RecipeSpec], dict[str, Any]]
    read: Callable[[Any], dict[str, Any]]
    settle: Optional[Callable[[RecipeSpec], dict[str, Any]]] = None


# ---- the conversions, each direction beside the other ----


def _write_activation(spec: RecipeSpec) -> dict[str, Any]:
    function, gated = ACTIVATIONS[spec.activation]
    return {"model.config.activation_func": function, "model.config.gated_linear_unit": gated}


def _read_activation(config: Any) -> dict[str, Any]:
    pair = (_held(config, "model.config.activation_func"), bool(_held(config, "model.config.gated_linear_unit")))
    for name, known_pair in ACTIVATIONS.items():
        if pair == known_pair:
            return {"activation": name}
    function = getattr(pair[0], "__qualname__", pair[0])
    raise InvalidInputError(
        [
            Problem(
                "model.config.activation_func",
                f"{function} (gated_linear_unit={pair[1]})",
                "is an activation the catalog cannot describe, so the planner cannot model it.",
                "set activation to one of " + ", ".join(ACTIVATIONS) + " instead.",
            )
        ]
    )


def _write_tokenizer(spec: RecipeSpec) -> dict[str, Any]:
    """A tokenizer that never downloads: NullTokenizer for mock data, else the local path the user gives (a path
    ending in `.model` is a SentencePiece model; anything else a Hugging Face tokenizer directory). Nothing is opened
    here; NeMo reads the path when the job builds its data module."""
    if spec.tokenizer_path is None:
        # NullTokenizer adds an end-of-document id after the ids it is given (null_tokenizer.py: vocab_size + 1);
        # one fewer, so that the model's vocabulary is the recipe's (Llama 3's 128,256 is a multiple of 128: one
        # more entry would pad to 128,384, a million parameters per table the catalog does not count)
        return {"data.tokenizer": run.Config(NullTokenizer, vocab_size=spec.vocab_size - 1)}
    if spec.tokenizer_path.endswith(".model"):
        from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

        return {"data.tokenizer": run.Config(SentencePieceTokenizer, model_path=spec.tokenizer_path)}
    from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer

    # A tokenizer.json (which `data prepare` takes) as its directory: AutoTokenizer loads directories, not the file.
    path = spec.tokenizer_path
    if os.path.basename(path) == "tokenizer.json":
        path = os.path.dirname(path) or "."
    return {"data.tokenizer": run.Config(AutoTokenizer, pretrained_model_name=path, use_fast=True)}


def _read_tokenizer(config: Any) -> dict[str, Any]:
    tokenizer = _held(config, "data.tokenizer")
    values = {"tokenizer_path": _held(tokenizer, "model_path") or _held(tokenizer, "pretrained_model_name")}
    vocab = _held(tokenizer, "vocab_size")
    if vocab:
        values["vocab_size"] = vocab + 1  # NullTokenizer's end-of-document id (above)
    return values


def _read_sequence_parallel(config: Any) -> dict[str, Any]:
    on = bool(_held(config, "trainer.strategy.sequence_parallel"))
    tensor_parallel = _held(config, "trainer.strategy.tensor_model_parallel_size") or 1
    # The catalog's 'auto' where the configuration says what auto would: TP=1 then reads as no choice at all.
    automatic = (tensor_parallel == 1 and not on) or on == (tensor_parallel > 1)
    return {"sequence_parallel": None if automatic else on}


_SPLIT = (
    "trainer.strategy.account_for_embedding_in_pipeline_split",
    "trainer.strategy.account_for_loss_in_pipeline_split",
)


def _write_pipeline_split(spec: RecipeSpec) -> dict[str, Any]:
    # Written only when on: MegatronStrategy owns the pipeline split (it copies it into the model config at setup).
    return dict.fromkeys(_SPLIT, True) if spec.pipeline_counts_embedding_and_loss else {}


def _write_precision(spec: RecipeSpec) -> dict[str, Any]:
    """BF16 mixed by default; FP8 is BF16 plus Transformer Engine's delayed-scaling FP8 GEMMs (hybrid E4M3/E5M2),
    with NeMo's own FP8 settings (recipes/precision/mixed_precision.py)."""
    half = torch.float16 if spec.precision == "fp16" else torch.bfloat16
    plugin = run.Config(
        nl.MegatronMixedPrecision,
        precision="16-mixed" if spec.precision == "fp16" else "bf16-mixed",
        params_dtype=half,
        pipeline_dtype=half,
        autocast_enabled=False,
        grad_reduce_in_fp32=True,
    )
    if spec.precision == "fp8":
        plugin.fp8 = "hybrid"
        plugin.fp8_recipe = "delayed"
        plugin.fp8_margin = 0
        plugin.fp8_amax_history_len = 1024
        plugin.fp8_amax_compute_algo = "max"
        plugin.fp8_param_gather = True
    elif spec.fp8:  # NeMo's current-scaling, blockwise and MXFP8 presets: E4M3 alone for MXFP8, hybrid otherwise
        plugin.fp8 = "e4m3" if spec.precision == "mxfp8" else "hybrid"
        plugin.fp8_recipe = FP8_RECIPES[spec.precision]
        plugin.fp8_param_gather = True
    return {
        "trainer.plugins": plugin,
        "trainer.strategy.pipeline_dtype": half,
        "optim.config.bf16": spec.precision != "fp16",
        "optim.config.fp16": spec.precision == "fp16",
    }


def _read_precision(config: Any) -> dict[str, Any]:
    plugin = _held(config, "trainer.plugins")
    if _held(plugin, "fp8"):
        recipe = _held(plugin, "fp8_recipe") or "delayed"
        return {"precision": next((name for name, r in FP8_RECIPES.items() if r == recipe), "fp8")}
    return {"precision": "fp16" if _held(plugin, "precision") == "16-mixed" else "bf16"}


def recompute_values(spec: RecipeSpec) -> dict[str, Any]:
    """Megatron's activation-recomputation knobs for the recipe's `recompute` choice."""
    if spec.recompute == "selective":
        return {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None}
    if spec.recompute == "full":
        # 'block' recomputes the first N layers of each model chunk fully; with N = all of them it equals 'uniform'
        # with 1. The chunk size is the planner's (one formula for the model, memory and throughput).
        return {
            "recompute_granularity": "full",
            "recompute_method": "block",
            "recompute_num_layers": spec.recompute_num_layers or Layout.of(spec).layers_per_chunk,
        }
    return {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None}


def _settle_recompute(spec: RecipeSpec) -> dict[str, Any]:
    """'Every layer of a chunk' is the catalog's recompute_num_layers=None, and a count means nothing unless full."""
    count = spec.recompute_num_layers
    if spec.recompute != "full" or count == Layout.of(spec).layers_per_chunk:
        count = None
    return {"recompute_num_layers": count}


def _settle_tp_comm_overlap(spec: RecipeSpec) -> dict[str, Any]:
    automatic = spec.replace(tp_comm_overlap=None).tp_comm_overlap_enabled
    return {"tp_comm_overlap": None if spec.tp_comm_overlap == automatic else spec.tp_comm_overlap}


def _read_tp_comm_overlap(config: Any) -> dict[str, Any]:
    callbacks = _held(config, "trainer.callbacks") or []
    return {"tp_comm_overlap": any(getattr(c, "__fn_or_cls__", None) is TensorParallelCommOverlap for c in callbacks)}


def _read_min_lr(config: Any) -> dict[str, Any]:
    max_lr, min_lr = _held(config, "optim.config.lr"), _held(config, "optim.lr_scheduler.min_lr")
    return {"min_lr_ratio": round(min_lr / max_lr, 12)} if max_lr and min_lr is not None else {}


def _write_schedule(spec: RecipeSpec) -> dict[str, Any]:
    return {
        "trainer.max_steps": spec.train_steps,
        "optim.lr_scheduler.max_steps": spec.train_steps,
        "optim.lr_scheduler.warmup_steps": spec.warmup_steps,
        "optim.lr_scheduler.constant_steps": spec.constant_lr_steps,
    }


def _write_checkpoint_minutes(spec: RecipeSpec) -> dict[str, Any]:
    minutes = spec.checkpoint_every_minutes
    return {"log.ckpt.train_time_interval": run.Config(timedelta, minutes=minutes) if minutes else None}


def _read_checkpoint_minutes(config: Any) -> dict[str, Any]:
    interval = lookup(config, "log.ckpt.train_time_interval")
    if interval is MISSING or _held(config, "log.ckpt") is None:
        return {}
    if interval is not None and not isinstance(interval, timedelta):
        interval = fdl.build(interval)  # the recipe holds run.Config(timedelta, minutes=...)
    return {"checkpoint_every_minutes": interval.total_seconds() / 60 if interval is not None else None}


def _read_checkpoint_steps(config: Any) -> dict[str, Any]:
    steps = lookup(config, "log.ckpt.every_n_train_steps")
    if steps is MISSING or _held(config, "log.ckpt") is None:
        return {}
    return {"checkpoint_every_steps": steps or None}


def blend(spec: RecipeSpec) -> Any:
    """Megatron's zipped blend [w1, path1, w2, path2, ...]; equal weights when none are given, a budget's weights
    when one is (`nemo_recipes.budget`). Tokens become weights here; epochs need each source's token count, which
    building a recipe does not read: the blend is then a call of `budget.blend_by_epochs`, which the recipe plugin
    replaces by its result before submitting (and the job makes, when it builds its data module without one)."""
    if spec.data_epochs:
        return run.Config(
            budget.blend_by_epochs,
            paths=list(spec.data_paths),
            data_epochs=list(spec.data_epochs),
            train_steps=spec.train_steps,
            global_batch_size=spec.global_batch_size,
            seq_length=spec.seq_length,
        )
    if spec.data_tokens:
        weights = budget.weights_of(spec.data_tokens)
    else:
        weights = spec.data_weights or (1.0,) * len(spec.data_paths)
    return [item for weight, path in zip(weights, spec.data_paths, strict=True) for item in (float(weight), path)]


def _read_blend(config: Any) -> dict[str, Any]:
    paths = _held(config, "data.paths")
    if getattr(paths, "__fn_or_cls__", None) is budget.blend_by_epochs:  # epochs not yet turned into weights
        return {
            "data_paths": tuple(str(p) for p in paths.paths),
            "data_epochs": tuple(float(e) for e in paths.data_epochs),
            "data_weights": (),
        }
    if isinstance(paths, (list, tuple)) and paths:
        weights, data_paths = list(paths[0::2]), list(paths[1::2])
        if all(isinstance(w, (int, float)) for w in weights):
            return {"data_paths": tuple(data_paths), "data_weights": tuple(float(w) for w in weights)}
        return {"data_paths": tuple(str(p) for p in paths), "data_weights": ()}
    return {}


def _write_moe_layer_freq(spec: RecipeSpec) -> dict[str, Any]:
    """The leading dense layers as Megatron-Core's per-layer pattern (1: experts, 0: a dense MLP), as NeMo's
    DeepSeekV3Config writes its first three; none is Megatron's default, 1 (every layer)."""
    k = min(spec.moe_first_dense_layers, spec.num_layers)
    return {"model.config.moe_layer_freq": [0] * k + [1] * (spec.num_layers - k) if k else 1}


def _read_moe_layer_freq(config: Any) -> dict[str, Any]:
    pattern = _held(config, "model.config.moe_layer_freq")
    if isinstance(pattern, (list, tuple)):
        dense = next((i for i, x in enumerate(pattern) if x), len(pattern))
        if all(pattern[dense:]):  # leading dense layers, then experts: what the field can say
            return {"moe_first_dense_layers": dense}
        raise InvalidInputError(
            [
                Problem(
                    "model.config.moe_layer_freq",
                    pattern,
                    "interleaves dense and expert layers, which the catalog cannot describe.",
                    "use leading dense layers then experts (moe_first_dense_layers).",
                )
            ]
        )
    return {"moe_first_dense_layers": 0} if pattern in (None, 1) else {}


CONVERSIONS: dict[str, Conversion] = {
    "moe_layer_freq": Conversion(_write_moe_layer_freq, _read_moe_layer_freq),
    "activation": Conversion(_write_activation, _read_activation),
    "tokenizer": Conversion(_write_tokenizer, _read_tokenizer),
    "sequence_parallel": Conversion(
        lambda spec: {"trainer.strategy.sequence_parallel": spec.sequence_parallel_enabled}, _read_sequence_parallel
    ),
    "pipeline_split": Conversion(
        _write_pipeline_split,
        lambda config: {"pipeline_counts_embedding_and_loss": all(bool(_held(config, p)) for p in _SPLIT)},
    ),
    "precision": Conversion(_write_precision, _read_precision),
    "recompute": Conversion(
        lambda spec: {f"model.config.{k}": v for k, v in recompute_values(spec).items()},
        lambda config: {
            "recompute": _held(config, "model.config.recompute_granularity") or "none",
            "recompute_num_layers": _held(config, "model.config.recompute_num_layers"),
        },
        _settle_recompute,
    ),
    "param_gather": Conversion(
        # Megatron-Core gathers parameters only for the distributed optimizer (`plan.stack` models the same).
        lambda spec: {
            "trainer.strategy.ddp.overlap_param_gather": spec.overlap_param_gather and spec.distributed_optimizer
        },
        lambda config: {"overlap_param_gather": bool(_held(config, "trainer.strategy.ddp.overlap_param_gather"))},
    ),
    "tp_comm_overlap": Conversion(
        lambda spec: {"trainer.callbacks": comm_overlap_callbacks(spec)}, _read_tp_comm_overlap, _settle_tp_comm_overlap
    ),
    "min_lr": Conversion(
        lambda spec: {"optim.config.min_lr": spec.min_lr, "optim.lr_scheduler.min_lr": spec.min_lr}, _read_min_lr
    ),
    "schedule": Conversion(_write_schedule, lambda config: {}),
    "checkpoint_steps": Conversion(
        lambda spec: {"log.ckpt.every_n_train_steps": spec.checkpoint_every_steps}, _read_checkpoint_steps
    ),
    "checkpoint_minutes": Conversion(_write_checkpoint_minutes, _read_checkpoint_minutes),
    "blend": Conversion(lambda spec: {"data.paths": blend(spec)} if spec.data_paths else {}, _read_blend),
}


# ---- both directions, from the table ----


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def values_under(spec: RecipeSpec, owner: str) -> dict[str, Any]:
    """The arguments of the NeMo object at `owner` (`trainer.strategy`) that the recipe's fields decide, by name."""
    values: dict[str, Any] = {}
    done: set[str] = set()
    for entry in RECIPE_FIELDS:
        if not entry.applies(spec) or not any(_parent(path) == owner for path in entry.nemo):
            continue
        if entry.conversion is None:
            written = dict.fromkeys(entry.nemo, getattr(spec, entry.name))
        elif entry.conversion not in done:
            done.add(entry.conversion)
            written = CONVERSIONS[entry.conversion].write(spec)
        else:
            continue
        values.update({path.rpartition(".")[2]: value for path, value in written.items() if _parent(path) == owner})
    return values


def nemo_value(spec: RecipeSpec, path: str) -> Any:
    """The one object the recipe's fields put at `path` (`data.tokenizer`, `trainer.plugins`)."""
    return values_under(spec, _parent(path))[path.rpartition(".")[2]]


def _may_be_none(name: str) -> bool:
    return type(None) in typing.get_args(_HINTS[name])


_HINTS = typing.get_type_hints(RecipeSpec)


def read_fields(config: Any) -> dict[str, Any]:
    """The recipe fields a NeMo-Run configuration of ours says, by name: a path it does not set says nothing (the
    row's value stands), nor does None for a field that cannot be None; fields that are not read back (their
    `not_read_back`) are absent."""
    values: dict[str, Any] = {}
    done: set[str] = set()
    for entry in RECIPE_FIELDS:
        if not entry.nemo or entry.not_read_back:
            continue
        if entry.conversion is not None:
            if entry.conversion not in done:
                done.add(entry.conversion)
                values.update(CONVERSIONS[entry.conversion].read(config))
            continue
        value = next((v for v in (lookup(config, path) for path in entry.nemo) if v is not MISSING), MISSING)
        if value is not MISSING and (value is not None or _may_be_none(entry.name)):
            values[entry.name] = value
    if values.get("num_moe_experts") is None:  # a dense model: its expert fields are the defaults, whatever NeMo holds
        values = {k: v for k, v in values.items() if not (k in FIELDS and FIELDS[k].experts_only)}
    return {k: v for k, v in values.items() if v is not None or _may_be_none(k)}


def settled(spec: RecipeSpec) -> RecipeSpec:
    """`spec` in the catalog's spelling of what a configuration writes explicitly (`Conversion.settle`)."""
    changes: dict[str, Any] = {}
    for conversion in CONVERSIONS.values():
        if conversion.settle is not None:
            changes.update(conversion.settle(spec))
    return spec.replace(**changes)


def fields_read_back() -> tuple[RecipeField, ...]:
    """The fields a configuration gives back (`introspect`)."""
    return tuple(f for f in RECIPE_FIELDS if f.nemo and not f.not_read_back)
