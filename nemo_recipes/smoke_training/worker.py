"""One phase of a smoke run, in every rank: build the scaled-down recipe, engage the CPU compatibility layer where
there is no CUDA, and let NeMo's own `llm.pretrain` train (and, with AutoResume, resume).

Started by the runner as `python -m nemo_recipes.smoke_training.worker CONFIG.json` (under torchrun for several
processes), or by a NeMo-Run executor as `run.Partial(train_phase, ...)`. The world comes from torchrun's
environment, so the same phase runs on one machine or across Slurm nodes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.checkpoint_pickles import read_index
from nemo_recipes.errors import InvalidInputError, known

#: Validation batches per validation (the recipe's 32 are scaled down with the batch).
VAL_BATCHES = 2


def world_from_environment() -> tuple[int, int]:
    """(nodes, processes per node) as torchrun (or a plain single process) set them."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    return max(1, world // max(1, local)), local


def build_phase_recipe(
    spec: RecipeSpec,
    *,
    name: str,
    dir: str,
    stop_at: Optional[int],
    metrics: str,
    phase: str,
    data_prefix: Optional[str],
    val_batches: int = VAL_BATCHES,
    fault: Optional[str] = None,
    invariant_init: bool = False,
    reference_after: Optional[int] = None,
    reseed_at: Optional[int] = None,
) -> Any:
    """The recipe NeMo will run for this phase: the scaled-down spec on its own data (the user's `data_paths` and
    tokenizer) or else on the learnable corpus at `data_prefix`, stopping after `stop_at` steps (None: at the end of
    the schedule, spec.train_steps). `reference_after`: the step whose checkpoint the next phase resumes from; the
    phase trains on past it without saving, as the uninterrupted reference (straight_through.py); `reseed_at`: the
    step before which both phases seed dropout's generators alike. `fault`: Lightning callbacks that the tests plant
    bugs with, each "FILE.py:CLASS" (joined by commas; tests/_faults.py), never set otherwise."""
    import nemo_run as run

    from nemo_recipes.smoke_training.built import BuiltAsRecipe, expected_optimizer
    from nemo_recipes.smoke_training.callbacks import SmokeMetrics, StopAtStep
    from nemo_recipes.smoke_training.causality import Causality
    from nemo_recipes.smoke_training.fed import FedRecorder
    from nemo_recipes.smoke_training.preconditions import INIT_SEED
    from nemo_recipes.smoke_training.replicas import LayoutInvariantStart, ReplicaDigests
    from nemo_recipes.smoke_training.state import StateDigests
    from nemo_recipes.smoke_training.steps import OptimizerSteps
    from nemo_recipes.smoke_training.straight_through import ReseedAt, TrainOnWithoutSaving
    from nemo_recipes.training.factories import build_recipe

    nodes, per_node = world_from_environment()
    spec = spec.replace(num_nodes=nodes, num_gpus_per_node=per_node)
    if not spec.data_paths:
        spec = spec.replace(data_paths=(known(data_prefix, "a smoke run without data_paths writes a corpus"),))
    recipe = build_recipe(spec, name=name, dir=dir)
    recipe.trainer.limit_val_batches = val_batches
    recipe.trainer.limit_test_batches = val_batches
    recipe.trainer.log_every_n_steps = 1
    recipe.data.num_workers = 1
    for where in fault.split(",") if fault else ():  # before the digests, so that they see what the fault did
        recipe.trainer.callbacks.append(run.Config(planted_callback(where)))
    recipe.trainer.callbacks.append(
        run.Config(SmokeMetrics, path=metrics, phase=phase, reference_after=reference_after)
    )
    recipe.trainer.callbacks.append(
        run.Config(BuiltAsRecipe, path=metrics, phase=phase, expected=expected_optimizer(spec))
    )
    if reference_after is not None:
        recipe.trainer.callbacks.append(run.Config(TrainOnWithoutSaving, after=reference_after))
    if reseed_at is not None:
        recipe.trainer.callbacks.append(run.Config(ReseedAt, step=reseed_at))
    recipe.trainer.callbacks.append(run.Config(StateDigests, path=metrics, phase=phase))
    recipe.trainer.callbacks.append(run.Config(OptimizerSteps, path=metrics, phase=phase))
    recipe.trainer.callbacks.append(run.Config(Causality, path=metrics, phase=phase))
    recipe.trainer.callbacks.append(run.Config(ReplicaDigests, path=metrics, phase=phase))
    recipe.trainer.callbacks.append(run.Config(FedRecorder, path=metrics, phase=phase))
    if invariant_init:
        recipe.trainer.callbacks.append(run.Config(LayoutInvariantStart, seed=INIT_SEED))
    if stop_at is not None:
        recipe.trainer.callbacks.append(run.Config(StopAtStep, step=stop_at))
    return recipe


