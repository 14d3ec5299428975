"""The progress lines NeMo 2.7.3 prints on global rank 0, parsed. Standard library only.

`ProgressPrinter` (nemo/lightning/pytorch/callbacks/progress_printer.py:134-158) prints, every `log_interval` steps,

    Training epoch 0, iteration 9/19 | lr: 0.0002 | global_step: 9 | reduced_train_loss: 6.91 |
    train_step_timing in s: 0.1029 | consumed_samples: 40    (one line)

`iteration` is the step within the epoch counted from 0, over `max_steps - 1`; each value is the mean over the
interval except `global_step` (the latest), written with 4 significant digits (integers without decimals);
`max_memory_reserved` / `max_memory_allocated` (bytes) join with `NEMO_LOG_MEMORY_USAGE=1` and `TFLOPS_per_GPU` with
`FLOPsMeasurementCallback`. `tests/test_watch.py` pins this against the output of a real run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

#: The prefix ProgressPrinter writes for a training step (Slurm's `srun --label` or a launcher may put text before).
_PREFIX = re.compile(r"Training epoch (?P<epoch>\d+), iteration (?P<iteration>\d+)/(?P<last>-?\d+)")
_METRIC = re.compile(r"\s*(?P<key>[^|:]+?):\s*(?P<value>\S+)\s*$")

STEP = "global_step"
LOSS = "reduced_train_loss"
STEP_TIME = "train_step_timing in s"
SAMPLES = "consumed_samples"
MEMORY_RESERVED = "max_memory_reserved"
MEMORY_ALLOCATED = "max_memory_allocated"
TFLOPS = "TFLOPS_per_GPU"


@dataclass(frozen=True)
class ProgressLine:
    """One progress line: the step it ends, the run's max steps and the metrics (means over the interval)."""

    line_number: int  # 1-based, in the text it was read from
    epoch: int
    step: int  # the global step after this interval (NeMo counts steps from 1 here)
    max_steps: int
    metrics: dict[str, float] = field(default_factory=dict)

    def get(self, key: str) -> Optional[float]:
        return self.metrics.get(key)


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def parse_line(line: str, line_number: int = 0) -> Optional[ProgressLine]:
    """The progress line in `line`, or None when it holds none."""
    found = _PREFIX.search(line)
    if found is None:
        return None
    metrics: dict[str, float] = {}
    for part in line[found.end() :].split("|")[1:]:
        pair = _METRIC.match(part)
        if pair is None:
            continue
        value = _number(pair["value"])
        if value is not None:
            metrics[pair["key"].strip()] = value
    last = int(found["last"])
    step_value = metrics.get(STEP)
    # `global_step` is logged before the step counter advances: the step the interval ends is global_step + 1, which
    # is also `iteration + 1` within the first epoch.
    step = int(step_value) + 1 if step_value is not None and math.isfinite(step_value) else int(found["iteration"]) + 1
    return ProgressLine(line_number, int(found["epoch"]), step, last + 1, metrics)


def parse(lines: Iterable[str], first_line_number: int = 1) -> list[ProgressLine]:
    """Every progress line of `lines`, in order."""
    found = []
    for number, line in enumerate(lines, first_line_number):
        parsed = parse_line(line, number)
        if parsed is not None:
            found.append(parsed)
    return found
