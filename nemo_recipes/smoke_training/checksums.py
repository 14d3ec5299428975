"""Digests of training state (weights, optimizer moments, schedule), to compare the state a checkpoint was saved from
with the state a fresh process loaded from it, and the weights of data-parallel replicas with each other.

A digest covers the exact bytes of every tensor (with its name, dtype and shape), so equal digests mean bit-equal
state; it is short enough for one line of the smoke record. Imported inside the training processes only (torch).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

#: The parts of the training state a resume must restore, as the smoke record digests them (`state.py`) and the
#: judge names them.
COMPONENTS = ("weights", "main weights", "Adam moments", "Adam step", "schedule")


def digest(named: Iterable[tuple[str, Any]]) -> str:
    """sha256 (first 16 hex digits) over (name, value) pairs in name order. Tensors contribute dtype, shape and raw
    bytes; anything else its repr (a step count, a learning rate). Names must be unique."""
    import torch

    h = hashlib.sha256()
    for name, value in sorted(named, key=lambda item: item[0]):
        h.update(name.encode("utf-8") + b"\0")
        if isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"{tensor.dtype}{tuple(value.shape)}".encode("ascii"))
            # Viewed as bytes: numpy has no bfloat16, and bytes compare every bit (NaN payloads and -0.0 included).
            h.update(tensor.view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(value).encode("utf-8"))
        h.update(b"\1")
    return h.hexdigest()[:16]


def per_rank(value: Any, group: Any = None) -> list[Any]:
    """`value` from every rank of `group` (the world by default), in rank order; [value] without a process group.
    A collective: every rank of the group must call it."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    values: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(values, value, group=group)
    return values
