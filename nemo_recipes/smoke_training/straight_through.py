"""The first phase's uninterrupted reference: after it saved the checkpoint the second phase resumes from, the first
phase trains on to the end of the schedule without saving anything more, so that AutoResume still finds that
checkpoint, and its losses past the stop are what the resumed phase must reproduce (resume_loss.py judges them).

Cheaper than a reference of its own: no process starts, no build, no data set-up; only the steps after the stop are
trained twice. Imported inside the training processes (Lightning)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback


class TrainOnWithoutSaving(Callback):
    """From the first step after `after` on, every checkpoint callback of the trainer is silenced (its step and time
    triggers, its save at the end of training): the checkpoint saved at `after` stays the last one. The progress
    printer is silenced too: the log shows the run's own steps, once."""

    def __init__(self, after: int):
        self.after = after

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step < self.after:
            return
        for callback in trainer.checkpoint_callbacks:
            if getattr(callback, "_smoke_silenced", False):
                continue
            # Lightning looks hooks up on the instance at each call: these shadow the class's savers.
            for hook in ("on_train_batch_end", "on_train_epoch_end", "on_validation_end", "on_train_end"):
                setattr(callback, hook, _nothing)
            callback._smoke_silenced = True
        # Nor are these steps the run's progress lines (NeMo's ProgressPrinter): `watch` would read a restart.
        bar = trainer.progress_bar_callback
        if bar is not None and not getattr(bar, "_smoke_silenced", False):
            bar.on_train_batch_end = _nothing
            bar._smoke_silenced = True


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


#: Seed both phases draw their randomness from after the stop (dropout masks).
RESEED = 4321


class ReseedAt(Callback):
    """Before the first step after `step`, in both phases, every generator dropout draws from is seeded alike (as
    Megatron seeds them: per pipeline stage, the tensor-parallel stream per rank). NeMo's checkpoint does not hold the
    generators' states, so without this the resumed phase's dropout masks differ from the uninterrupted ones and the
    losses by dropout's noise (0.01-0.03 nats at the smoke shape, measured), hiding a spoiled state."""

    def __init__(self, step: int):
        self.step, self.done = step, False

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.done or trainer.global_step != self.step:
            return
        import torch
        from megatron.core import parallel_state as ps
        from megatron.core.tensor_parallel import random as mrandom

        seed = RESEED + self.step + 100 * ps.get_pipeline_model_parallel_rank()
        torch.manual_seed(seed)
        # Resets the tracker (the CPU one of cpu_compat where there is no GPU) and seeds the CUDA generator.
        mrandom.model_parallel_cuda_manual_seed(seed)
        self.done = True
