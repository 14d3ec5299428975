"""Faults in the data fed (tests only, as in faults.py): each replaces one function of NeMo or Megatron-Core in the
training process with a wrong version of it, so that the judge's data checks (`fed_checks.py`) are shown failing on
NeMo's real loop. Imported inside the training processes (Lightning, NeMo, Megatron-Core)."""

from __future__ import annotations

from typing import Any, Callable

from lightning.pytorch.callbacks import Callback


def _wrap_sampler(change: Callable[[dict[str, Any]], None]) -> None:
    """Replaces NeMo's `add_megatron_sampler` (which `MegatronDataSampler.transform_dataloader` imports at each
    call) by one whose keyword arguments `change` edits first, for the training loader only."""
    import nemo.lightning.data as data

    original = getattr(data.add_megatron_sampler, "_smoke_original", data.add_megatron_sampler)

    def add_megatron_sampler(dataloader: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dataloader_mode", "train") == "train":
            change(kwargs)
        return original(dataloader, *args, **kwargs)

    add_megatron_sampler._smoke_original = original  # type: ignore[attr-defined]
    data.add_megatron_sampler = add_megatron_sampler


class LoaderRestartsAtZero(Callback):
    """A resumed loader whose sampler is given consumed samples 0: it reads the first phase's samples again."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        _wrap_sampler(lambda kwargs: kwargs.update(consumed_samples=0))


class LoaderSkipsABatch(Callback):
    """A resumed loader whose sampler starts one global batch past the consumed samples."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        def skip(kwargs: dict[str, Any]) -> None:
            if kwargs.get("consumed_samples"):
                kwargs["consumed_samples"] += kwargs["global_batch_size"]

        _wrap_sampler(skip)


class ReplicasReadTheSameData(Callback):
    """Every data-parallel replica's sampler is told it is DP rank 0: all replicas train on the same
    micro-batches (and half of each global batch is never read)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        _wrap_sampler(lambda kwargs: kwargs.update(rank=0))


class LabelsNotShifted(Callback):
    """Megatron's `GPTDataset.__getitem__` returns the input tokens as labels (label[t] = token[t], not the next
    token): the model is taught to copy its input."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.datasets.gpt_dataset import GPTDataset

        original = getattr(GPTDataset.__getitem__, "_smoke_original", GPTDataset.__getitem__)

        def __getitem__(self: Any, idx: Any) -> dict[str, Any]:
            sample = original(self, idx)
            sample["labels"] = sample["tokens"].clone()
            return sample

        __getitem__._smoke_original = original  # type: ignore[attr-defined]
        GPTDataset.__getitem__ = __getitem__


#: Fault name -> the callback that injects it (merged into faults.FAULTS).
FED_FAULTS: dict[str, type[Callback]] = {
    "loader-restarts-at-zero": LoaderRestartsAtZero,
    "loader-skips-a-batch": LoaderSkipsABatch,
    "replicas-read-the-same-data": ReplicasReadTheSameData,
    "labels-not-shifted": LabelsNotShifted,
}
