"""NeMo model configs for the catalog's recipes: `GPTConfig` subclasses whose defaults come from the catalog.

The classes are generated from `RECIPES` so the numbers live in one place, but each is a real, importable,
module-level dataclass (NeMo-Run serialises configs by import path, and `nemo llm` overrides such as
`model.config.num_layers=4` parse values by the field types inherited from NeMo's `GPTConfig`).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable

import nemo_run as run
import torch.nn.functional as F
import yaml
from nemo.collections.llm.gpt.model import GPTModel
from nemo.collections.llm.gpt.model.base import GPTConfig

from nemo_recipes.catalog import RECIPES, RecipeSpec, config_class_name
from nemo_recipes.plan.layout import Layout

#: The catalog's activation -> Megatron-Core's (activation_func, gated_linear_unit). Gating alone keeps MCore's default
#: GeLU (GeGLU); SwiGLU is SiLU with gating, as NeMo's LlamaConfig sets it (activation_func=F.silu). The functions are
#: torch's own, so NeMo-Run writes them by import path (torch.nn.functional.silu) and Megatron's fused kernels
#: recognise them (mlp.py compares activation_func with F.gelu and F.silu).
ACTIVATIONS: dict[str, tuple[Callable[..., Any], bool]] = {
    "gelu": (F.gelu, False),
    "geglu": (F.gelu, True),
    "swiglu": (F.silu, True),
}


def _builtin_function_yaml(dumper: yaml.SafeDumper, function: types.BuiltinFunctionType) -> yaml.Node:
    """F.gelu is a C builtin (torch._C._nn.gelu), which NeMo-Run's YAML writer (behind --to-yaml, `export` and its
    JSON and TOML) cannot represent, unlike Python functions such as F.silu: written the same way as those, by import
    path, so that activation=gelu/geglu on a SwiGLU row exports."""
    return dumper.represent_dict({"_target_": f"{function.__module__}.{function.__qualname__}", "_call_": False})


yaml.SafeDumper.add_representer(types.BuiltinFunctionType, _builtin_function_yaml)


def model_config_values(spec: RecipeSpec) -> dict[str, Any]:
    """The `GPTConfig` fields a recipe decides. Parallel sizes are absent on purpose: `MegatronStrategy` writes them
    into the config at run time, so the strategy stays their single owner."""
    activation_func, gated = ACTIVATIONS[spec.activation]
    values: dict[str, Any] = {
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "ffn_hidden_size": spec.ffn_hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_query_groups": spec.num_query_groups,
        "kv_channels": spec.kv_channels,
        "seq_length": spec.seq_length,
        "make_vocab_size_divisible_by": spec.make_vocab_size_divisible_by,
        "position_embedding_type": spec.position_embedding_type,
        "rotary_base": spec.rotary_base,
        "rotary_percent": spec.rotary_percent,
        "normalization": spec.normalization,
        "layernorm_epsilon": spec.norm_epsilon,
        "qk_layernorm": spec.qk_layernorm,
        "activation_func": activation_func,
        "gated_linear_unit": gated,
        "add_bias_linear": spec.add_bias_linear,
        "share_embeddings_and_output_weights": spec.share_embeddings,
        "hidden_dropout": spec.hidden_dropout,
        "attention_dropout": spec.attention_dropout,
        "init_method_std": spec.init_method_std,
    }
    values.update(fusion_values(spec))
    values.update(recompute_values(spec))
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


def pipeline_comm_values(spec: RecipeSpec) -> dict[str, Any]:
    """Interleaved schedules overlap their point-to-point sends with compute, as NeMo's MegatronCommOverlapCallback
    sets for every VP > 1 run; Megatron-Core needs batch_p2p_comm off for that. The planner models the same
    (`plan.stack.Program.pp_comm_overlap`)."""
    interleaved = Layout.of(spec).interleaved
    return {"overlap_p2p_comm": interleaved, "batch_p2p_comm": not interleaved}


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


def _config_class(class_name: str, recipe_name: str) -> type[GPTConfig]:
    spec = RECIPES[recipe_name]
    parent_types = {f.name: f.type for f in dataclasses.fields(GPTConfig)}
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
        **defaults,
    }
    return dataclasses.dataclass(type(class_name, (GPTConfig,), namespace))


#: One config class per catalog row, each a module-level name (GPTConfig1_3B, GPTConfig7B, LlamaConfig8B, ...): a new
#: row gets its class here without a line of its own.
CONFIG_CLASSES: dict[str, type[GPTConfig]] = {
    name: _config_class(config_class_name(spec), name) for name, spec in RECIPES.items()
}
globals().update({cls.__name__: cls for cls in CONFIG_CLASSES.values()})


def model_config(spec: RecipeSpec) -> run.Config[GPTConfig]:
    """`run.Config` of the recipe's config class, carrying only the values that differ from its defaults (so a
    custom shape built from the closest recipe reads as 'gpt_7b with num_layers=16')."""
    cls = CONFIG_CLASSES.get(spec.name, GPTConfig)
    base = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    changed = {k: v for k, v in model_config_values(spec).items() if base.get(k, dataclasses.MISSING) != v}
    return run.Config(cls, **changed)


def model(spec: RecipeSpec) -> run.Config[GPTModel]:
    return run.Config(GPTModel, config=model_config(spec))
