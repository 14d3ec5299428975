"""A reference of the loss and the gradient in plain PyTorch (issue 46, item 2), from what Megatron's own forward
produced in the first step of each process: the logits of every micro-batch, the hidden states they came from and
the labels. Recorded on every rank that holds the output layer (the last pipeline stage; each tensor-parallel rank
its share of the vocabulary; every data-parallel replica), before the optimizer steps:

- the loss: cross-entropy recomputed from the logits and labels (a vocabulary split over tensor ranks is reduced
  over them), summed over the micro-batches and the data-parallel replicas and divided by the tokens: the mean that
  NeMo reports for the step, which the judge compares with the reported one (reference_checks.py);
- the gradient of that mean with respect to the output layer's weight, (softmax - one-hot) x hidden / tokens, against
  the gradient Megatron's backward left in the weight's fp32 buffer (this rank's shard with the distributed
  optimizer), on every row, or with embeddings shared on the vocabulary rows no rank fed as input: a fed token's row
  then also holds the input embedding's gradient, which only a whole backward recomputes.

Every label counts (the recipes' data mask no tokens: NeMo's eod_mask_loss off, no padding inside the corpus); a
masked token would make the reported mean differ, and this check fail, until the mask is read here too. Only the
output layer's gradient has a reference: a gradient wrong in the layers below alone is not seen here.

A loss or gradient scaled wrongly anywhere between the logits and the optimizer (the loss function, NeMo's reduction,
the gradient's scaling or reduction) makes them differ. The comparison reads the logits Megatron computed: a wrong
model is the other checks' (causality, the fields as built). Imported inside the training processes (torch,
Megatron-Core, Lightning)."""

from __future__ import annotations

from typing import Any, Optional

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.checksums import per_rank
from nemo_recipes.smoke_training.module_fields import megatron_models
from nemo_recipes.smoke_training.record import append


def _shard_range(parts: list[Any], param: Any) -> Optional[tuple[int, int]]:
    """The elements of `param` (flattened) whose reduced gradient this rank holds: all of them, or with the distributed
    optimizer its shard (after the reduce-scatter the rest of the buffer holds this replica's own gradient)."""
    for part in parts:
        if type(part).__name__ == "DistributedOptimizer":
            try:
                found = part._get_model_param_range_map(param)["param"]
            except KeyError:
                continue
            return found.start, found.end
    return None if any(type(p).__name__ == "DistributedOptimizer" for p in parts) else (0, param.numel())


