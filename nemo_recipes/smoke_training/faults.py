"""Faults injected into a real training run, so that the tests can watch the judge fail a run that is really broken.

Named in the phase config (`faults`) by tests only: neither the CLI nor `smoke()`'s callers by default set one.
Imported inside the training processes (Megatron-Core).
"""

from __future__ import annotations

from typing import Any, Callable


def _no_grad_sync() -> None:
    """Megatron DDP's gradient all-reduce (reduce-scatter with the distributed optimizer) never runs: each
    data-parallel rank steps on its own micro-batches' gradients, unscaled and unshared."""
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

    def start_grad_sync(self: Any) -> None:
        return None

    def finish_grad_sync(self: Any) -> None:
        self.param_gather_dispatched = False  # what the real one resets besides the collective

    _ParamAndGradBucketGroup.start_grad_sync = start_grad_sync
    _ParamAndGradBucketGroup.finish_grad_sync = finish_grad_sync


FAULTS: dict[str, Callable[[], None]] = {"no-grad-sync": _no_grad_sync}


def install(names: list[str]) -> None:
    for name in names:
        FAULTS[name]()
