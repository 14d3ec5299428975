"""What a run's progress lines say: step, loss, step time over a steady window, tokens/s, model TFLOP/s per GPU,
peak memory, ETA, and the flags a person wants at once (non-finite loss, loss spike, restart and the step it resumed
from, a resume that started again from step 0). Standard library and the fast path only."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.plan.flops import model_flops_per_token
from nemo_recipes.watching.progress_log import LOSS, MEMORY_ALLOCATED, MEMORY_RESERVED, STEP_TIME, ProgressLine

#: Steps left out of the step time after every (re)start: the first steps build CUDA graphs, warm the allocator and
#: the data loader, and run slower than the steady state.
SKIP_FIRST_STEPS = 1
#: A loss above this many times the median absolute deviation over the median of the previous steps is a spike.
SPIKE_MADS = 6.0
#: Steps the spike test looks back over (and needs before it judges).
SPIKE_WINDOW = 20
#: Why a logged step is not in the step time's window, in the order they are tested.
LEFT_OUT = ("no step time logged", "invalid step time", "first steps of a process", "near a checkpoint save")


@dataclass
class Segment:
    """One process's run of steps: a restart (requeue, resume) begins a new segment."""

    first_step: int
    last_step: int
    lines: int


@dataclass
class Figures:
    step: int
    max_steps: int
    loss: Optional[float]
    initial_loss: Optional[float]
    step_time_s: Optional[float]  # median over `window_steps`
    window_steps: list[int]
    left_out_steps: dict[str, int]  # logged steps not in the window, by reason (LEFT_OUT)
    tokens_per_step: Optional[int]
    tokens_per_s: Optional[float]
    tokens_per_s_per_gpu: Optional[float]
    model_tflops_per_gpu: Optional[float]
    num_gpus: Optional[int]
    peak_memory_reserved_bytes: Optional[float]
    peak_memory_allocated_bytes: Optional[float]
    eta_s: Optional[float]
    segments: list[Segment] = field(default_factory=list)
    logged: list[dict[str, Optional[float]]] = field(default_factory=list)  # step, loss, step_time_s per line
    flags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _segments(logs: list[list[ProgressLine]]) -> list[list[ProgressLine]]:
    """The lines of each process: every log is one (a smoke phase, a requeued Slurm run's own log), and within a log
    a step that does not move forward starts another (a restart writing to the same file). A process that resumes
    exactly where the last one stopped, in the same file, leaves no trace in these lines."""
    runs: list[list[ProgressLine]] = []
    for log in logs:
        start = len(runs)
        for line in log:
            if len(runs) > start and line.step > runs[-1][-1].step:
                runs[-1].append(line)
            else:
                runs.append([line])
    return runs


def _near_checkpoint(step: int, interval_steps: int, every: Optional[int]) -> bool:
    """Whether the interval of `interval_steps` steps ending at `step` holds a step that saved a checkpoint or the
    step after one: the save runs at the end of its step, and with async saves the write's finalisation lands in the
    next (the kept smoke run in tests/data/watch: steps 6 and 16 took 1.6x and 3x the steps around them)."""
    if not every:
        return False
    return any(s % every in (0, 1) and s > 1 for s in range(step - interval_steps + 1, step + 1))


def _flags(runs: list[list[ProgressLine]]) -> list[str]:
    flags = []
    for before, after in zip(runs, runs[1:], strict=False):
        resumed = after[0].step - 1
        if resumed == 0 and before[-1].step > 1:
            flags.append(
                f"restart from step 0: the run had reached step {before[-1].step}, the new process began again at "
                "step 1 (no checkpoint found or loaded: check the checkpoint directory and resume settings)"
            )
        else:
            flags.append(f"restart: the run had reached step {before[-1].step} and resumed after step {resumed}")
    history: list[float] = []
    for run in runs:
        for line in run:
            loss = line.get(LOSS)
            if loss is None:
                continue
            if not math.isfinite(loss):
                flags.append(f"non-finite loss at step {line.step}: {loss}")
                continue
            recent = history[-SPIKE_WINDOW:]
            if len(recent) >= SPIKE_WINDOW // 2:
                middle = statistics.median(recent)
                spread = statistics.median(abs(x - middle) for x in recent)
                if spread > 0 and loss > middle + SPIKE_MADS * spread:
                    flags.append(
                        f"loss spike at step {line.step}: {loss:.4g} against a median of {middle:.4g} over the "
                        f"previous {len(recent)} logged steps"
                    )
            history.append(loss)
    return flags


