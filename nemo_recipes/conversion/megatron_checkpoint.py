"""A Megatron distributed checkpoint (NeMo 2's `weights/` directory, torch_dist format) read one tensor, or one
layer of a tensor, at a time, without building a model or starting a process group.

Megatron stores every tensor at its global shape whatever the layout it was trained with: tensor-parallel shards
are chunks at their offsets, and the layers of every pipeline stage and virtual chunk are one tensor with a leading
layer axis. So one reader serves TP, PP, VP and DP checkpoints alike, and reading layer `i` reads only the chunks
that overlap it (torch.distributed.checkpoint's read planner), which keeps memory at one layer.

Checked before it is trusted: the index (`.metadata`), a pickle, is read through the package's one reader of pickles
(`checkpoint_pickles`), which refuses any name an index does not hold (a file made to run code), and the tensors by
torch's `weights_only` loader; the index must exist (a save killed in the middle writes none), every
file it names must hold the bytes it points to, and the tensors must have the shapes the recipe's architecture
gives (a checkpoint of another shape is named tensor by tensor).
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.checkpoint_pickles import UnsafePickle, read_index
from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.megatron_names import GLOBAL_KEYS, LAYER_KEYS, PREFIX, short_files
from nemo_recipes.quiet import library_notices_silenced

_STEP = re.compile(r"step=(\d+)")
_GLOBAL = re.compile(r"GLOBAL (\S+)")  # how torch's weights-only loader names what it refused


def _problem(path: str, message: str, fix: str) -> InvalidConfigError:
    return InvalidConfigError([Problem("CHECKPOINT", path, message, fix)], context="hf export")


def find_weights(given: str) -> Path:
    """The `weights` directory of a checkpoint given as that directory, the checkpoint directory above it, or a run
    directory (`smoke --dir`, a job's): there, the checkpoint of the highest step."""
    path = Path(given)
    if not path.is_dir():
        raise _problem(given, "is not a directory.", "give a checkpoint directory (one holding weights/), or a run's.")
    for candidate in (path / "weights", path):
        if (candidate / "metadata.json").is_file() or (candidate / ".metadata").is_file():
            return candidate
    found = [p.parent for p in path.glob("**/weights/metadata.json")]
    if not found:
        raise _problem(
            given,
            "holds no Megatron checkpoint (no weights/metadata.json below it).",
            "give the directory a training run saved (e.g. RUN/smoke/checkpoints/...-last), or the run directory.",
        )

    def step(weights: Path) -> tuple[int, str]:
        match = _STEP.search(weights.parent.name)
        return (int(match.group(1)) if match else -1, weights.parent.name)

    return max(found, key=step)


@dataclass
class MegatronCheckpoint:
    """The tensors of one checkpoint's `weights` directory."""

    path: Path
    metadata: Any  # torch.distributed.checkpoint.metadata.Metadata

    @classmethod
    def open(cls, given: str) -> "MegatronCheckpoint":
        weights = find_weights(given)
        with library_notices_silenced():  # unpickling the index imports Megatron-Core, whose classes it names
            return cls._open(weights)

    @classmethod
    def _open(cls, weights: Path) -> "MegatronCheckpoint":
        from torch.distributed.checkpoint.metadata import Metadata

        if not (weights / ".metadata").is_file():
            raise _problem(
                str(weights),
                "has no index (.metadata): the save did not finish (a torn checkpoint).",
                "export an earlier checkpoint of the run, whose save completed.",
            )
        try:
            metadata = read_index(weights, real=True)
            if not isinstance(metadata, Metadata):
                raise TypeError(type(metadata).__name__)
        except UnsafePickle as error:
            fix = "export a checkpoint you trust (one your runs saved, or `hf import` of a model you trust)."
            raise InvalidConfigError([error.problem("CHECKPOINT", fix)], context="hf export") from None
        except Exception as error:  # noqa: BLE001  (a damaged index: any unpickling error means the same)
            raise _problem(
                str(weights),
                f"has an index (.metadata) that cannot be read ({type(error).__name__}).",
                "export another checkpoint of the run; this one is damaged.",
            ) from None
        checkpoint = cls(weights, metadata)
        checkpoint._check_files()
        return checkpoint

    def _check_files(self) -> None:
        """Every byte range the index points to lies inside its file: a file cut short (a save killed while writing,
        a copy that stopped) is found before any tensor is read."""
        problems = [
            Problem(
                "CHECKPOINT",
                str(file),
                f"{'is missing' if size is None else f'holds {size:,} bytes'}; the checkpoint's index needs {end:,} "
                "(a torn or truncated checkpoint).",
                "export an earlier checkpoint of the run, whose save completed.",
            )
            for file, size, end in short_files(self.path, self.metadata)
        ]
        if problems:
            raise InvalidConfigError(problems, context="hf export")

    def key(self, role: str, layer: bool) -> Optional[str]:
        """Megatron's key of a role, as this checkpoint names it (either layer spec), or None."""
        names = [PREFIX + "decoder.layers." + k for k in LAYER_KEYS[role]] if layer else [PREFIX + GLOBAL_KEYS[role]]
        return next((k for k in names if k in self.metadata.state_dict_metadata), None)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.metadata.state_dict_metadata[key].size)

    def shape_problems(self, arch: Architecture) -> list[Problem]:
        """The recipe's tensors against the checkpoint's: each one missing or of another shape, named."""
        problems = []
        layers = arch.spec.num_layers
        wanted = [(t.role, True, (layers, *t.shape)) for t in arch.layer_tensors()]
        wanted += [(t.role, False, t.shape) for t in arch.global_tensors()]
        for role, layer, shape in wanted:
            key = self.key(role, layer)
            if key is None:
                problems.append(
                    Problem(
                        role, None, "the recipe's model has this tensor; the checkpoint does not.",
                        "export with the recipe (and overrides) the checkpoint was trained with.",
                    )
                )  # fmt: skip
            elif self.shape(key) != shape:
                problems.append(
                    Problem(
                        key.removeprefix(PREFIX), list(self.shape(key)),
                        f"has this shape in the checkpoint; the recipe's model has {list(shape)}.",
                        "export with the recipe (and overrides) the checkpoint was trained with.",
                    )
                )  # fmt: skip
        return problems

    def read(self, key: str, layer: Optional[int] = None) -> Any:
        """The tensor `key`, or its slice at `layer` on the leading layer axis, read from the files."""
        import torch
        import torch.distributed.checkpoint as dcp

        entry = self.metadata.state_dict_metadata[key]
        shape = tuple(entry.size)
        offsets = (0,) * len(shape)
        if layer is not None:
            shape, offsets = (1, *shape[1:]), (layer,) + offsets[1:]
        target = torch.empty(shape, dtype=entry.properties.dtype)
        with library_notices_silenced():  # that no process group runs: none is needed to read
            reader = dcp.FileSystemReader(str(self.path))
            # The index read once, by open(): unpickled again for every read it cost a third of an export's time.
            reader.read_metadata = lambda *args, **kwargs: self.metadata
            try:
                dcp.load({key: target}, storage_reader=reader, planner=_region_planner(offsets))
            except (pickle.UnpicklingError, dcp.api.CheckpointException) as error:
                raise self._unloadable(key, error) from None
        return target[0] if layer is not None else target

    def _unloadable(self, key: str, error: Exception) -> InvalidConfigError:
        """A tensor item that torch's weights-only loader refused (nothing of it ran): damaged, or made to run code."""
        files = sorted({str(self.path / info.relative_path) for index, info in self.metadata.storage_data.items()
                        if index.fqn == key})  # fmt: skip
        named = _GLOBAL.search(str(error))
        why = f"names {named.group(1)}, which no tensor holds" if named else type(error).__name__
        return _problem(
            ", ".join(files),
            f"holds an item of {key.removeprefix(PREFIX)} that does not load as a tensor ({why}); nothing of it ran.",
            "export a checkpoint you trust; this one is damaged, or made to run code on whoever loads it.",
        )


def _region_planner(offsets: tuple[int, ...]) -> Any:
    """A load planner that reads the part of each requested tensor at `offsets` (as large as the tensor given):
    only the saved chunks that overlap it. Built when called, so that torch is imported only by a read."""
    import torch
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
    from torch.distributed.checkpoint.planner import LoadPlan
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

    class Region(DefaultLoadPlanner):
        def create_local_plan(self) -> LoadPlan:
            items = []
            for fqn, tensor in self.state_dict.items():
                wanted = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=tensor.size())
                items += create_read_items_for_chunk_list(fqn, self.metadata.state_dict_metadata[fqn], [wanted])
            return LoadPlan(items)

        def lookup_tensor(self, index: Any) -> Any:
            # The read items carry the region's global offsets; the tensor given is the region itself.
            return self.state_dict[index.fqn]

    return Region()
