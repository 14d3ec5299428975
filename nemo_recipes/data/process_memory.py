"""This process's memory: how much of it is resident now, and giving back to the system what malloc holds freed.
Linux and glibc; elsewhere the first says None and the second does nothing. Standard library only."""

from __future__ import annotations

import contextlib
import os
from typing import Optional


def resident_bytes() -> Optional[int]:
    """Resident memory now (/proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def give_back_freed_memory() -> None:
    """Return to the system the pages malloc holds freed (malloc_trim): a process that freed much on threads, or
    after many allocations of every size, keeps it resident otherwise, and its RSS stays at its high-water mark."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # another C library: nothing to trim this way
        ctypes.CDLL(None).malloc_trim(0)  # None: the symbols already loaded in this process (glibc's among them)
