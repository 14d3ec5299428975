"""A write that failed (a full disk, a file size limit), as torch's writers report it, told apart from any other
failure: `torch.distributed.checkpoint` wraps each rank's OSError in a CheckpointException (a BaseException, not an
OSError), and `torch.save`'s zip writer turns a short write into a RuntimeError. Standard library only."""

from __future__ import annotations

import errno
from typing import Optional

#: What torch's zip writer (caffe2's inline_container) says when a write came back short.
_ZIP_WRITER = ("PytorchStreamWriter failed writing", "inline_container.cc")


def write_failure(error: BaseException) -> Optional[OSError]:
    """The OSError behind `error` when it is a failed write, else None (a bug is not reported as a full disk)."""
    if isinstance(error, OSError):
        return error
    failures = getattr(error, "failures", None)  # CheckpointException: {rank: (exception, traceback)}
    if isinstance(failures, dict):
        for failure in failures.values():
            found = write_failure(failure[0] if isinstance(failure, tuple) else failure)
            if found is not None:
                return found
    if isinstance(error, RuntimeError) and any(mark in str(error) for mark in _ZIP_WRITER):
        return OSError(errno.EIO, "a write came back short (the disk is full, or a file size limit was reached)")
    return None
