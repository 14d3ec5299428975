"""Following a live run: its logs read as they grow, and the two states a reader of finished logs cannot see, a stall
(no new step for a while) and a failure (a stall whose writer is gone). Standard library only.

Whether a run is alive is read from the machine, not guessed from the log: a process that holds one of the run's
logs open is its writer (the smoke launcher and the processes it starts, NeMo-Run's local job, slurmstepd on the
node). Linux's /proc shows this for the user's own processes; elsewhere the writer is unknown and a stall ends the
watch as a failure, since nothing else could say the job is alive."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from nemo_recipes.watching.progress_log import ProgressLine, parse_line

#: A stall is no new step for STALL_STEPS x the median step time, and never less than STALL_FLOOR_S: a checkpoint
#: save, an evaluation or a slow data shard stops the steps for minutes without anything being wrong.
STALL_STEPS = 10
STALL_FLOOR_S = 600.0
#: Before the first step, the bound on the wait for it: model construction, the data's index build and the first
#: compilations take minutes on a large job.
STARTUP_S = 1800.0
#: A stall whose writer still holds the log is followed this many bounds longer (a hung collective can recover, a
#: slow filesystem can catch up) before the watch stops: every wait is bounded.
HUNG_BOUNDS = 3
#: Bytes before the offset compared at each look, to see a file rewritten from its start.
_MARK = 256
#: Seconds between looks at the logs.
POLL_S = 2.0


@dataclass
class Tail:
    """One log read as it grows: complete lines only (a line being written is read when its newline lands), from
    the start again when the file is replaced or shortened (a requeued job writing the same name)."""

    path: Path
    lines: list[ProgressLine] = field(default_factory=list)
    earlier: list[list[ProgressLine]] = field(default_factory=list)  # what the file held before each replacement
    _offset: int = 0
    _inode: Optional[int] = None
    _line_number: int = 0
    _seen: bytes = b""  # the last bytes read, up to the offset

    def _same_before_offset(self) -> bool:
        """Whether the file still holds what was read just before the offset: Slurm truncates a requeued job's
        output and the new run may have written past the old offset by the next look, which size alone misses."""
        if not self._seen:
            return True
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset - len(self._seen))
                return handle.read(len(self._seen)) == self._seen
        except OSError:
            return True

    def processes(self) -> list[list[ProgressLine]]:
        """The lines of each version of the file, oldest first (for figures(): each is a process's log)."""
        return [*self.earlier, self.lines]

    def read(self) -> list[ProgressLine]:
        """The progress lines that landed since the last read (all of them again after a replacement)."""
        try:
            stat = self.path.stat()
        except OSError:
            return []
        if stat.st_ino != self._inode or stat.st_size < self._offset or not self._same_before_offset():
            if self.lines:  # a requeue that truncated the file: its earlier process is still part of the run
                self.earlier.append(self.lines)
            self._inode, self._offset, self._line_number, self.lines, self._seen = stat.st_ino, 0, 0, [], b""
        if stat.st_size == self._offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read(stat.st_size - self._offset)
        end = data.rfind(b"\n") + 1
        self._offset += end
        self._seen = (self._seen + data[:end])[-_MARK:]
        new = []
        for raw in data[:end].splitlines():
            self._line_number += 1
            parsed = parse_line(raw.decode("utf-8", errors="replace"), self._line_number)
            if parsed is not None:
                new.append(parsed)
        self.lines.extend(new)
        return new


def writer_alive(paths: Iterable[Path]) -> Optional[bool]:
    """Whether a process on this machine holds one of `paths` open; None where /proc cannot tell (not Linux)."""
    wanted = set()
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        wanted.add((stat.st_dev, stat.st_ino))
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    me = str(os.getpid())
    for pid in pids:
        if pid == me:
            continue
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # another user's process, or one that just ended
            continue
        for fd in descriptors:
            try:
                stat = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (stat.st_dev, stat.st_ino) in wanted:
                return True
    return False


def stall_bound(step_time_s: Optional[float], started: bool, given: Optional[float]) -> float:
    """Seconds without a new step that make a stall: `given` (--stall-after), else STALL_STEPS x the step time with
    STALL_FLOOR_S below it, and STARTUP_S before the first step."""
    if given is not None:
        return given
    if not started:
        return STARTUP_S
    return max(STALL_FLOOR_S, STALL_STEPS * (step_time_s or 0.0))
