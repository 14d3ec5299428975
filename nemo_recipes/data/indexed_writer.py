"""Megatron-Core's indexed dataset files (`PREFIX.bin` and `PREFIX.idx`), written with NumPy alone: the bytes of
`megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder` for documents of one sequence each (`add_document`)
and for the concatenation of whole datasets (`add_index`), checked byte for byte against it in
tests/test_data_indexed_writer.py. Megatron-Core's module imports torch (and, with it, seconds of start-up in every
worker and in the merge of `data prepare`); this one does not. NumPy is imported inside the functions.

The `.idx` layout (indexed_dataset._IndexWriter): the magic `MMIDIDX\\0\\0`, version 1 (<Q), the dtype code (<B),
the sequence count (<Q), the document-index count (<Q: documents + 1), then the sequence lengths as int32, each
sequence's byte offset in the `.bin` as int64, and the document indices as int64 (a 0, then the number of sequences
after each document)."""

from __future__ import annotations

import errno
import os
import shutil
import struct
from pathlib import Path
from typing import Any, BinaryIO

from nemo_recipes.data.manifest import DTYPES

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEAD = struct.Struct("<9sQBQQ")
#: Megatron-Core's DType code of each NumPy dtype name.
CODES = {name: code for code, (name, _size) in DTYPES.items()}


def _code(dtype: Any) -> int:
    import numpy as np

    name = np.dtype(dtype).name
    if name not in CODES:
        raise ValueError(f"Megatron's indexed dataset has no dtype {name} (it has {', '.join(CODES)}).")
    return CODES[name]


def index_arrays(prefix: str | Path) -> tuple[Any, Any, Any]:
    """(dtype, sequence lengths int32, document indices int64) of the `.idx` at `prefix` (what add_index reads)."""
    import numpy as np

    with open(f"{prefix}.idx", "rb") as stream:
        data = stream.read()
    magic, version, code, sequences, documents = HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION or code not in DTYPES:
        raise ValueError(f"{prefix}.idx is not a Megatron index of version 1 (magic {magic!r}, version {version}).")
    lengths = np.frombuffer(data, dtype="<i4", count=sequences, offset=HEAD.size)
    indices = np.frombuffer(data, dtype="<i8", count=documents, offset=HEAD.size + 12 * sequences)
    return np.dtype(DTYPES[code][0]), lengths, indices


def _append(source: BinaryIO, target: BinaryIO) -> None:
    """`source` copied to the end of `target` by the kernel (copy_file_range: no pass through Python's buffers, 0.035
    s instead of 0.09 s for 120 MB here), or by reads and writes where the file systems cannot."""
    target.flush()
    size = left = os.fstat(source.fileno()).st_size
    try:
        while left > 0:
            copied = os.copy_file_range(source.fileno(), target.fileno(), left)
            if copied == 0:  # the source is shorter than its size said: the reads below say how it ends
                break
            left -= copied
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    if left:  # where the kernel could not: the rest by reads and writes, from the buffered files' own positions
        source.seek(size - left)
        target.seek(0, os.SEEK_END)
        shutil.copyfileobj(source, target, 16 << 20)
    else:
        target.seek(0, os.SEEK_END)  # the buffered file's own position, after the kernel moved the descriptor's


class IndexedWriter:
    """One dataset being written: the `.bin` streamed as documents come, the `.idx` at `finalize`."""

    def __init__(self, bin_path: str | Path, dtype: Any) -> None:
        import numpy as np

        self.dtype = np.dtype(dtype)
        self.code = _code(self.dtype)
        self._bin: BinaryIO = open(bin_path, "wb")
        self._lengths: list[Any] = []
        self._indices: list[Any] = [np.zeros(1, dtype=np.int64)]
        self._sequences = 0

    def add_documents(self, tokens: Any, lengths: Any) -> None:
        """Documents of one sequence each, their tokens concatenated: what add_document does for each in turn."""
        import numpy as np

        tokens = np.asarray(tokens).astype(self.dtype, copy=False)
        lengths = np.asarray(lengths, dtype=np.int32)  # the .idx's own type: 4 bytes a document held until finalize
        total = int(lengths.sum(dtype=np.int64))
        if total != tokens.size:
            raise ValueError(f"{tokens.size} tokens, but the document lengths add up to {total}.")
        self._bin.write(tokens.tobytes(order="C"))
        self._lengths.append(lengths)
        first = self._sequences
        self._indices.append(np.arange(first + 1, first + len(lengths) + 1, dtype=np.int64))
        self._sequences += len(lengths)

    def add_index(self, prefix: str | Path) -> None:
        """A whole dataset at `prefix` (of this dtype) appended: its sequences, documents and `.bin` bytes."""
        dtype, lengths, indices = index_arrays(prefix)
        if dtype != self.dtype:
            raise ValueError(f"{prefix}.idx holds {dtype.name} tokens; this dataset is {self.dtype.name}.")
        self._lengths.append(lengths.astype("int32"))
        self._indices.append(indices[1:] + self._sequences)
        self._sequences += len(lengths)
        with open(f"{prefix}.bin", "rb") as source:
            _append(source, self._bin)

    def sync(self) -> None:
        """What is written so far to the disk (fdatasync), so that the last sync before the rename has only the tail
        to write."""
        self._bin.flush()
        os.fdatasync(self._bin.fileno())

    def finalize(self, idx_path: str | Path) -> None:
        """Close the `.bin` and write the `.idx`."""
        import numpy as np

        self._bin.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
        pointers *= self.dtype.itemsize
        indices = np.concatenate(self._indices)
        with open(idx_path, "wb") as stream:
            stream.write(HEAD.pack(MAGIC, VERSION, self.code, len(lengths), len(indices)))
            stream.write(lengths.astype("<i4").tobytes())
            stream.write(pointers.astype("<i8", copy=False).tobytes())
            stream.write(indices.astype("<i8", copy=False).tobytes())

    def close(self) -> None:
        """Close the `.bin` (after a failure; closing flushes, which may fail again on a full disk)."""
        try:
            self._bin.close()
        except OSError:
            pass
