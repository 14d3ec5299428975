"""The smoke run's record: one JSON line per event, written by global rank 0 while NeMo's loop trains.

Read by the runner as it grows (progress display) and at the end (the judgement). Standard library only, so that
the runner reads it without importing torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def append(path: str | Path, record: dict[str, Any]) -> None:
    with open(path, "a+b") as stream:
        # A run killed in the middle of a write (a preempted Slurm job) leaves a partial line: start a new one.
        torn = False
        if stream.seek(0, 2) > 0:
            stream.seek(-1, 2)
            torn = stream.read(1) != b"\n"
        stream.write((("\n" if torn else "") + json.dumps(record) + "\n").encode("utf-8"))
        stream.flush()


def read(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    records = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) - 1:  # the line being written right now
                break
            # otherwise the torn line of a killed run; the records after it are whole
    return records
