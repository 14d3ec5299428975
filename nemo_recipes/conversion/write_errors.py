"""A write that failed (a full disk, a file size limit), as torch's writers report it, told apart from any other
failure: `torch.distributed.checkpoint` wraps each rank's OSError in a CheckpointException (a BaseException, not an
OSError), and `torch.save`'s zip writer turns a short write into a RuntimeError. And what the user is told: an --out
with no room or no write permission is the user's to fix (exit 2, field, value and fix), as a full `smoke --dir` or
`data prepare --out` is; any other failed write is exit 1. Standard library only."""

from __future__ import annotations

import errno
import os
import shlex
from pathlib import Path
from typing import Optional

from nemo_recipes.errors import NO_ROOM_ERRNOS, READ_ONLY_ERRNOS, InvalidInputError, Problem


class ExportWriteError(Exception):
    """The model could not be written for a reason that is not the user's to fix: nothing was left."""


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
        # A short write is a write the file system had no room for (its reason, ENOSPC or EFBIG, is lost on the way).
        return OSError(errno.ENOSPC, "a write came back short (the disk is full, or a file size limit was reached)")
    return None


def unwritable(target: Path, error: OSError, context: str) -> Exception:
    """What to raise when writing `target` (the --out of an export or an import) failed with `error`; the partial
    directory is already removed."""
    why = error.strerror or str(error)
    if error.errno in NO_ROOM_ERRNOS:
        problem = Problem(
            "--out",
            str(target),
            f"has no room: writing it failed ({why}); nothing was written there.",
            f"free space there (df -h {shlex.quote(str(target.parent))}) or give --out a directory on another file "
            "system.",
        )
        return InvalidInputError([problem], context=context)
    if error.errno in READ_ONLY_ERRNOS:
        problem = Problem(
            "--out",
            str(target),
            f"cannot be written ({why}); nothing was written there.",
            "give --out a directory you can write.",
        )
        return InvalidInputError([problem], context=context)
    return ExportWriteError(f"cannot write {target}: {why}; nothing was written there.")


def staged(target: Path, context: str) -> Path:
    """The directory beside `target` (an --out) that the output is written into and then renamed, made."""
    stage = target.parent / f".{target.name}.partial-{os.getpid()}"
    try:
        stage.mkdir(parents=True)
    except OSError as error:
        raise not_made(target, stage, error, context) from None
    return stage


def not_made(target: Path, made: Path, error: OSError, context: str) -> Exception:
    """The error of an --out where `made` (the output's stage or its parent) could not be created. An --out where no
    directory can be made (under /proc, below a file, on a read-only disk) is the user's to fix, as a full one is:
    exit 2 with the field, whatever the system's reason (/proc answers ENOENT)."""
    if error.errno in NO_ROOM_ERRNOS or error.errno in READ_ONLY_ERRNOS:
        return unwritable(target, error, context)
    problem = Problem(
        "--out",
        str(target),
        f"cannot be made: creating {made} failed ({error.strerror or error}); nothing was written.",
        "give --out a new directory's path on a disk you can write (not under /proc or /sys, nor below a file).",
    )
    return InvalidInputError([problem], context=context)
