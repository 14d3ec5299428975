"""Safetensors files written one tensor at a time: the header (every name, dtype, shape and offset) is written first,
from the shapes the architecture gives, then each tensor's bytes as the conversion makes it. So an export holds the
layer it is converting, not a shard of the model (safetensors' own `save_file` takes every tensor of a file at once).

The format: an 8-byte little-endian header length, a JSON header padded with spaces to a multiple of 8 bytes
(name -> dtype, shape, data_offsets relative to the end of the header; `__metadata__`), then the data, contiguous,
in offset order (safetensors' reader refuses gaps and overlaps).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Optional

#: torch dtype names -> safetensors'.
NAMES = {
    "bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip


@dataclass(frozen=True)
class Planned:
    key: str
    shape: tuple[int, ...]
    dtype: Any  # a torch dtype

    @property
    def nbytes(self) -> int:
        count = self.dtype.itemsize
        for n in self.shape:
            count *= n
        return count


def plan_files(tensors: list[Planned], shard_bytes: int) -> list[list[Planned]]:
    """The tensors, in order, split into files of at most `shard_bytes` (a tensor larger than that alone)."""
    files: list[list[Planned]] = [[]]
    size = 0
    for tensor in tensors:
        if files[-1] and size + tensor.nbytes > shard_bytes:
            files.append([])
            size = 0
        files[-1].append(tensor)
        size += tensor.nbytes
    return files


class StreamingFile:
    """One safetensors file: made, it writes the header for `planned`; `write` takes the tensors in that order, each
    checked against its plan (a conversion that makes another tensor than planned is a bug, not a user's error)."""

    def __init__(self, path: Path, planned: list[Planned], metadata: Optional[dict[str, str]] = None):
        self.path, self.planned = path, planned
        self.next = 0
        header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
        offset = 0
        for tensor in planned:
            header[tensor.key] = {"dtype": NAMES[str(tensor.dtype).removeprefix("torch.")], "shape": list(tensor.shape),
                                  "data_offsets": [offset, offset + tensor.nbytes]}  # fmt: skip
            offset += tensor.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.handle: BinaryIO = path.open("wb")
        self.handle.write(struct.pack("<Q", len(raw)) + raw)

    def write(self, key: str, tensor: Any) -> None:
        import torch

        want = self.planned[self.next]
        if key != want.key or tuple(tensor.shape) != want.shape or tensor.dtype != want.dtype:
            raise RuntimeError(
                f"{self.path.name}: the conversion made {key} {list(tensor.shape)} {tensor.dtype}; the header "
                f"planned {want.key} {list(want.shape)} {want.dtype}"
            )
        self.handle.write(memoryview(tensor.contiguous().view(-1).view(torch.uint8).numpy()))
        self.next += 1

    def close(self) -> None:
        self.handle.close()
        if self.next != len(self.planned):
            raise RuntimeError(f"{self.path.name}: {len(self.planned) - self.next} planned tensors never came")