def planted_callback(where: str) -> Any:
    """The callback class at "FILE.py:CLASS", its file loaded by path once per process: the tests' planted bugs
    live in tests/, which the training processes do not import from."""
    import importlib.util

    path, _, name = where.rpartition(":")
    module_name = f"_nemo_recipes_planted_{Path(path).stem}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"fault {where!r}: {path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return getattr(module, name)


def train_phase(
    spec: dict[str, Any],
    name: str,
    dir: str,
    stop_at: Optional[int],
    metrics: str,
    phase: str,
    data_prefix: Optional[str],
    val_batches: int = VAL_BATCHES,
    fault: Optional[str] = None,
    invariant_init: bool = False,
    reference_after: Optional[int] = None,
    reseed_at: Optional[int] = None,
) -> None:
    """Train one phase with NeMo's `llm.pretrain`; rank 0 then records the checkpoints it finds."""
    from nemo_recipes.smoke_training import cpu_compat

    # Before anything imports Megatron-Core (the recipe's builders do): its import takes a lock a stopped run can leave.
    cpu_compat.private_extension_builds(dir, phase, int(os.environ.get("RANK", "0")))
    import fiddle as fdl

    from nemo_recipes.smoke_training.callbacks import attempt
    from nemo_recipes.smoke_training.record import append

    recipe = build_phase_recipe(
        RecipeSpec(**spec),
        name=name,
        dir=dir,
        stop_at=stop_at,
        metrics=metrics,
        phase=phase,
        data_prefix=data_prefix,
        val_batches=val_batches,
        fault=fault,
        invariant_init=invariant_init,
        reference_after=reference_after,
        reseed_at=reseed_at,
    )
    if not cpu_compat.cuda_available():
        problems = cpu_compat.cpu_problems(RecipeSpec(**spec))
        if problems:  # an executor's CPU nodes: the local runner refuses before launching
            raise InvalidInputError(problems, context=f"smoke {name} on a CPU")
    patches = cpu_compat.adapt(recipe, recipe.trainer.devices)
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        append(
            metrics,
            {
                "event": "launch",
                "phase": phase,
                "attempt": attempt(),
                "patches": patches,
                "device": "cpu" if patches else "cuda",
            },
        )
    fdl.build(recipe)()
    if rank == 0:
        removals_finished()
        append(
            metrics,
            {
                "event": "checkpoints",
                "phase": phase,
                "attempt": attempt(),
                "checkpoints": inspect_checkpoints(Path(dir)),
            },
        )


#: Seconds the checkpoints' background removals get before the directory is read anyway.
REMOVALS_TIMEOUT = 60.0


def removals_finished(timeout: float = REMOVALS_TIMEOUT) -> None:
    """Waits for NeMo's removals of superseded checkpoints: with asynchronous saving, its ModelCheckpoint deletes them
    in threads of their own (`_remove_checkpoint`), which may still run when `fit` returns; a directory read then can
    vanish under the reader (CI saw FileNotFoundError for the "-last" checkpoint of step 14 in TP2 and PP2 runs).
    Those threads are not daemons, so the process would wait for them at exit anyway; the wait is bounded."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))


def inspect_checkpoints(root: Path) -> list[dict[str, Any]]:
    """Each checkpoint under `root`: its step, size, tensor count, and whether it holds the optimizer state that
    AutoResume needs (read from the distributed checkpoint's own metadata)."""
    found = []
    for weights in sorted(root.glob("**/checkpoints/*/weights")):
        entry: dict[str, Any] = {"path": str(weights.parent), "step": _step_of(weights.parent.name)}
        try:
            entry["bytes"] = sum(f.stat().st_size for f in weights.parent.rglob("*") if f.is_file())
            # The tensors as Megatron's load_tensors_metadata lists them, from the index read without running it.
            index = read_index(weights)
            tensors = [k for k, v in index.state_dict_metadata.items() if type(v).__name__ == "TensorStorageMetadata"]
            entry["tensors"] = len(tensors)
            entry["optimizer"] = any(key.startswith("optimizer") for key in tensors)
            entry["read"] = read_every_item(weights, index)
        except Exception as error:  # an unreadable checkpoint is a finding, not a crash of the report
            entry["error"] = f"{type(error).__name__}: {error}"
        found.append(entry)
    return found


def read_every_item(weights: Path, index: Any = None) -> dict[str, int]:
    """Reads the whole distributed checkpoint at `weights`, as a resume would, on the CPU: every file the metadata
    names must hold the byte range of each of its items, and each item must load (torch.load, weights only). The
    metadata alone reads fine from a checkpoint whose tensor files are torn or truncated. Raises on the first item
    that does not; else: files, bytes read, items loaded."""
    import io

    import torch

    from nemo_recipes.conversion.megatron_checkpoint import short_files

    metadata = index if index is not None else read_index(weights)
    short = short_files(weights, metadata)  # the byte-range check `hf export` trusts a checkpoint by
    if short:
        path, size, needed = short[0]
        raise ValueError(f"{path} holds {size or 0:,} bytes; its metadata places items in {needed:,}")
    items = metadata.storage_data
    by_file: dict[str, list[Any]] = {}
    for index, info in items.items():
        by_file.setdefault(info.relative_path, []).append((index, info))
    read = 0
    for name, entries in sorted(by_file.items()):
        path = weights / name
        with open(path, "rb") as file:
            for index, info in entries:
                file.seek(info.offset)
                blob = file.read(info.length)
                read += len(blob)
                try:
                    torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
                except Exception as error:
                    raise ValueError(
                        f"{path}: item {index.fqn} does not load ({type(error).__name__}: {error})"
                    ) from None
    return {"files": len(by_file), "bytes": read, "items": len(items)}


def _step_of(directory_name: str) -> Optional[int]:
    for part in directory_name.split("-"):
        if part.startswith("step="):
            return int(part[5:])
    return None


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    train_phase(**config)
    return 0


if __name__ == "__main__":  # the distributed-checkpoint writer starts helper processes that re-import __main__
    sys.exit(main(sys.argv[1:]))
