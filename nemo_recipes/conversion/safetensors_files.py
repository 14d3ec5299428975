"""The tensors of a Hugging Face directory's safetensors files, each read from its file when asked for.

Not `safetensors.safe_open`: it maps the whole file into memory and hands out tensors backed by that map, so every
page a conversion touches stays resident (and counted in the process's RSS) until the file is closed: an import read
that way grows by a layer per layer converted, to the whole model. Here a tensor is read with plain file reads into
memory of its own, freed when it is dropped. The format is the safetensors one: an 8-byte little-endian header
length, a JSON header (name -> dtype, shape, data_offsets), then the data.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.yaml_files import keys_once

#: safetensors' dtype names -> (torch's attribute name, bytes per element).
DTYPES = {
    "BF16": ("bfloat16", 2), "F16": ("float16", 2), "F32": ("float32", 4), "F64": ("float64", 8),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1), "U8": ("uint8", 1),
    "BOOL": ("bool", 1), "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1),
}  # fmt: skip
MAX_HEADER = 100 * 2**20  # safetensors' own limit on the header's size
_KEYS = ("dtype", "shape", "data_offsets")


@dataclass(frozen=True)
class Entry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


@dataclass(frozen=True)
class Lie:
    """One thing a file's header says that is not so: about a tensor (`tensor`: its name, `value`: its entry as the
    header gives it), or about the whole file (`tensor` None)."""

    tensor: Optional[str]
    value: Any
    why: str


class HeaderError(ValueError):
    """A file that is not a readable safetensors file; `lies` says every reason at once."""

    def __init__(self, file: Path, lies: list[Lie]):
        self.file, self.lies = file, lies
        super().__init__("; ".join(f"{lie.tensor + ': ' if lie.tensor else ''}{lie.why}" for lie in lies))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_header(file: Path) -> dict[str, Entry]:
    """The tensors of `file`, its header checked against itself and the file before any byte is trusted: a dtype
    this reader knows, a shape of whole numbers, a byte range of exactly the shape's elements times the dtype's
    size, the ranges one after the other (safetensors' own reader refuses gaps and overlaps) and inside the file.
    HeaderError with every lie found."""
    size = file.stat().st_size
    with file.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise HeaderError(file, [Lie(None, size, f"is too short to be a safetensors file ({size} bytes)")])
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise HeaderError(file, [Lie(None, length, f"declares a {length:,}-byte header")])
        text = handle.read(length)
    try:
        header = json.loads(text, object_pairs_hook=keys_once)
    except (ValueError, RecursionError) as error:  # RecursionError: a header nested thousands of levels deep
        cut = " (the file ends inside it)" if len(text) < length else ""
        raise HeaderError(file, [Lie(None, length, f"has an unreadable header{cut}: {error}")]) from None
    if not isinstance(header, dict):
        raise HeaderError(file, [Lie(None, type(header).__name__, "has a header that is not a JSON object")])
    base = 8 + length
    entries: dict[str, Entry] = {}
    lies: list[Lie] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lie = _entry_lie(info)
        if lie:
            lies.append(Lie(name, info, lie))
            continue
        start, end = info["data_offsets"]
        entries[name] = Entry(file, info["dtype"], tuple(info["shape"]), base + start, base + end)
    lies += _layout_lies(header)
    ends = [e.end for e in entries.values()]
    if ends and max(ends) > size:
        lies.append(Lie(None, size, f"holds {size:,} bytes, fewer than its header points to (a truncated file)"))
    if lies:
        raise HeaderError(file, lies)
    return entries


def _entry_lie(info: Any) -> Optional[str]:
    """Why a tensor's entry cannot be read as it says, or None."""
    if not isinstance(info, dict) or sorted(info) != sorted(_KEYS):
        return f"is not an entry of {', '.join(_KEYS)} only"
    dtype, shape, offsets = (info[k] for k in _KEYS)
    if not isinstance(dtype, str) or dtype not in DTYPES:
        return f"has dtype {dtype!r}, which is not one this import reads ({', '.join(DTYPES)})"
    if not isinstance(shape, list) or not all(_whole(n) for n in shape):
        return "has a shape that is not a list of whole numbers of 0 or more"
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_whole(n) for n in offsets):
        return "has data_offsets that are not [start, end], two whole numbers of 0 or more"
    start, end = offsets
    if end < start:
        return f"has data_offsets that end before they start ({end:,} < {start:,})"
    size = math.prod(shape) * DTYPES[dtype][1]
    if end - start != size:
        return (
            f"has {end - start:,} bytes (data_offsets), but {dtype} x {shape} is {size:,} bytes: the header does not "
            "describe the data"
        )
    return None


def _layout_lies(header: dict[str, Any]) -> list[Lie]:
    """Byte ranges that overlap (two tensors read from one place) or leave a gap, in the order of the data: of every
    entry whose data_offsets are a range, whatever else its entry says."""
    ranges = []
    for name, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) and name != "__metadata__" else None
        if isinstance(offsets, list) and len(offsets) == 2 and all(_whole(n) for n in offsets):
            if offsets[0] <= offsets[1]:
                ranges.append((offsets[0], offsets[1], name))
    lies = []
    at, previous = 0, None
    for start, end, name in sorted(ranges):
        if start < at:
            lies.append(Lie(name, header[name], f"has data_offsets inside {previous}'s"))
        elif start > at:
            gap = f"starts {start - at:,} bytes after {previous or 'the header'} ends"
            lies.append(Lie(name, header[name], f"{gap}: a gap safetensors' reader refuses"))
        if end >= at:
            at, previous = end, name
    return lies


def read_tensor(entry: Entry) -> Any:
    """The tensor of a header `read_header` checked; HeaderError when the file changed since (cut short)."""
    import torch

    tensor = torch.empty(entry.shape, dtype=getattr(torch, DTYPES[entry.dtype][0]))
    size = entry.end - entry.start
    buffer = memoryview(tensor.view(-1).view(torch.uint8).numpy())
    with entry.file.open("rb") as handle:
        handle.seek(entry.start)
        if handle.readinto(buffer) != size:
            raise HeaderError(entry.file, [Lie(None, size, "ends inside a tensor (a truncated file)")])
    return tensor
