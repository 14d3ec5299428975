"""Faults injected into a real training run, so that the tests can watch the judge fail a run that is really broken.

Named per phase in the phase config's `fault` key, which only tests set (`smoke(faults={phase: name})`); the CLI has
no way to reach it. Each fault is a Lightning callback, added before the smoke's own, so that what the record shows
(digests, losses) is what the fault did. Imported inside the training processes (Lightning, Megatron-Core).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.planted import PLANTED


class WeightsNotRestored(Callback):
    """Fault (tests only): a resumed phase trains from freshly initialised weights, as if the checkpoint's weights
    had not been loaded (normal(0, 0.02) matrices, unit norm scales, zero biases), while the step, the data
    position, the optimizer and the schedule are restored."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        import torch

        if not trainer.ckpt_path:
            return
        generator = torch.Generator().manual_seed(trainer.global_rank)
        with torch.no_grad():
            for name, param in pl_module.named_parameters():
                if param.dim() >= 2:
                    fresh = torch.empty(param.shape).normal_(0.0, 0.02, generator=generator)
                    param.copy_(fresh.to(param.dtype))
                else:
                    param.fill_(1.0 if name.endswith("weight") else 0.0)


class NoGradSync(Callback):
    """Fault (tests only): Megatron DDP's gradient all-reduce (reduce-scatter with the distributed optimizer) never
    runs: each data-parallel rank steps on its own micro-batches' gradients, unscaled and unshared."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

        def start_grad_sync(self: Any) -> None:
            return None

        def finish_grad_sync(self: Any) -> None:
            self.param_gather_dispatched = False  # what the real one resets besides the collective

        _ParamAndGradBucketGroup.start_grad_sync = start_grad_sync
        _ParamAndGradBucketGroup.finish_grad_sync = finish_grad_sync


from nemo_recipes.smoke_training.fed_faults import FED_FAULTS  # noqa: E402

#: Fault name (the phase config's `fault`) -> the callback that injects it.
FAULTS: dict[str, type[Callback]] = {
    "weights-not-restored": WeightsNotRestored,
    "no-grad-sync": NoGradSync,
    **FED_FAULTS,
}
FAULTS.update(PLANTED)  # issue 31's: the loss across the resume, the optimizer as built, the checkpoint files
