"""`restore_from`, checked before any process starts (plan, smoke, the launch plugin: through `plan.data.read_data`):
the path must be a checkpoint NeMo's RestoreConfig loads (a directory holding `weights/`, or that `weights/`), whose
save finished (its index, `.metadata`, and every byte the index points to), and whose tensors have the shapes of the
model the recipe builds. Otherwise the run would start its processes and fail while loading, minutes later.

Standard library only: the index is a pickle of torch's checkpoint metadata, read through the package's one reader
of pickles (`checkpoint_pickles`) as inert records (no code of the file runs, and torch is not imported), which is all
a shape needs; the pickles the run would load with it (`common.pt`, the objects among the tensors) are checked too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.checkpoint_pickles import UnsafePickle, read_index, unsafe_pickle
from nemo_recipes.errors import Problem
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.megatron_names import GLOBAL_KEYS, LAYER_KEYS, PREFIX, short_files

FIELD = "restore_from"
WHAT = "the directory `hf import --out` wrote, or a training run's checkpoint (the directory holding weights/)"
#: Tensors of another shape named one by one, up to this many (the rest counted): one is enough to see the cause.
SHOWN = 3
UNSAFE_FIX = "restore from a checkpoint you trust (one your runs saved, or `hf import` of a model you trust)."
RECORD = "hf_import.json"  # conversion.hf_import's record: the recipe fields the imported shape needs


def weights_of(path: Path) -> Optional[Path]:
    """The `weights/` NeMo's RestoreConfig reads from `path` (ckpt_to_weights_subdir), or None."""
    for candidate in (path / "weights", path) if path.name != "weights" else (path,):
        if (candidate / "metadata.json").is_file():
            return candidate
    return None


def restore_problems(spec: RecipeSpec) -> list[Problem]:
    """Every reason the run could not start from `spec.restore_from` (none when it is not set)."""
    if spec.restore_from is None:
        return []
    given = str(spec.restore_from)
    path = Path(given).expanduser()
    try:
        if not path.is_dir():
            why = "does not exist." if not path.exists() else "is not a directory."
            return [Problem(FIELD, given, why, f"give {WHAT}.")]
        weights = weights_of(path)
        if weights is None:
            return [_no_checkpoint(given, path)]
        if not (weights / ".metadata").is_file():
            why = f"{weights} has no index (.metadata): its save did not finish (a torn checkpoint)."
            return [Problem(FIELD, given, why, "give an earlier checkpoint of the run, whose save completed.")]
        index = read_index(weights)
        torn = _short_files(weights, index)
        if torn:
            return torn
        unsafe = unsafe_pickle(weights, index)  # what NeMo's restore would unpickle, plainly
        if unsafe is not None:
            return [unsafe.problem(FIELD, UNSAFE_FIX)]
        return _shape_problems(spec, given, path, index)
    except UnsafePickle as error:
        return [error.problem(FIELD, UNSAFE_FIX)]
    except OSError as error:
        return [Problem(FIELD, given, f"cannot be read ({error.strerror or error}).", f"give {WHAT}.")]
    except Exception as error:  # noqa: BLE001  (a damaged index: any unpickling error means the same)
        return [Problem(FIELD, given, f"has an index (.metadata) that cannot be read ({type(error).__name__}).",
                        "give another checkpoint; this one is damaged.")]  # fmt: skip


def _no_checkpoint(given: str, path: Path) -> Problem:
    found = sorted(path.glob("**/weights/metadata.json"))
    if found:  # a run directory: NeMo restores one checkpoint, not a run
        newest = max(found, key=lambda p: p.stat().st_mtime).parent.parent
        return Problem(FIELD, given, "is a directory of runs or checkpoints, not one checkpoint.",
                       f"give one of its checkpoints, e.g. restore_from={newest}")  # fmt: skip
    return Problem(FIELD, given, "holds no Megatron checkpoint (no weights/metadata.json).", f"give {WHAT}.")


def _short_files(weights: Path, index: Any) -> list[Problem]:
    problems = []
    for file, size, end in short_files(weights, index):
        held = "is missing" if size is None else f"holds {size:,} bytes"
        problems.append(
            Problem(FIELD, str(file), f"{held}; the checkpoint's index needs {end:,} (a torn or truncated "
                    "checkpoint).", "give an earlier checkpoint of the run, whose save completed.")
        )  # fmt: skip
    return problems


def _shape_problems(spec: RecipeSpec, given: str, path: Path, index: Any) -> list[Problem]:
    arch = Architecture.of(spec)
    saved = {k: tuple(getattr(v, "size", None) or ()) for k, v in index.state_dict_metadata.items()}
    layers = spec.num_layers
    wanted = [([PREFIX + "decoder.layers." + k for k in LAYER_KEYS[t.role]], (layers, *t.shape))
              for t in arch.layer_tensors()]  # fmt: skip
    wanted += [([PREFIX + GLOBAL_KEYS[t.role]], tuple(t.shape)) for t in arch.global_tensors()]
    off = []
    for names, shape in wanted:
        key = next((k for k in names if k in saved), None)
        if key is None:
            off.append(f"{names[0].removeprefix(PREFIX)} missing (the recipe's model has {list(shape)})")
        elif saved[key] != shape:
            off.append(f"{key.removeprefix(PREFIX)} {list(saved[key])} (the recipe's model: {list(shape)})")
    if not off:
        return []
    shown = "; ".join(off[:SHOWN]) + (f"; and {len(off) - SHOWN} more" if len(off) > SHOWN else "")
    return [Problem(FIELD, given, f"holds a model of another shape than the recipe's: {shown}.", _shape_fix(path))]


def _shape_fix(path: Path) -> str:
    import json

    for record in (path / RECORD, path.parent / RECORD):
        try:
            overrides = json.loads(record.read_text(encoding="utf-8")).get("overrides") or {}
        except (OSError, ValueError, AttributeError):
            continue
        items = " ".join(f"{k}={v}" for k, v in overrides.items())
        return f"train the shape it was imported with: {items} (what `hf import` printed)."
    return "set the shape fields it was trained with (num_layers=, hidden_size=, ...), or give one of this shape."