class Capture:
    """Megatron's logits, the hidden states and labels of each micro-batch of one step, and the ids fed as input."""

    def __init__(self, trainer: Any):
        self.batches: list[dict[str, Any]] = []
        self.fed: list[Any] = []
        self.weight: Any = None
        self.tied = False
        self.hooks: list[Any] = []
        for model in megatron_models(trainer):
            self.hooks.append(model.register_forward_pre_hook(self._inputs, with_kwargs=True))
            if model.post_process:
                self.hooks.append(model.output_layer.register_forward_hook(self._logits, with_kwargs=True))

    def _inputs(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            self.fed.append(ids.detach().reshape(-1).clone())
        if module.post_process:
            labels = kwargs.get("labels", args[4] if len(args) > 4 else None)
            self.batches.append({"labels": None if labels is None else labels.detach().clone()})

    def _logits(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        weight = kwargs.get("weight")
        self.weight = module.weight if weight is None else weight
        # Tied: the embedding's weight handed in, or the last stage's copy that Megatron keeps in sync with it.
        self.tied = weight is not None or bool(getattr(module.weight, "shared_embedding", False))
        logits = output[0] if isinstance(output, tuple) else output
        self.batches[-1]["hidden"] = args[0].detach().clone()
        self.batches[-1]["logits"] = logits.detach().clone()

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []


def reference(capture: Capture, parts: list[Any], vocabulary: int) -> dict[str, Any]:
    """This rank's reference loss and output-layer gradient against Megatron's (every rank calls it: collectives)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    distributed = dist.is_initialized()
    tp_group = ps.get_tensor_model_parallel_group() if distributed else None
    dp_group = ps.get_data_parallel_group(with_context_parallel=True) if distributed else None

    def reduce(tensor: Any, group: Any, op: Any = None) -> Any:
        if distributed:
            dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=group)
        return tensor

    fed = torch.zeros(vocabulary, dtype=torch.float32)
    for ids in capture.fed:
        fed[ids[ids < vocabulary].long()] = 1.0
    reduce(fed, None, dist.ReduceOp.MAX if distributed else None)  # every rank's inputs
    batches = [b for b in capture.batches if "logits" in b and b["labels"] is not None]
    if not batches:
        return {"measured": False}
    rows = batches[0]["logits"].shape[-1]
    start = ps.get_tensor_model_parallel_rank() * rows if distributed else 0
    loss, tokens = torch.zeros(2, dtype=torch.float64), 0
    gradient = torch.zeros(rows, batches[0]["hidden"].shape[-1], dtype=torch.float64)
    for batch in batches:
        logits = batch["logits"].float()  # [sequence, batch, vocabulary / TP]
        labels = batch["labels"].t()  # [batch, sequence] -> [sequence, batch]
        hidden = batch["hidden"].float()
        if hidden.shape[0] != logits.shape[0]:  # sequence parallel: the layer gathers its input over TP
            pieces = [torch.empty_like(hidden) for _ in range(ps.get_tensor_model_parallel_world_size())]
            dist.all_gather(pieces, hidden, group=tp_group)
            hidden = torch.cat(pieces)
        top = reduce(logits.max(-1).values, tp_group, dist.ReduceOp.MAX if distributed else None)
        exp = torch.exp(logits - top.unsqueeze(-1))
        total = reduce(exp.sum(-1), tp_group)
        here = (labels >= start) & (labels < start + rows)
        local = (labels - start).clamp(0, rows - 1)
        target = reduce(torch.where(here, logits.gather(-1, local.unsqueeze(-1)).squeeze(-1), 0.0), tp_group)
        loss[0] += (torch.log(total) + top - target).double().sum()
        tokens += labels.numel()
        d_logits = exp / total.unsqueeze(-1)
        d_logits.scatter_add_(-1, local.unsqueeze(-1), -here.float().unsqueeze(-1))
        gradient += (d_logits.reshape(-1, rows).t() @ hidden.reshape(-1, hidden.shape[-1])).double()
    loss[1] = tokens
    reduce(loss, dp_group)
    reduce(gradient, dp_group)
    gradient /= loss[1]
    found: dict[str, Any] = {"measured": True, "loss": float(loss[0] / loss[1]), "tokens": int(loss[1])}
    weight = capture.weight
    megatron = getattr(weight, "main_grad", None)
    if megatron is None:
        megatron = weight.grad
    shard = _shard_range(parts, weight)
    if megatron is None or shard is None:
        return {**found, "gradient": None}
    # With tied embeddings, only the rows no rank fed as input hold the output layer's gradient alone.
    free = fed[start : start + rows] == 0 if capture.tied else torch.ones(rows, dtype=torch.bool)
    mask = torch.zeros(weight.numel(), dtype=torch.bool)
    mask[shard[0] : shard[1]] = True
    mask &= free.unsqueeze(-1).expand(rows, weight.shape[-1]).reshape(-1)
    ours, theirs = gradient.reshape(-1)[mask], megatron.detach().double().reshape(-1)[mask]
    found["gradient"] = {
        "rows": int(free.sum()),
        "tied": capture.tied,
        "elements": int(mask.sum()),
        "norm": float(theirs.norm()),
        "reference": float(ours.norm()),
        "difference": float((theirs - ours).norm()),
    }
    return found


class LossReference(Callback):
    """Captures the first step of each process and records `reference` of every rank ("reference") before the
    optimizer steps (Lightning's on_before_optimizer_step: the backward and the gradients' reduction are done)."""

    def __init__(self, path: str, phase: str):
        self.path, self.phase = path, phase
        self.capture: Optional[Capture] = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.capture = Capture(trainer)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        import time

        from nemo_recipes.smoke_training.built import mcore_parts
        from nemo_recipes.smoke_training.callbacks import attempt

        if self.capture is None:
            return
        started = time.perf_counter()
        capture, self.capture = self.capture, None
        capture.remove()
        parts = [part for o in trainer.optimizers for part in mcore_parts(o)]
        vocabulary = max(m.vocab_size for m in megatron_models(trainer))
        ranks = per_rank(reference(capture, parts, vocabulary))
        if trainer.global_rank == 0:
            append(
                self.path,
                {
                    "event": "reference",
                    "phase": self.phase,
                    "attempt": attempt(),
                    "step": trainer.global_step + 1,
                    "ranks": ranks,
                    "seconds": time.perf_counter() - started,
                },
            )
