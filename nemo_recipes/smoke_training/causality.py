"""Causality measured on the model Megatron built (issue 46, item 2): a decoder's output at position i depends on the
tokens up to i only, so changing the token at position t changes no output before t, and does change the output at
t. Measured once per process, when training starts (after any load): two forwards of the same tokens but the one at
t, without dropout (eval mode) and without gradients, on every rank; a mask that lets a position see later tokens
shows as a change before t. With pipeline parallelism the probe drives the stages itself, outside Megatron's
schedule: each model chunk in pipeline order (stage 0's first chunk, stage 1's, ..., then the second chunks with a
virtual pipeline) takes the previous chunk's hidden states, sent rank to rank with plain torch.distributed, and every
rank measures the output of its last chunk (hidden states, or the logits on the last stage); a rank whose output is
split over the sequence (sequence parallelism between stages) measures nothing, the last stage's logits being whole.
Imported inside the training processes (Lightning, torch, Megatron-Core)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.checksums import per_rank
from nemo_recipes.smoke_training.record import append

#: Token ids the probe draws from (every vocabulary holds them), and its seed (the same tokens on every rank).
PROBE_IDS, PROBE_SEED = 64, 1234


def _ddp_chunks(trainer: Any) -> list[Any]:
    """Megatron DDP modules whose forward pre-hooks wait for the overlapped parameter all-gather."""
    from megatron.core.distributed import DistributedDataParallel

    return [m for m in trainer.model.modules() if isinstance(m, DistributedDataParallel) and m.use_forward_hook]


def probe(trainer: Any, pl_module: Any) -> dict[str, Any]:
    """This rank's finding: the largest change of an output before t and at or after t (floats)."""
    import contextlib

    import torch
    from megatron.core import parallel_state as ps

    from nemo_recipes.smoke_training import cpu_compat

    length = int(pl_module.config.seq_length)
    generator = torch.Generator().manual_seed(PROBE_SEED)
    tokens = torch.randint(0, PROBE_IDS, (1, length), generator=generator)
    t = length // 2
    changed = tokens.clone()
    changed[0, t] = (tokens[0, t] + 1) % PROBE_IDS
    device = next(pl_module.parameters()).device
    positions = torch.arange(length, device=device).unsqueeze(0)
    chunks = _ddp_chunks(trainer)
    for chunk in chunks:  # parameters gathered now; the training's own hooks are put back below
        chunk.disable_forward_pre_hook(param_sync=True)
    # Every chunk without dropout: the Lightning module holds the first virtual chunk only, the strategy's model all.
    modes = [(module, module.training) for module in [*pl_module.modules(), *trainer.model.modules()]]
    pl_module.eval()
    trainer.model.eval()
    # Without CUDA, Megatron's attention asks for a CUDA buffer the first time it runs: the scope serves it here.
    scope = contextlib.nullcontext() if cpu_compat.cuda_available() else cpu_compat.cpu_scope()
    try:
        with torch.no_grad(), scope:
            if ps.get_pipeline_model_parallel_world_size() > 1:
                both = torch.cat([tokens, changed]).to(device)
                output = _through_the_stages(trainer, both, positions.expand(2, -1))
                # Logits [batch, sequence, vocabulary]; hidden states [sequence, batch, hidden].
                outputs = [output[0], output[1]] if output.shape[1] == length else [output[:, 0], output[:, 1]]
                outputs = [o.unsqueeze(0) for o in outputs]
            else:
                outputs = [
                    pl_module.forward(input_ids=x.to(device), position_ids=positions, attention_mask=None).float()
                    for x in (tokens, changed)
                ]
    finally:
        for module, training in modes:
            module.training = training
        for chunk in chunks:
            chunk.enable_forward_pre_hook()
    if outputs[0].shape[1] != length and outputs[0].shape[0] != length:
        return {"measured": False, "why": "this stage's output is split over the sequence (sequence parallelism)"}
    difference = (outputs[0] - outputs[1]).abs()
    # Logits come [batch, sequence, vocabulary]; a stage's hidden states [sequence, batch, hidden].
    change = difference[0] if difference.shape[1] == length else difference[:, 0]
    return {
        "measured": True,
        "t": t,
        "length": length,
        "before": float(change[:t].max()),
        "from": float(change[t:].max()),
        "first": int(change.amax(dim=-1).nonzero()[0, 0]) if bool((change > 0).any()) else None,
    }


def _through_the_stages(trainer: Any, tokens: Any, positions: Any) -> Any:
    """This rank's last chunk's output of a forward through every pipeline stage and virtual chunk in order, each
    chunk's hidden states sent to the next chunk's rank (a shape, then the values in fp32)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from nemo_recipes.smoke_training.module_fields import megatron_models

    chunks = megatron_models(trainer)
    stages, stage = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_rank()
    previous, following = ps.get_pipeline_model_parallel_prev_rank(), ps.get_pipeline_model_parallel_next_rank()
    dtype = next(chunks[0].parameters()).dtype
    output = None
    for c, chunk in enumerate(chunks):
        virtual = c * stages + stage
        if virtual > 0:  # hidden states from the chunk before, on the previous stage's rank
            shape = torch.zeros(3, dtype=torch.long)
            dist.recv(shape, src=previous)
            hidden = torch.empty(tuple(shape.tolist()), dtype=torch.float32)
            dist.recv(hidden, src=previous)
            chunk.set_input_tensor(hidden.to(dtype))
        output = chunk(input_ids=tokens, position_ids=positions, attention_mask=None).float()
        if virtual < len(chunks) * stages - 1:
            dist.send(torch.tensor(output.shape, dtype=torch.long), dst=following)
            dist.send(output.contiguous(), dst=following)
    return output


class Causality(Callback):
    """Records `probe` of every rank when training starts ("causality"); a collective (every rank takes part)."""

    def __init__(self, path: str, phase: str):
        self.path, self.phase = path, phase

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        from nemo_recipes.smoke_training.callbacks import attempt

        ranks = per_rank(probe(trainer, pl_module))
        if trainer.global_rank == 0:
            append(
                self.path,
                {
                    "event": "causality",
                    "phase": self.phase,
                    "attempt": attempt(),
                    "step": trainer.global_step,
                    "ranks": ranks,
                },
            )
