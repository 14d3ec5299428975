"""What each rank was fed: the dataset index of every sample of every micro-batch it trained on, and a few label
positions of the batch the loss was computed on. Imported inside the training processes (Lightning, torch).

The index is the one Megatron's batch sampler hands to the dataset (`GPTDataset.__getitem__(idx)`), carried through
the data loader's worker with the sample, and read where NeMo's data step takes each micro-batch from the iterator:
what the judge compares with the sampler's order (`fed_checks.py`) is what reached the model, not a counter.
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.record import append

#: The batch key that carries a sample's dataset index from the loader to the data step (removed there).
SAMPLE_ID = "smoke_sample_id"
#: Positions t of the first sample of each micro-batch whose label and next token are recorded: the start, the
#: middle and the end of the sequence (`label_positions`).
LABEL_POSITIONS = 3


class IdentifiedSamples:
    """The training dataset as the loader sees it, each sample carrying the index it was asked for. A plain class
    (a map-style dataset needs only __getitem__ and __len__) that pickles to the loader's workers by reference to
    this module; every other attribute is the wrapped dataset's."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        sample = self.dataset[index]
        return {**sample, SAMPLE_ID: torch.tensor(int(index))}

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


def label_positions(length: int) -> list[int]:
    """Positions t with a next token t + 1 in a sequence of `length` tokens."""
    last = length - 2
    return sorted({0, last // 2, last})[:LABEL_POSITIONS] if last >= 0 else []


def position_error(position_ids: Any) -> Any:
    """None where every sequence of the micro-batch is fed position ids 0..s-1 (the recipes do not reset positions at
    a document's end); else [sequence, t, the id fed at t] of the first departure, or "none fed"."""
    import torch

    if position_ids is None:
        return "none fed"
    ids = position_ids.reshape(-1, position_ids.shape[-1])
    wrong = (ids != torch.arange(ids.shape[-1], device=ids.device)).nonzero()
    return None if len(wrong) == 0 else [int(wrong[0, 0]), int(wrong[0, 1]), int(ids[wrong[0, 0], wrong[0, 1]])]


class FedRecorder(Callback):
    """Records, after each training step, every rank's micro-batches (the dataset index of each sample) and, for
    the first sample of each, (t, label[t], token[t + 1]) at `label_positions`. Gathered to global rank 0 (a
    collective: every rank takes part) and written as one "fed" record per step."""

    def __init__(self, path: str, phase: str):
        self.path, self.phase = path, phase
        self._training = False
        self._batches: list[list[int]] = []
        self._labels: list[list[list[int]]] = []
        self._positions: list[Any] = []
        self._sources: Any = None  # a blend's dataset index: which source each sample index draws from

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        dataset = getattr(datamodule, "_train_ds", None)
        if datamodule is not None and dataset is not None and not isinstance(dataset, IdentifiedSamples):
            datamodule._train_ds = IdentifiedSamples(dataset)
        blended = getattr(datamodule, "_train_ds", None)
        self._sources = getattr(getattr(blended, "dataset", None), "dataset_index", None)
        config = pl_module.config
        step = config.data_step_fn
        if getattr(step, "_smoke_fed", False):
            return

        def data_step(dataloader_iter: Any, *args: Any, **kwargs: Any) -> Any:
            return step(_Observed(dataloader_iter, self), *args, **kwargs)

        data_step._smoke_fed = True  # type: ignore[attr-defined]
        config.data_step_fn = data_step

    def observe(self, batch: Any) -> Any:
        """Notes a micro-batch as the data step takes it, and hands it on without the index."""
        inner = batch[0] if isinstance(batch, tuple) and len(batch) == 3 else batch
        if not isinstance(inner, dict) or SAMPLE_ID not in inner:
            return batch
        ids = inner.pop(SAMPLE_ID)
        if self._training:
            self._batches.append([int(i) for i in ids.reshape(-1).tolist()])
            tokens, labels = inner.get("tokens"), inner.get("labels")
            if tokens is not None and labels is not None:
                self._labels.append(
                    [[t, int(labels[0, t]), int(tokens[0, t + 1])] for t in label_positions(tokens.shape[-1])]
                )
            self._positions.append(position_error(inner.get("position_ids")))
        return batch

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._training, self._batches, self._labels, self._positions = True, [], [], []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        from megatron.core import parallel_state as ps

        from nemo_recipes.smoke_training.callbacks import attempt
        from nemo_recipes.smoke_training.checksums import per_rank

        self._training = False
        sampler = getattr(trainer.datamodule, "data_sampler", None)
        mine = {
            "rank": trainer.global_rank,
            "dp": ps.get_data_parallel_rank(),
            "dp_size": ps.get_data_parallel_world_size(),
            "batches": self._batches,
            "labels": self._labels,
            "positions": self._positions,
        }
        if self._sources is not None:  # samples drawn from each source of the blend, by its position in the blend
            drawn: dict[str, int] = {}
            for index in (i for batch in self._batches for i in batch):
                source = str(int(self._sources[index]))
                drawn[source] = drawn.get(source, 0) + 1
            mine["sources"] = drawn
        ranks = per_rank(mine)
        if trainer.global_rank == 0:
            append(
                self.path,
                {
                    "event": "fed",
                    "phase": self.phase,
                    "attempt": attempt(),
                    "step": trainer.global_step,
                    "time": time.time(),
                    "micro_batch_size": getattr(sampler, "micro_batch_size", None),
                    "dataloader_type": getattr(sampler, "dataloader_type", None),
                    "ranks": ranks,
                },
            )


class _Observed:
    """The data iterator as NeMo's data step reads it, each micro-batch shown to the recorder on its way."""

    def __init__(self, iterator: Any, recorder: FedRecorder):
        self.iterator, self.recorder = iterator, recorder

    def __iter__(self) -> _Observed:
        return self

    def __next__(self) -> Any:
        return self.recorder.observe(next(self.iterator))
