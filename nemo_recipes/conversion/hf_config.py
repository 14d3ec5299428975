"""A Hugging Face model's `config.json` as a recipe's shape: which recipe fields it sets, and every way it disagrees
with the recipe it is imported into (another family's config, a shape field the command line gives otherwise, a
layout the shape does not divide, a value the recipe's architecture cannot compute).

No torch: the planner and the CLI read a Hugging Face config without it (read through yaml_files.read_file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.families import REGISTRY, family_of, mapping_of
from nemo_recipes.families.hf_mapping import HFMapping
from nemo_recipes.yaml_files import read_file


def _problem(field: str, value: Any, why: str, fix: str) -> Problem:
    return Problem(field, value, why, fix)


def read_config(hf_dir: str) -> tuple[dict[str, Any], list[Problem]]:
    """The directory's config.json, or the problem that it has none (or an unreadable one)."""
    path = Path(hf_dir)
    if not path.is_dir():
        return {}, [_problem("HF_DIR", hf_dir, "is not a directory.", "give a Hugging Face model directory.")]
    config = path / "config.json"
    if not config.exists():  # anything else there (a pipe, a directory) is refused by read_file, never opened
        return {}, [
            _problem(
                "HF_DIR",
                hf_dir,
                "has no config.json: the model's shape cannot be known.",
                "give the directory save_pretrained wrote (config.json beside the safetensors).",
            )
        ]
    try:  # the project's reader of users' files: bounded size and depth, no key twice
        values = read_file(config, field="config.json", fix="write it again.")
    except InvalidConfigError as error:
        return {}, error.problems
    if not isinstance(values, dict):
        return {}, [_problem("config.json", str(config), "is not a JSON object.", "write it again.")]
    return values, []


def _value(mapping: HFMapping, config: Mapping[str, Any], key: str) -> Any:
    """The config's value of `key` as the recipe field it gives: the class's default where the config leaves it
    out, None where it equals what the recipe derives (head_dim = hidden / heads), a whole RoPE base as an int."""
    value = config.get(key)
    if value is None and key in mapping.config_defaults:
        return mapping.config_defaults[key](config)
    if key == "head_dim":
        heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
        if value is None or (heads and hidden and value * heads == hidden):
            return None  # the recipes' default: hidden_size / heads
    if key == "rope_theta":
        return int(value) if value is not None and float(value).is_integer() else value
    if key == "tie_word_embeddings" and value is not None:
        return bool(value)
    return value


def shape_of(spec: Any, config: Mapping[str, Any], given: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The recipe fields the config sets (to apply to `spec`), and every problem: a config of another family, a
    field in `given` (the command line's key=value) that disagrees with it, a value the recipe cannot compute."""
    family = REGISTRY[family_of(spec.name)]
    mapping = mapping_of(family.name)
    wanted, model_type = mapping.model_type, config.get("model_type")
    if model_type != wanted:
        other = next((f for f in REGISTRY.values() if f.hf is not None and f.hf.model_type == model_type), None)
        fix = (
            f"import it with a {other.display_name} recipe ({', '.join(other.rows)})"
            if other
            else (f"give a {mapping.architecture} model")
        )
        return {}, [
            _problem(
                "config.json model_type",
                model_type,
                f"is not the {family.display_name} family's ({wanted}, {mapping.architecture}) that recipe "
                f"{spec.name} trains.",
                f"{fix}, or a {mapping.architecture} model with {spec.name}.",
            )
        ]
    problems: list[Problem] = []
    fields = {field: _value(mapping, config, key) for field, key in mapping.shape_keys.items()}
    for field, key in mapping.shape_keys.items():
        if field in given and given[field] != fields[field]:
            problems.append(
                _problem(
                    field,
                    given[field],
                    f"disagrees with the Hugging Face config ({key}={config.get(key)}).",
                    f"leave {field} out: the imported model's shape comes from its config.json.",
                )
            )
    for key, (only, why) in mapping.fixed.items():
        # Left out, the class's default (Qwen3MoeConfig's norm_topk_prob is False), else the only value held.
        default = mapping.config_defaults[key](config) if key in mapping.config_defaults else only
        value = config.get(key, default)
        if value != only and not (isinstance(only, float) and isinstance(value, float) and abs(value - only) < 1e-12):
            problems.append(
                _problem(
                    f"config.json {key}",
                    value,
                    f"cannot be trained by {spec.name}: {why}.",
                    f"give a model with {key}={json.dumps(only)}, or convert it with another tool.",
                )  # fmt: skip
            )
    return fields, problems


def layout_problems(spec: Any, config: Mapping[str, Any]) -> list[Problem]:
    """The layout fields the imported shape does not divide, in the config's own terms."""
    model_type = config.get("model_type", "")
    keys = next((dict(f.hf.shape_keys) for f in REGISTRY.values() if f.hf and f.hf.model_type == model_type), {})
    tp, pp, vp = spec.tensor_parallel, spec.pipeline_parallel, spec.virtual_pipeline or 1
    checks = [
        ("num_attention_heads", spec.num_attention_heads, "tensor_parallel", tp),
        ("num_query_groups", spec.kv_groups, "tensor_parallel", tp),
        ("ffn_hidden_size", spec.ffn_hidden_size, "tensor_parallel", tp),
        ("num_layers", spec.num_layers, "pipeline_parallel x virtual_pipeline", pp * vp),
    ]
    problems = []
    for field, value, layout, by in checks:
        if by > 1 and value % by:
            name = keys.get(field, field)
            problems.append(
                _problem(
                    layout,
                    by,
                    f"{name}={value} does not divide by {layout.split(' ')[0]}={by}.",
                    f"give a {layout} that divides {value}, e.g. {_divisor(value, by)}.",
                )
            )
    return problems


def _divisor(value: int, below: int) -> int:
    return max(d for d in range(1, below + 1) if value % d == 0)
