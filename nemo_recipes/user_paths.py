"""The paths users give us, checked before use: the one place every verb asks (standard library only, so the fast
verbs import it too).

- `not_regular`: a file we read or write must be a regular file. `open()` of a named pipe waits for a writer (or a
  reader) for ever, /dev/zero and /dev/stdin never end, a socket cannot be opened, and a directory where a file is
  expected fails deep inside a library: each is refused at once, with the field and the fix.
- `overlap_problems`: an output that is, contains or lies inside one of the command's inputs is refused before
  anything is written: writing it (with --force, replacing it) would destroy the input it is made from.
- `exclusive`: one command at a time writes an output; a second one is refused instead of racing the first.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Callable, Iterable, Iterator, Optional

from nemo_recipes.errors import Problem


def _what(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"


def not_regular(path: "str | os.PathLike[str]", field: str, fix: str, *, output: bool = False) -> Optional[Problem]:
    """The Problem of a `path` that exists and is not a regular file (a directory, a pipe, a socket, a device:
    symbolic links followed); None for a regular file and for a path that does not exist, which the caller reports
    in its own words (for an output, it is created)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, or not a name the system looks up: the caller's open() says why
        return None
    if stat.S_ISREG(mode):
        return None
    what = _what(mode)
    if output:
        why = f"is {what}, not a regular file: the output cannot be written there."
    elif stat.S_ISDIR(mode):
        why = f"is {what}, where a file is expected."
    else:
        why = f"is {what}, not a regular file: reading it could wait for ever or never end."
    return Problem(field, str(path), why, fix)


def output_problems(
    out: "str | os.PathLike[str]",
    inputs: Iterable["tuple[str, str | os.PathLike[str] | None]"],
    field: str,
    *,
    directory: bool = False,
) -> list[Problem]:
    """The one check of an output path before anything is written: an existing `out` of the wrong kind (for a file,
    anything but a regular file; for a `directory`, anything but a directory), and `overlap_problems`."""
    if directory:
        try:
            mode: Optional[int] = os.stat(out).st_mode
        except (OSError, ValueError):
            mode = None
        wrong = None
        if mode is not None and not stat.S_ISDIR(mode):
            what = "a file" if stat.S_ISREG(mode) else _what(mode)
            wrong = Problem(field, str(out), f"is {what}, not a directory.", f"give {field} a new or empty directory.")
    else:
        wrong = not_regular(out, field, "give the path of a new or regular file.", output=True)
    return ([wrong] if wrong is not None else []) + overlap_problems(out, inputs, field)


def overlap_problems(
    out: "str | os.PathLike[str]", inputs: Iterable["tuple[str, str | os.PathLike[str] | None]"], field: str
) -> list[Problem]:
    """The Problems of an output `out` that is, contains or lies inside one of `inputs` ((field, path) pairs; a
    None path is skipped), both resolved (symbolic links, `..`) as the system will see them."""
    try:
        target = os.path.realpath(out)
    except (OSError, ValueError):
        return []
    problems = []
    for name, given in inputs:
        if given is None or given == "":
            continue
        try:
            source = os.path.realpath(given)
        except (OSError, ValueError):
            continue
        if target == source:
            how = f"is the input {name}"
        elif _inside(target, source):
            how = f"lies inside the input {name} ({given})"
        elif _inside(source, target):
            how = f"contains the input {name} ({given})"
        else:
            continue
        problems.append(
            Problem(field, str(out), f"{how}: writing it would change or delete what it is made from.", _FIX)
        )
    return problems


_FIX = "give an output path outside every input (neither the input itself, nor inside it, nor above it)."


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory and path != directory


@contextlib.contextmanager
def exclusive(
    lock: "str | os.PathLike[str]", refusal: Callable[[], Exception], *, remove: bool = False
) -> Iterator[None]:
    """Hold the lock file `lock` while the block runs; raise `refusal()` at once when another process holds it.
    The kernel releases it when this process ends, killed or not. With `remove`, the file is removed at the end
    (while still held); a process that opened it before the removal and locks it after finds it no longer at
    `lock` and is refused as well, since it lost the race to the one that removed it."""
    import fcntl  # here: only the verbs that write take a lock

    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if remove and os.stat(lock).st_ino != os.fstat(handle.fileno()).st_ino:
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            raise refusal() from None
        try:
            yield
        finally:
            if remove:
                with contextlib.suppress(OSError):
                    os.unlink(lock)
