"""Where a run trained, as the run itself recorded it: a GPU ("cuda") or the CPU. Standard library only.

Two records say it, and both are read: Lightning's line at the start of every training process (`GPU available:
True (cuda), used: True`, on global rank 0's output), and the smoke callback's `launch` events in a `smoke --dir`
directory's `metrics.jsonl` (`device: cpu` when the CPU compatibility layer ran the step). A card claims a GPU; a
run timed on the CPU says nothing about that GPU, and calibrating on it moves the planner off the hardware.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

#: Lightning's trainer prints this once per process (lightning/pytorch/trainer/setup.py, `_log_device_info`).
_LIGHTNING = re.compile(r"GPU available: (?:True|False)(?: \((?P<kind>\w+)\))?, used: (?P<used>True|False)")
#: The smoke callback's record of each launch (smoke_training/worker.py), beside the phases' logs.
SMOKE_METRICS = "metrics.jsonl"
CPU, GPU = "cpu", "cuda"


@dataclass
class Device:
    """The device a run trained on (`cpu`, `cuda`, or None when nothing recorded it) and where that was read;
    `cpu` wins when the records differ (one process on the CPU is enough to make the step times a CPU's)."""

    name: Optional[str] = None
    evidence: list[str] = field(default_factory=list)

    def add(self, name: str, where: str) -> None:
        if where not in self.evidence:
            self.evidence.append(where)
        if self.name != CPU:
            self.name = name


def lightning_device(line: str) -> Optional[str]:
    """`cpu` or `cuda` when `line` is Lightning's device line, else None."""
    found = _LIGHTNING.search(line) if "GPU available:" in line else None
    if found is None:
        return None
    return (found["kind"] or GPU) if found["used"] == "True" else CPU


def recorded_device(logs: Iterable[Path], directory: Optional[Path]) -> Device:
    """The device the run's logs and its `smoke --dir` record name (see `Device`)."""
    device = Device()
    for log in logs:
        try:
            with open(log, errors="replace") as handle:
                for number, line in enumerate(handle, 1):
                    name = lightning_device(line)
                    if name is not None:
                        device.add(name, f"{log}:{number}: {line.strip()[-60:]}")
        except OSError:  # read_run has read it already; a log gone since says nothing either way
            continue
    metrics = directory / SMOKE_METRICS if directory is not None else None
    if metrics is not None and metrics.is_file():
        try:
            with open(metrics, errors="replace") as handle:
                for number, line in enumerate(handle, 1):
                    if '"launch"' not in line:
                        continue
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(record, dict) or record.get("event") != "launch":
                        continue
                    name = record.get("device")
                    if name in (CPU, GPU):
                        device.add(name, f"{metrics}:{number}: launch device {name}")
        except OSError:
            pass
    return device
