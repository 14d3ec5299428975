"""The one reader of the pickles in a Megatron checkpoint: its index (`weights/.metadata`), `common.pt` and the
objects saved among its tensors (each a `torch.save` blob inside a `.distcp` file). A checkpoint is a file users are
handed, and unpickling calls whatever the file names (`os.system` as readily as a class), so every pickle this
package reads goes through here: a name outside `ALLOWED` (what a checkpoint's pickles hold, each harmless to call)
is refused before anything is called (`UnsafePickle`).

An allowed name resolves to an inert record that keeps its state as attributes (the planner, which must not import
torch, and the checks), or, for the exporter, which hands the index to torch.distributed.checkpoint, to the class
itself (`real=True`: torch imported then). Standard library only otherwise.

NeMo and Megatron unpickle the same files themselves when a run restores or resumes: the index with plain pickle
(torch's FileSystemReader), the objects too (torch's DefaultLoadPlanner, `weights_only=False`), `common.pt` with
torch's own restricted `weights_only` loader. `unsafe_pickle(weights)` checks all three before a run is handed a
checkpoint.
"""

from __future__ import annotations

import _compat_pickle
import importlib
import io
import pickle
import zipfile
from pathlib import Path
from typing import IO, Any, Optional

from nemo_recipes.errors import InvalidInputError, Problem

_DTYPES = (
    "float32 float64 float16 bfloat16 complex32 complex64 complex128 uint8 uint16 uint32 uint64 int8 int16 int32 "
    "int64 bool float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 qint8 "
    "quint8 qint32 quint4x2 quint2x4"
).split()
_STORAGES = [
    f"{kind}Storage"
    for kind in "Float Double Half BFloat16 Byte Char Short Int Long Bool ComplexFloat ComplexDouble QInt8 QUInt8 "
    "QInt32 QUInt4x2 QUInt2x4 Untyped Typed".split()
]
_REBUILD = [
    f"_rebuild_{kind}"
    for kind in "tensor tensor_v2 tensor_v3 parameter parameter_with_state qtensor sparse_tensor "
    "meta_tensor_no_storage nested_tensor device_tensor_from_numpy device_tensor_from_cpu_tensor".split()
]
#: Every global a checkpoint's pickles name, by module: containers; torch's sizes, dtypes, layouts, memory formats,
#: storages and tensor rebuilders (torch's own `weights_only` list); torch.distributed.checkpoint's index records and
#: Megatron's; what Megatron registers as safe for torch.load (numpy arrays, namespaces, paths, its enums). Each is a
#: class or function that builds a value from its arguments and runs nothing else.
ALLOWED: dict[str, frozenset[str]] = {
    module: frozenset(names.split())
    for module, names in {
        "builtins": "set frozenset tuple list dict int float complex str bytes bytearray bool slice object",
        "copyreg": "_reconstructor",
        "collections": "OrderedDict defaultdict Counter",
        "_codecs": "encode",
        "torch": "Size Tensor device strided sparse_coo contiguous_format channels_last preserve_format "
        + " ".join(_DTYPES + _STORAGES),
        "torch._utils": " ".join(_REBUILD),
        "torch._tensor": "_rebuild_from_type_v2",
        "torch.nn.parameter": "Parameter",
        "torch.serialization": "_get_layout",
        "torch.distributed.checkpoint.metadata": "Metadata TensorStorageMetadata BytesStorageMetadata "
        "ChunkStorageMetadata TensorProperties MetadataIndex StorageMeta _MEM_FORMAT_ENCODING",
        "torch.distributed.checkpoint.filesystem": "_StorageInfo",
        # Megatron's index keeps each rank's save plan
        "torch.distributed.checkpoint.planner": "SavePlan WriteItem WriteItemType TensorWriteData",
        "megatron.core.dist_checkpointing.strategies.torch": "MCoreMetadata MCoreSavePlan",
        "megatron.core.enums": "ModelType",
        "megatron.core.rerun_state_machine": "RerunDiagnostic RerunMode RerunState",
        "megatron.core.transformer.enums": "AttnBackend",
        "numpy": "ndarray dtype",
        "numpy.core.multiarray": "_reconstruct scalar",
        "numpy._core.multiarray": "_reconstruct scalar",
        "numpy.dtypes": "UInt32DType",
        "argparse": "Namespace",
        "types": "SimpleNamespace",
        "pathlib": "PosixPath",
        "_io": "BytesIO",
        "io": "BytesIO",
    }.items()
}
#: Resolved to the real thing even in an inert read: Python's own containers, and torch.Size as the tuple it is.
_PLAIN = {"builtins", "copyreg", "collections", "_codecs"}


