"""The smoke run's record: one JSON line per event, written by global rank 0 while NeMo's loop trains.

Read by the runner as it grows (progress display) and at the end (the judgement). Standard library only, so that
the runner reads it without importing torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def append(path: str | Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")
        stream.flush()


def read(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # the line being written right now
            break
    return records
