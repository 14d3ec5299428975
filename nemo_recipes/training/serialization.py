"""Write a recipe as NeMo-Run writes it (`nemo llm pretrain --to-yaml`, YAML/JSON/TOML) and read such a file back.

Why a reader of our own: in NeMo-Run 0.11.1 `ConfigSerializer().load()` goes through the command-line parser, which
cannot rebuild a `datetime.timedelta` (NeMo's checkpoint interval), a `torch.dtype` or a list of callback configs,
and `nemo llm pretrain --yaml FILE` refuses the `_partial_` marker its own `--to-yaml` writes, for NeMo's recipes as
well as ours. The files NeMo-Run writes are complete, though: every `_target_` mapping is a `run.Config`,
`run.Partial` (`_partial_: true`) or plain reference (`_call_: false`), and rebuilding them gives back an equal Partial.
"""

from __future__ import annotations

import importlib
from typing import Any

import nemo_run as run
from nemo_run.cli.config import ConfigSerializer

from nemo_recipes.errors import InvalidInputError, Problem

FORMATS = ("yaml", "json", "toml")


def dumps(partial: Any, fmt: str) -> str:
    serializer = ConfigSerializer()
    return {"yaml": serializer.serialize_yaml, "json": serializer.serialize_json, "toml": serializer.serialize_toml}[
        fmt
    ](partial)


def load(path: str) -> Any:
    """The `run.Partial` (or `run.Config`) of a file NeMo-Run wrote, in any of its three formats."""
    return _rebuild(ConfigSerializer().load_dict(path))


def _rebuild(value: Any) -> Any:
    if isinstance(value, list):
        return [_rebuild(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "_target_" not in value:
        return {k: _rebuild(v) for k, v in value.items()}
    target = _locate(value["_target_"])
    if value.get("_call_") is False:
        return target
    kwargs = {k: _rebuild(v) for k, v in value.items() if k not in ("_target_", "_partial_", "_call_")}
    return (run.Partial if value.get("_partial_") else run.Config)(target, **kwargs)


def _locate(path: str) -> Any:
    """'pkg.module.Class.attr' -> the object: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
            return obj
        except AttributeError:
            continue
    raise InvalidInputError(
        [
            Problem(
                "_target_",
                path,
                "cannot be imported.",
                "install the package that defines it, or fix the name in the file.",
            )
        ]
    )