class UnsafePickle(pickle.UnpicklingError):
    """A pickle that names something a checkpoint never holds: reading it on would call that."""

    def __init__(self, name: str, file: Optional[Path] = None) -> None:
        super().__init__(name)
        self.name, self.file = name, file

    def problem(self, field: str, fix: str) -> Problem:
        """The refusal as a Problem: the file that holds the pickle as its value."""
        return Problem(
            field,
            str(self.file),
            f"is a pickle that names {self.name}, which no checkpoint holds: reading it would run that (a file "
            "made to run code on whoever loads it); nothing of it was run.",
            fix,
        )


class _Inert:
    """Whatever allowed class the pickle names: its state kept as attributes, nothing run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        for part in state if isinstance(state, tuple) else (state,):
            if isinstance(part, dict):
                self.__dict__.update(part)


class _Reader(pickle.Unpickler):
    def __init__(self, stream: IO[bytes], real: bool) -> None:
        super().__init__(stream)
        self.real = real

    def find_class(self, module: str, name: str) -> Any:
        # Protocol 2 (torch.save's) writes Python 2's names, which plain pickle maps back before it imports.
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if name not in ALLOWED.get(module, ()):
            raise UnsafePickle(f"{module}.{name}")
        if self.real or module in _PLAIN:
            return getattr(importlib.import_module(module), name)
        if (module, name) == ("torch", "Size"):
            return lambda dims=(): tuple(dims)
        return type(name, (_Inert,), {})

    def persistent_load(self, pid: Any) -> Any:  # a tensor's storage in a torch.save file: its bytes are not read
        return _Inert(pid)


def load(stream: IO[bytes], real: bool = False) -> Any:
    """One pickle from `stream`, through the allow-list."""
    return _Reader(stream, real).load()


def read_index(weights: Path, real: bool = False) -> Any:
    """The checkpoint index (`weights/.metadata`): `.state_dict_metadata[key].size`, `.storage_data` values'
    `relative_path`, `offset`, `length`. Inert records, or torch's Metadata with `real`."""
    index = weights / ".metadata"
    with open(index, "rb") as file:
        try:
            return load(file, real)
        except UnsafePickle as error:
            error.file = index
            raise


def check_torch_file(stream: IO[bytes]) -> None:
    """Every pickle of a `torch.save` file (a zip archive, or the legacy format: a run of pickles), given as a
    seekable binary stream, through the allow-list, as inert records, streamed (a huge or compressed member is not
    held in memory); raises UnsafePickle. Damage is not this check's: a file that does not parse is left to the
    loader, which refuses it without running anything."""
    if zipfile.is_zipfile(stream):
        with zipfile.ZipFile(stream) as archive:
            for member in archive.namelist():
                if member.endswith(".pkl"):
                    with archive.open(member) as pickled:
                        _parsed(pickled)
        return
    stream.seek(0)
    for _ in range(5):  # magic number, protocol, system info, the data, its storage keys
        if not _parsed(stream):
            return


def _parsed(stream: IO[bytes]) -> bool:
    try:
        load(stream)
    except UnsafePickle:
        raise
    except Exception:  # noqa: BLE001  (not a pickle, or a damaged one: nothing was called)
        return False
    return True


def unsafe_pickle(weights: Path, index: Any = None) -> Optional[UnsafePickle]:
    """What NeMo and Megatron would unpickle from the checkpoint at `weights` (its index, `common.pt`, and every
    object among its tensors) checked: the first name refused, with its file, or None. `index`: the index read
    already (inert). A missing or damaged file is not this check's finding."""
    try:
        index = index if index is not None else read_index(weights)
        common = weights / "common.pt"
        if common.is_file():
            with open(common, "rb") as stream:
                _check_file(common, stream)
        objects: dict[str, list[Any]] = {}
        for key, info in index.storage_data.items():
            if type(index.state_dict_metadata.get(key.fqn)).__name__ == "BytesStorageMetadata":
                objects.setdefault(info.relative_path, []).append(info)
        for name, items in sorted(objects.items()):
            with open(weights / name, "rb") as file:
                for info in items:
                    file.seek(info.offset)
                    _check_file(weights / name, io.BytesIO(file.read(info.length)))
    except UnsafePickle as error:
        return error
    except Exception:  # noqa: BLE001  (a file missing or damaged: the readers refuse it, without running it)
        return None
    return None


def refuse_unsafe(weights: Path, field: str, fix: str) -> None:
    """Raises InvalidInputError (`field`, the file, `fix`) when the checkpoint at `weights` holds a pickle that names
    what no checkpoint holds: before the checkpoint is handed to NeMo or Megatron, which unpickle it plainly."""
    unsafe = unsafe_pickle(weights)
    if unsafe is not None:
        raise InvalidInputError([unsafe.problem(field, fix)], context=f"checkpoint {weights.parent}")


def _check_file(path: Path, stream: IO[bytes]) -> None:
    try:
        check_torch_file(stream)
    except UnsafePickle as error:
        error.file = path
        raise
