"""Read a `RecipeSpec` back from a recipe `run.Partial`, after any overrides a user made on the Partial itself
(`recipe.trainer.num_nodes = 8`, `trainer.strategy.tensor_model_parallel_size=4` on the command line).

The executor plugin and the CLI use this to plan what will actually run, not what the catalog row said.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import fiddle as fdl

from nemo_recipes import budget
from nemo_recipes.catalog import RECIPES, RecipeSpec, field_names
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.plan.layout import Layout
from nemo_recipes.training.model import ACTIVATIONS, CONFIG_CLASSES
from nemo_recipes.training.overlap import TensorParallelCommOverlap

_RECIPE_OF_CLASS: dict[Any, str] = {cls: name for name, cls in CONFIG_CLASSES.items()}


def _get(config: Any, path: str, default: Any = None) -> Any:
    value = config
    for part in path.split("."):
        if value is None:
            return default
        value = getattr(value, part, None)
    return default if value is None else value


def spec_from_partial(partial: Any) -> RecipeSpec:
    """The spec that `partial` (a recipe of ours, possibly edited) describes."""
    model_config = _get(partial, "model.config")
    if model_config is None or _get(partial, "trainer.strategy") is None:
        raise InvalidInputError(
            [
                Problem(
                    "recipe",
                    type(partial).__name__,
                    "is not a pretraining recipe with model.config and trainer.strategy.",
                    "pass a recipe built by nemo_recipes (e.g. nemo_recipes.gpt_7b()).",
                )
            ]
        )
    recipe_name = _RECIPE_OF_CLASS.get(getattr(model_config, "__fn_or_cls__", None), "custom")
    base = RECIPES.get(recipe_name)

    values: dict[str, Any] = {
        "num_layers": _get(model_config, "num_layers"),
        "hidden_size": _get(model_config, "hidden_size"),
        "num_attention_heads": _get(model_config, "num_attention_heads"),
        "num_query_groups": _get(model_config, "num_query_groups"),
        "ffn_hidden_size": _get(model_config, "ffn_hidden_size"),
        "make_vocab_size_divisible_by": _get(model_config, "make_vocab_size_divisible_by"),
        "position_embedding_type": _get(model_config, "position_embedding_type"),
        "normalization": _get(model_config, "normalization"),
        "norm_epsilon": _get(model_config, "layernorm_epsilon"),
        "qk_layernorm": _get(model_config, "qk_layernorm"),
        "activation": _activation(model_config),
        "add_bias_linear": _get(model_config, "add_bias_linear"),
        "rotary_base": _get(model_config, "rotary_base"),
        "rotary_percent": _get(model_config, "rotary_percent"),
        "kv_channels": _get(model_config, "kv_channels"),
        "share_embeddings": _get(model_config, "share_embeddings_and_output_weights"),
        "hidden_dropout": _get(model_config, "hidden_dropout"),
        "attention_dropout": _get(model_config, "attention_dropout"),
        "seq_length": _get(partial, "data.seq_length", _get(model_config, "seq_length")),
        "tensor_parallel": _get(partial, "trainer.strategy.tensor_model_parallel_size", 1),
        "pipeline_parallel": _get(partial, "trainer.strategy.pipeline_model_parallel_size", 1),
        "context_parallel": _get(partial, "trainer.strategy.context_parallel_size", 1),
        "virtual_pipeline": _get(partial, "trainer.strategy.virtual_pipeline_model_parallel_size"),
        "sequence_parallel": bool(_get(partial, "trainer.strategy.sequence_parallel", False)),
        "pipeline_counts_embedding_and_loss": bool(
            _get(partial, "trainer.strategy.account_for_embedding_in_pipeline_split", False)
            and _get(partial, "trainer.strategy.account_for_loss_in_pipeline_split", False)
        ),
        "micro_batch_size": _get(partial, "data.micro_batch_size"),
        "global_batch_size": _get(partial, "data.global_batch_size"),
        "distributed_optimizer": bool(_get(partial, "optim.config.use_distributed_optimizer", False)),
        "overlap_grad_reduce": bool(_get(partial, "trainer.strategy.ddp.overlap_grad_reduce", False)),
        "overlap_param_gather": bool(_get(partial, "trainer.strategy.ddp.overlap_param_gather", False)),
        "max_lr": _get(partial, "optim.config.lr"),
        "adam_beta1": _get(partial, "optim.config.adam_beta1"),
        "adam_beta2": _get(partial, "optim.config.adam_beta2"),
        "adam_eps": _get(partial, "optim.config.adam_eps"),
        "weight_decay": _get(partial, "optim.config.weight_decay"),
        "clip_grad": _get(partial, "optim.config.clip_grad"),
        "num_nodes": _get(partial, "trainer.num_nodes", 1),
        "num_gpus_per_node": _get(partial, "trainer.devices", 1),
        "precision": _precision(partial),
    }
    recompute_num_layers = _get(model_config, "recompute_num_layers")
    values["recompute"] = _get(model_config, "recompute_granularity") or "none"
    tp_overlap = any(
        getattr(c, "__fn_or_cls__", None) is TensorParallelCommOverlap
        for c in _get(partial, "trainer.callbacks", []) or []
    )
    if values["tensor_parallel"] == 1 and not values["sequence_parallel"]:
        values["sequence_parallel"] = None  # the catalog's 'auto', so TP=1 does not read as an explicit choice
    elif values["sequence_parallel"] == (values["tensor_parallel"] > 1):
        values["sequence_parallel"] = None
    max_lr, min_lr = values["max_lr"], _get(partial, "optim.lr_scheduler.min_lr")
    if max_lr and min_lr is not None:
        values["min_lr_ratio"] = round(min_lr / max_lr, 12)
    values.update(_data(partial))
    values = {
        k: v
        for k, v in values.items()
        if v is not None
        or k in ("virtual_pipeline", "num_query_groups", "kv_channels", "sequence_parallel", "recompute_num_layers")
    }
    values.update(_checkpoint(partial))
    if base is not None:
        spec = base.replace(**{k: v for k, v in values.items() if k in field_names()})
    else:
        spec = RecipeSpec(name="custom", size_label="custom", max_lr=values.pop("max_lr", 1e-4), **values)
    return _normalised(spec, recompute_num_layers, tp_overlap)


def _normalised(spec: RecipeSpec, recompute_num_layers: Any, tp_overlap: bool) -> RecipeSpec:
    """The catalog's spelling of what the training objects write explicitly: 'every layer of a chunk' is
    recompute_num_layers=None, and TP overlap where the recipe asks for it by default is tp_comm_overlap=None."""
    count = None
    if spec.recompute == "full" and recompute_num_layers != Layout.of(spec).layers_per_chunk:
        count = recompute_num_layers
    automatic = spec.replace(tp_comm_overlap=None).tp_comm_overlap_enabled
    return spec.replace(recompute_num_layers=count, tp_comm_overlap=None if tp_overlap == automatic else tp_overlap)


def _activation(model_config: Any) -> str:
    """The catalog's name of the config's (activation_func, gated_linear_unit) pair."""
    pair = (_get(model_config, "activation_func"), bool(_get(model_config, "gated_linear_unit", False)))
    for name, known_pair in ACTIVATIONS.items():
        if pair == known_pair:
            return name
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


def _precision(partial: Any) -> str:
    plugin = _get(partial, "trainer.plugins")
    if _get(plugin, "fp8"):
        return "fp8"
    return "fp16" if _get(plugin, "precision") == "16-mixed" else "bf16"


def _checkpoint(partial: Any) -> dict[str, Any]:
    checkpoint = _get(partial, "log.ckpt")
    if checkpoint is None:
        return {}
    interval = getattr(checkpoint, "train_time_interval", None)
    if interval is not None and not isinstance(interval, timedelta):
        interval = fdl.build(interval)  # the recipe holds run.Config(timedelta, minutes=...)
    minutes = interval.total_seconds() / 60 if interval is not None else None
    return {
        "checkpoint_every_steps": getattr(checkpoint, "every_n_train_steps", None) or None,
        "checkpoint_every_minutes": minutes,
        "checkpoint_async": bool(_get(partial, "trainer.strategy.ckpt_async_save", False)),
    }


def _data(partial: Any) -> dict[str, Any]:
    paths = _get(partial, "data.paths")
    tokenizer_config = _get(partial, "data.tokenizer")
    tokenizer_path = _get(tokenizer_config, "model_path") or _get(tokenizer_config, "pretrained_model_name")
    values: dict[str, Any] = {
        "tokenizer_path": tokenizer_path,
        "restore_from": _get(partial, "resume.restore_config.path"),  # parts.resume: NeMo's RestoreConfig
    }
    if getattr(paths, "__fn_or_cls__", None) is budget.blend_by_epochs:  # epochs not yet turned into weights
        values.update(
            data_paths=tuple(str(p) for p in paths.paths),
            data_epochs=tuple(float(e) for e in paths.data_epochs),
            data_weights=(),
        )
    elif isinstance(paths, (list, tuple)) and paths:
        weights, data_paths = list(paths[0::2]), list(paths[1::2])
        if all(isinstance(w, (int, float)) for w in weights):
            values.update(data_paths=tuple(data_paths), data_weights=tuple(float(w) for w in weights))
        else:
            values.update(data_paths=tuple(str(p) for p in paths), data_weights=())
    vocab = _get(tokenizer_config, "vocab_size")
    if vocab:
        values["vocab_size"] = vocab + 1  # NullTokenizer's end-of-document id (parts.tokenizer)
    return values
