"""The tensors of a Hugging Face directory's safetensors files, each read from its file when asked for.

Not `safetensors.safe_open`: it maps the whole file into memory and hands out tensors backed by that map, so every
page a conversion touches stays resident (and counted in the process's RSS) until the file is closed: an import read
that way grows by a layer per layer converted, to the whole model. Here a tensor is read with plain file reads into
memory of its own, freed when it is dropped. The format is the safetensors one: an 8-byte little-endian header
length, a JSON header (name -> dtype, shape, data_offsets), then the data.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: safetensors' dtype names -> torch's attribute names.
DTYPES = {
    "BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}  # fmt: skip
MAX_HEADER = 100 * 2**20  # safetensors' own limit on the header's size


@dataclass(frozen=True)
class Entry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


class HeaderError(ValueError):
    """A file that is not a readable safetensors file."""


def read_header(file: Path) -> dict[str, Entry]:
    with file.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise HeaderError(f"{file} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise HeaderError(f"{file} declares a {length:,}-byte header")
        try:
            header = json.loads(handle.read(length))
        except ValueError as error:
            raise HeaderError(f"{file} has an unreadable header ({error})") from None
    base = 8 + length
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        entries[name] = Entry(file, info["dtype"], tuple(info["shape"]), base + start, base + end)
    size = file.stat().st_size
    if entries and max(e.end for e in entries.values()) > size:
        raise HeaderError(f"{file} holds {size:,} bytes, fewer than its header points to (a truncated file)")
    return entries


def read_tensor(entry: Entry) -> Any:
    import torch

    tensor = torch.empty(entry.shape, dtype=getattr(torch, DTYPES[entry.dtype]))
    size = entry.end - entry.start
    if tensor.numel() * tensor.element_size() != size:
        raise HeaderError(f"{entry.file}: {size:,} bytes for a {entry.dtype} tensor of shape {list(entry.shape)}")
    buffer = memoryview(tensor.view(-1).view(torch.uint8).numpy())
    with entry.file.open("rb") as handle:
        handle.seek(entry.start)
        if handle.readinto(buffer) != size:
            raise HeaderError(f"{entry.file} ends inside a tensor (a truncated file)")
    return tensor
