"""NeMo model configs for the catalog's recipes: `GPTConfig` subclasses whose defaults come from the catalog.

The classes are generated from `RECIPES` so the numbers live in one place, but each is a real, importable,
module-level dataclass (NeMo-Run serialises configs by import path, and `nemo llm` overrides such as
`model.config.num_layers=4` parse values by the field types inherited from NeMo's `GPTConfig`).
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from typing import Any, Callable

import nemo_run as run
import yaml
from nemo.collections.llm.gpt.model import GPTModel
from nemo.collections.llm.gpt.model.base import GPTConfig

from nemo_recipes.catalog import RECIPES, RecipeSpec, config_class_name
from nemo_recipes.families import get_family
from nemo_recipes.training.nemo_fields import (  # noqa: F401  (re-exported: the model's conversions)
    ACTIVATIONS,
    recompute_values,
    values_under,
)
from nemo_recipes.training.overlap import pipeline_comm_values


def _builtin_function_yaml(dumper: yaml.SafeDumper, function: types.BuiltinFunctionType) -> yaml.Node:
    """F.gelu is a C builtin (torch._C._nn.gelu), which NeMo-Run's YAML writer (behind --to-yaml, `export` and its
    JSON and TOML) cannot represent, unlike Python functions such as F.silu: written the same way as those, by import
    path, so that activation=gelu/geglu on a SwiGLU row exports."""
    return dumper.represent_dict({"_target_": f"{function.__module__}.{function.__qualname__}", "_call_": False})


yaml.SafeDumper.add_representer(types.BuiltinFunctionType, _builtin_function_yaml)


def model_config_values(spec: RecipeSpec) -> dict[str, Any]:
    """The `GPTConfig` fields a recipe decides: its fields' `model.config` paths (`recipe_fields`), and the settings
    derived from them. Parallel sizes are absent on purpose: `MegatronStrategy` writes them into the config at run
    time, so the strategy stays their single owner."""
    values = values_under(spec, "model.config")
    values["init_method_std"] = spec.init_method_std
    values.update(fusion_values(spec))
    values.update(pipeline_comm_values(spec))
    return values


def fusion_values(spec: RecipeSpec) -> dict[str, Any]:
    """Megatron's fused kernels, all pure speed-ups, on as NeMo's Llama 3 configs have them. On a machine without
    CUDA the CPU compatibility layer switches off those that need it (`cpu_compat.CPU_MODEL_SETTINGS`)."""
    return {
        # bias + activation in one kernel: MCore has bias-GeLU, bias-GeGLU and bias-SwiGLU, the last two also without
        # a bias (fused_bias_geglu.py and fused_bias_swiglu.py take bias=None); plain GeLU without a bias it
        # refuses (transformer_config.py: 'add_bias_linear must also be True').
        "bias_activation_fusion": spec.activation != "gelu" or spec.add_bias_linear,
        "bias_dropout_fusion": True,
        # Apex's persistent LayerNorm kernel where installed (Megatron falls back for hidden sizes it lacks); TE's
        # norms have no such switch, so with RMSNorm it only states NeMo's Llama value.
        "persist_layer_norm": True,
        # Transformer Engine's fused rotary kernel (MCore refuses it without TE >= 1.4).
        "apply_rope_fusion": spec.position_embedding_type == "rope",
    }


def nemo_config_base(spec: RecipeSpec) -> type[GPTConfig]:
    """The NeMo config class the recipe's class extends: its family's (`Family.nemo_config`, an import path: NeMo's
    DeepSeekV3Config for multi-latent attention), or GPTConfig."""
    path = get_family(spec.family).nemo_config
    if path is None:
        return GPTConfig
    module, _, name = path.rpartition(".")
    base: type[GPTConfig] = getattr(importlib.import_module(module), name)
    return base


def _copier(value: list[Any]) -> Callable[[], list[Any]]:
    return lambda: list(value)


def _config_class(class_name: str, recipe_name: str) -> type[GPTConfig]:
    spec = RECIPES[recipe_name]
    parent = nemo_config_base(spec)
    parent_types = {f.name: f.type for f in dataclasses.fields(parent)}
    defaults = model_config_values(spec)
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": class_name,
        "__doc__": (
            f"{spec.size_label} model of the nemo-recipes catalog ({recipe_name}): {spec.num_layers} layers, "
            f"hidden {spec.hidden_size}, {spec.num_attention_heads} heads ({spec.kv_groups} query groups), "
            f"FFN {spec.ffn_hidden_size} ({spec.activation}), {spec.normalization}, {spec.position_embedding_type} "
            f"positions, sequence {spec.seq_length}; {spec.num_parameters:,} parameters."
        ),
        "__annotations__": {name: parent_types[name] for name in defaults},
        # A list (Megatron-Core's per-layer moe_layer_freq) is a mutable default: each instance gets its own copy.
        **{k: dataclasses.field(default_factory=_copier(v)) if isinstance(v, list) else v for k, v in defaults.items()},
    }
    return dataclasses.dataclass(type(class_name, (parent,), namespace))


#: One config class per catalog row, each a module-level name (GPTConfig1_3B, GPTConfig7B, LlamaConfig8B, ...): a new
#: row gets its class here without a line of its own.
CONFIG_CLASSES: dict[str, type[GPTConfig]] = {
    name: _config_class(config_class_name(spec), name) for name, spec in RECIPES.items()
}
globals().update({cls.__name__: cls for cls in CONFIG_CLASSES.values()})


def model_config(spec: RecipeSpec) -> run.Config[GPTConfig]:
    """`run.Config` of the recipe's config class, carrying only the values that differ from its defaults (so a
    custom shape built from the closest recipe reads as 'gpt_7b with num_layers=16')."""
    cls = CONFIG_CLASSES.get(spec.name) or nemo_config_base(spec)
    # A list default (moe_layer_freq) is a default_factory, which fiddle cannot read back unset: always written.
    base = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    values = model_config_values(spec)
    if spec.name in RECIPES:  # a value the row's class holds that the spec no longer sets (mtp_num_layers=None)
        parent = {f.name: f.default for f in dataclasses.fields(nemo_config_base(spec))}
        dropped = [k for k in model_config_values(RECIPES[spec.name]) if k not in values]
        reset = {k: parent[k] for k in dropped if parent.get(k, dataclasses.MISSING) is not dataclasses.MISSING}
        values = {**reset, **values}  # back to NeMo's class's default, written
    changed = {k: v for k, v in values.items() if base.get(k, dataclasses.MISSING) != v}
    return run.Config(cls, **changed)


def model(spec: RecipeSpec) -> run.Config[GPTModel]:
    return run.Config(GPTModel, config=model_config(spec))
