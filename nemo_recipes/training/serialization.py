"""Write a recipe as NeMo-Run writes it (`nemo llm pretrain --to-yaml`, YAML/JSON/TOML) and read such a file back.

Why a reader of our own: in NeMo-Run 0.11.1 `ConfigSerializer().load()` goes through the command-line parser, which
cannot rebuild a `datetime.timedelta` (NeMo's checkpoint interval), a `torch.dtype` or a list of callback configs,
and `nemo llm pretrain --yaml FILE` refuses the `_partial_` marker its own `--to-yaml` writes, for NeMo's recipes as
well as ours. The files NeMo-Run writes are complete, though: every `_target_` mapping is a `run.Config`,
`run.Partial` (`_partial_: true`) or plain reference (`_call_: false`), and rebuilding them gives back an equal Partial.

A file is untrusted (someone hands a user a recipe): every `_target_` names code that importing the file, or building
the recipe, runs. So a target is checked before anything is imported: a called target is a class of the packages a
recipe is built of (`CALLED_ROOTS`) or one of NeMo's entry points (`ENTRY_POINTS`), a reference (`_call_: false`) may
also be a torch object (`torch.bfloat16`, `torch.nn.functional.silu`); anything else is refused.
"""

from __future__ import annotations

import importlib
from typing import Any

import nemo_run as run
from nemo_run.cli.config import ConfigSerializer

from nemo_recipes import yaml_files
from nemo_recipes.errors import InvalidInputError, Problem

#: The packages whose classes a recipe's configuration builds (what `export` writes names nothing else).
CALLED_ROOTS = ("nemo", "megatron", "lightning", "nemo_recipes", "datetime")
#: Functions a file may name as the task itself: NeMo's own verbs, which `nemo llm` runs the same way.
ENTRY_POINTS = frozenset({"nemo.collections.llm.api.pretrain", "nemo.collections.llm.api.finetune"})
#: Packages whose objects a file may name as values (dtypes, activation functions), never called.
REFERENCE_ROOTS = (*CALLED_ROOTS, "torch")


def dumps(partial: Any, fmt: str) -> str:
    serializer = ConfigSerializer()
    return {"yaml": serializer.serialize_yaml, "json": serializer.serialize_json, "toml": serializer.serialize_toml}[
        fmt
    ](partial)


def load(path: str) -> Any:
    """The `run.Partial` (or `run.Config`) of a file NeMo-Run wrote, in any of its three formats (by its extension),
    read by the one bounded reader of the files users hand us (size, depth, aliases, no key twice)."""
    fix = "load a file that `nemo-recipes export` or `nemo llm pretrain --to-yaml` wrote, or write it again."
    return _rebuild(yaml_files.read_file(path, field="file", fix=fix))


def _rebuild(value: Any) -> Any:
    if isinstance(value, list):
        return [_rebuild(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "_target_" not in value:
        return {k: _rebuild(v) for k, v in value.items()}
    called = value.get("_call_") is not False
    target = _locate(_allowed(value["_target_"], called), called)
    if not called:
        return target
    kwargs = {k: _rebuild(v) for k, v in value.items() if k not in ("_target_", "_partial_", "_call_")}
    return (run.Partial if value.get("_partial_") else run.Config)(target, **kwargs)


def _allowed(path: Any, called: bool) -> str:
    """`path` when its package may be imported for a `_target_` (see the module's docstring), before any import."""
    roots = CALLED_ROOTS if called else REFERENCE_ROOTS
    if isinstance(path, str) and path.split(".")[0] in roots and all(part.isidentifier() for part in path.split(".")):
        return path
    kind = "a class" if called else "an object"
    raise InvalidInputError(
        [
            Problem(
                "_target_",
                path,
                f"is not {kind} of the packages a recipe is built of ({', '.join(roots)}): loading the file would "
                "import it, and building the recipe would run it.",
                "load only files that `nemo-recipes export` or `nemo llm pretrain --to-yaml` wrote, or that you "
                "checked; name the NeMo or Megatron-Core class you meant.",
            )
        ]
    )


def _locate(path: str, called: bool = True) -> Any:
    """'pkg.module.Class.attr' -> the object: the longest importable module prefix, then attributes; a called
    object must be a class or one of ENTRY_POINTS (a function of those packages can do anything: delete, download)."""
    found = _find(path)
    if called and not isinstance(found, type) and path not in ENTRY_POINTS:
        raise InvalidInputError(
            [
                Problem(
                    "_target_",
                    path,
                    "is a function, not a class: building the recipe would call it with the file's arguments.",
                    f"name a class, or one of NeMo's entry points ({', '.join(sorted(ENTRY_POINTS))}).",
                )
            ]
        )
    return found


def _find(path: str) -> Any:
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
