"""A Megatron distributed checkpoint (torch_dist, as a recipe's training saves `weights/`) written one layer at a
time: each tensor is made only when the writer reaches it and dropped once written, so memory holds one layer (or
the embedding), never the model.

Megatron saves a tensor with a leading layer axis as chunks at their offsets (a pipeline-parallel run's stages each
save theirs); this writer saves each layer as its own chunk of the stacked global tensor, which Megatron's loader
reads, and reshards, as it reads a pipeline-parallel run's. torch.distributed.checkpoint's planner normally builds
its plan from tensors already in memory; `_Lazy` plans from shapes alone and asks `produce` for the data when the
(single-threaded) file writer asks for it, in the order planned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Chunk:
    """One piece of the checkpoint: the tensor `key` (global shape `size`), whole, or its slice at `layer` on the
    leading layer axis."""

    key: str
    size: tuple[int, ...]
    layer: Optional[int] = None


def save_streaming(
    directory: Path,
    chunks: list[Chunk],
    produce: Callable[[Chunk], Any],
    dtype: Any,
    objects: Optional[dict[str, Any]] = None,
) -> None:
    """Write `chunks` (each made by `produce`, in the order given, as a tensor of the chunk's shape without the layer
    axis) and the non-tensor `objects` as a torch_dist checkpoint in the new directory `directory`."""
    import torch
    import torch.distributed.checkpoint as dcp

    from nemo_recipes.quiet import library_notices_silenced

    directory.mkdir(parents=True)
    planner = _planner(chunks, produce, dtype)
    # One thread: the writer then asks for the tensors in the planned order, one at a time.
    writer = dcp.FileSystemWriter(str(directory), thread_count=1)
    with library_notices_silenced():  # that no process group runs: one process writes the whole checkpoint
        dcp.save(dict(objects or {}), storage_writer=writer, planner=planner, no_dist=True)
    # Megatron's loader reads the backend from metadata.json and the non-tensor state from common.pt.
    backend = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
               "common_backend_version": 1}  # fmt: skip
    (directory / "metadata.json").write_text(json.dumps(backend), encoding="utf-8")
    content = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True,
               "distrib_optim_sharding_type": "dp_reshardable"}  # fmt: skip
    torch.save({"state_dict": {}, "content_metadata": content}, str(directory / "common.pt"))


def _planner(chunks: list[Chunk], produce: Callable[[Chunk], Any], dtype: Any) -> Any:
    """Built when called, so that torch is imported only by a write."""
    import dataclasses

    import torch
    from torch.distributed.checkpoint import DefaultSavePlanner
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
    from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType

    by_index: dict[tuple[str, tuple[int, ...]], Chunk] = {}
    items = []
    for chunk in chunks:
        offsets = torch.Size([chunk.layer or 0] + [0] * (len(chunk.size) - 1))
        sizes = torch.Size(chunk.size if chunk.layer is None else (1, *chunk.size[1:]))
        kind = WriteItemType.TENSOR if chunk.layer is None else WriteItemType.SHARD
        items.append(
            WriteItem(
                index=MetadataIndex(chunk.key, offsets),
                type=kind,
                tensor_data=TensorWriteData(
                    chunk=ChunkStorageMetadata(offsets=offsets, sizes=sizes),
                    properties=TensorProperties(dtype=dtype),
                    size=torch.Size(chunk.size),
                ),
            )
        )
        by_index[(chunk.key, tuple(offsets))] = chunk

    class _Lazy(DefaultSavePlanner):
        def create_local_plan(self) -> SavePlan:
            plan = super().create_local_plan()
            mappings = {**(plan.planner_data or {}), **{c.key: (c.key,) for c in chunks}}
            self.plan = dataclasses.replace(plan, items=[*plan.items, *items], planner_data=mappings)
            return self.plan

        def resolve_data(self, write_item: WriteItem) -> Any:
            chunk = by_index.get((write_item.index.fqn, tuple(write_item.index.offset or ())))
            if chunk is None:
                return super().resolve_data(write_item)
            tensor = produce(chunk).to(dtype).contiguous()
            return tensor if chunk.layer is None else tensor.unsqueeze(0)

    return _Lazy()