def _positive(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def figures(
    logs: list[list[ProgressLine]], spec: Optional[RecipeSpec] = None, skip_first: int = SKIP_FIRST_STEPS
) -> Figures:
    """The figures of a run from the progress lines of each of its logs (oldest log first) and, where known, its
    recipe (tokens per step, GPUs, FLOPs per token, checkpoint interval). Needs at least one line. A value no run
    can have (a step time or memory that is not a positive finite number, a total of no steps) is flagged and left
    out of every figure, never computed with."""
    runs = _segments(logs)
    lines = [line for run in runs for line in run]
    last = lines[-1]
    every = spec.checkpoint_every_steps if spec is not None else None
    window: list[tuple[int, float]] = []
    left_out = dict.fromkeys(LEFT_OUT, 0)
    flags = _flags(runs)
    for run in runs:
        previous = run[0].step - 1
        for line in run:
            interval = line.step - previous
            previous = line.step
            seconds = line.get(STEP_TIME)
            if seconds is None:
                left_out["no step time logged"] += 1
            elif not _positive(seconds):
                left_out["invalid step time"] += 1
                flags.append(
                    f"invalid step time at step {line.step}: {seconds:g} (not a positive finite number of seconds); "
                    "left out of every figure"
                )
            elif line.step - run[0].step < skip_first:
                left_out["first steps of a process"] += 1
            elif _near_checkpoint(line.step, interval, every):
                left_out["near a checkpoint save"] += 1
            else:
                window.append((line.step, seconds))
    step_time = statistics.median(s for _, s in window) if window else None
    losses = [line.get(LOSS) for line in lines if line.get(LOSS) is not None]
    tokens = spec.global_batch_size * spec.seq_length if spec is not None else None
    gpus = spec.num_nodes * spec.num_gpus_per_node if spec is not None else None
    tokens_per_s = tokens / step_time if tokens and step_time else None
    per_gpu = tokens_per_s / gpus if tokens_per_s is not None and gpus else None
    tflops = per_gpu * model_flops_per_token(spec) / 1e12 if per_gpu is not None and spec is not None else None
    memory = {}
    for key in (MEMORY_RESERVED, MEMORY_ALLOCATED):
        values = []
        for line in lines:
            value = line.get(key)
            if value is not None and not (math.isfinite(value) and value >= 0):
                flags.append(f"invalid {key} at step {line.step}: {value:g} (not a number of bytes); left out")
            elif value is not None:
                values.append(value)
        memory[key] = max(values) if values else None
    eta = None
    if last.max_steps < 1:
        flags.append(
            f"the log's total is {last.max_steps} steps ('iteration I/N' with N = {last.max_steps - 1}), which no run "
            "trains: no ETA"
        )
    elif last.step > last.max_steps:
        flags.append(f"the last logged step, {last.step}, is past the log's total of {last.max_steps} steps: no ETA")
    elif step_time is not None:
        eta = (last.max_steps - last.step) * step_time
        if not math.isfinite(eta):
            flags.append(f"ETA of {last.max_steps - last.step} steps of {step_time:g} s overflows: no ETA")
            eta = None
    return Figures(
        step=last.step,
        max_steps=last.max_steps,
        loss=losses[-1] if losses else None,
        initial_loss=losses[0] if losses else None,
        step_time_s=step_time,
        window_steps=[s for s, _ in window],
        left_out_steps={reason: count for reason, count in left_out.items() if count},
        tokens_per_step=tokens,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=per_gpu,
        model_tflops_per_gpu=tflops,
        num_gpus=gpus,
        peak_memory_reserved_bytes=memory[MEMORY_RESERVED],
        peak_memory_allocated_bytes=memory[MEMORY_ALLOCATED],
        eta_s=eta,
        segments=[Segment(run[0].step, run[-1].step, len(run)) for run in runs],
        logged=[{"step": line.step, "loss": line.get(LOSS), "step_time_s": line.get(STEP_TIME)} for line in lines],
        flags=flags,
    )
