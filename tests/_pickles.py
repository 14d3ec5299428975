"""Pickles that run code when they are read (issue 47, class 1), planted into the files of a real checkpoint: each
creates a marker file through a callable no checkpoint names, so a test sees both the refusal and that nothing ran.
The index is rewritten through torch (these are the tests' own files), then left for the code under test to read."""

from __future__ import annotations

import builtins
import dataclasses
import io
import os
import pickle
import subprocess
from pathlib import Path
from typing import Any, Callable

#: How a planted pickle runs code: the callable it names and the arguments that make it create `marker`.
CALLS = {
    "os.system": lambda marker: (os.system, (f"touch {marker}",)),
    "subprocess.call": lambda marker: (subprocess.call, (["touch", str(marker)],)),
    "builtins.exec": lambda marker: (builtins.exec, (f"open({str(marker)!r}, 'w').close()",)),
    "pathlib.Path.touch": lambda marker: (Path.touch, (Path(marker),)),
}


class RunsCode:
    """Unpickled, creates `marker` through `call` (a name of CALLS)."""

    def __init__(self, marker: Path, call: str = "os.system") -> None:
        self.marker, self.call = marker, call

    def __reduce__(self) -> Any:
        return CALLS[self.call](self.marker)


def live(payload: bytes, marker: Path) -> bool:
    """Whether plain pickle runs the payload (the test's proof that what it plants is real); the marker removed."""
    pickle.loads(payload)
    ran = marker.exists()
    marker.unlink(missing_ok=True)
    return ran


def _index(weights: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(str(weights)).read_metadata()


def _write_index(weights: Path, metadata: Any) -> None:
    with open(weights / ".metadata", "wb") as file:
        pickle.dump(metadata, file)


def plant_index(weights: Path, marker: Path, call: str = "os.system") -> Path:
    """The checkpoint's own index, with a pickle that runs code where torch keeps a planner's data."""
    metadata = _index(weights)
    metadata.planner_data = {"plan": RunsCode(marker, call)}
    _write_index(weights, metadata)
    return weights / ".metadata"


def plant_common(weights: Path, marker: Path, call: str = "os.system") -> Path:
    """`common.pt` (a torch.save file) holding, beside its usual keys, a pickle that runs code."""
    import torch

    torch.save({"state_dict": {}, "content_metadata": RunsCode(marker, call)}, weights / "common.pt")
    return weights / "common.pt"


def plant_object(weights: Path, marker: Path, call: str = "os.system") -> Path:
    """The first object saved among the tensors (a torch.save blob in a .distcp file) replaced by one that runs
    code: appended to its file, the index pointed at it."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    return _plant_item(weights, marker, call, lambda entry: isinstance(entry, BytesStorageMetadata))


def plant_tensor(weights: Path, marker: Path, call: str = "os.system") -> Path:
    """As plant_object, the first tensor item (torch.load reads each, weights only)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    return _plant_item(weights, marker, call, lambda entry: isinstance(entry, TensorStorageMetadata))


def _plant_item(weights: Path, marker: Path, call: str, kind: Callable[[Any], bool]) -> Path:
    import torch

    metadata = _index(weights)
    key, info = next((k, v) for k, v in metadata.storage_data.items() if kind(metadata.state_dict_metadata[k.fqn]))
    blob = io.BytesIO()
    torch.save(RunsCode(marker, call), blob)
    file = weights / info.relative_path
    offset = file.stat().st_size
    with open(file, "ab") as out:
        out.write(blob.getvalue())
    metadata.storage_data[key] = dataclasses.replace(info, offset=offset, length=len(blob.getvalue()))
    _write_index(weights, metadata)
    return file


PLANTS = {"index": plant_index, "common.pt": plant_common, "object": plant_object}
