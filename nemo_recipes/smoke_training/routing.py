"""Inside the training processes (torch): what a Mixture-of-Experts model's routers did at every step, for the judge's
MoE checks (routing_checks.py).

NeMo logs no MoE metric (its aux-loss logging is commented out, megatron_strategy.py:855-860) and Megatron-Core's
`track_moe_metrics` is called only by Megatron-LM's own loop, so the record is taken here:
- tokens routed per expert and layer: a forward hook on every `TopKRouter` adds up its `routing_map` (tokens x
  experts, one True per chosen expert) over the step's micro-batches, counting only the forwards the step trains
  with (training mode, gradients on: not the validation, not the causality probe, as the router itself counts);
- the balancing losses: Megatron-Core's aux-losses tracker, where each router adds its load-balancing loss divided by
  its coefficient on every training forward (moe/router.py:393) and which nothing clears in NeMo's loop: read per
  layer, as a mean per forward, and cleared after each step (as Megatron-LM's loop clears it);
- the expert bias of bias-based balancing (DeepSeek-V3), where the router keeps one: its values after the step.
Every rank routes its own tokens; rank 0 gathers them all (a collective each step, every rank takes part)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.checksums import digest, per_rank
from nemo_recipes.smoke_training.record import append


def routers(trainer: Any) -> list[Any]:
    """This rank's routers (its pipeline stage's MoE layers), in layer order."""
    from megatron.core.transformer.moe.router import TopKRouter

    found = [m for m in trainer.strategy.model.modules() if isinstance(m, TopKRouter)]
    return sorted(found, key=lambda router: router.layer_number)


def expert_coordinates() -> dict[str, int]:
    """Where this rank sits among the expert-parallel groups: its experts are those of its EP (and expert-TP) rank,
    shared with the other ranks of its expert-data-parallel group."""
    from megatron.core import parallel_state as ps

    return {
        "ep": ps.get_expert_model_parallel_rank(),
        "etp": ps.get_expert_tensor_parallel_rank(),
        "edp": ps.get_expert_data_parallel_rank(),
    }


def is_expert_tensor(name: str) -> bool:
    """A routed expert's weight or a router's (weight, expert bias), by its module path."""
    return ".mlp.experts." in name or ".mlp.router." in name


def expert_digest(pl_module: Any) -> str:
    """The digest of this rank's expert and router tensors (parameters and saved buffers: the expert bias)."""
    named = [(n, p) for n, p in pl_module.named_parameters() if is_expert_tensor(n)]
    named += [(n, b) for n, b in pl_module.named_buffers() if is_expert_tensor(n) and n.endswith("expert_bias")]
    return digest(named)


class RoutingRecorder(Callback):
    """Records, for a model with experts: the routers' settings at the start of each phase ("moe"), and after every
    step the tokens each expert of each layer received over the step, the routers' forwards, the balancing losses
    per layer and the expert bias ("routing"), summed or gathered over every rank on rank 0."""

    def __init__(self, path: str, phase: str):
        self.path, self.phase = path, phase
        self._counts: dict[int, Any] = {}
        self._calls: dict[int, int] = {}
        self._counting = False
        self._routers: list[Any] = []

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        config: Any = getattr(pl_module, "config", None)
        if not getattr(config, "num_moe_experts", None):
            return
        from megatron.core.transformer.moe.moe_utils import clear_aux_losses_tracker

        self._routers = routers(trainer)
        for router in self._routers:
            router.register_forward_hook(self._hook)
        clear_aux_losses_tracker()  # whatever a forward before the first step (a probe, a sanity check) left there
        if trainer.global_rank == 0:
            append(
                self.path,
                {
                    "event": "moe",
                    "phase": self.phase,
                    "experts": config.num_moe_experts,
                    "topk": config.moe_router_topk,
                    "layers": config.num_layers,
                    "load_balancing": config.moe_router_load_balancing_type,
                    "aux_loss_coeff": config.moe_aux_loss_coeff,
                    "expert_bias": bool(config.moe_router_enable_expert_bias),
                    "capacity_factor": config.moe_expert_capacity_factor,
                    "dispatcher": config.moe_token_dispatcher_type,
                    "expert_parallel": config.expert_model_parallel_size,
                },
            )

    def _hook(self, router: Any, inputs: Any, output: Any) -> None:
        import torch

        if not (self._counting and router.training and torch.is_grad_enabled()):
            return
        _, routing_map = output
        counts = routing_map.detach().reshape(-1, routing_map.shape[-1]).sum(dim=0).to(torch.int64).cpu()
        layer = router.layer_number
        self._counts[layer] = counts + self._counts[layer] if layer in self._counts else counts
        self._calls[layer] = self._calls.get(layer, 0) + 1

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._counts, self._calls, self._counting = {}, {}, bool(self._routers)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        config: Any = getattr(pl_module, "config", None)
        if not getattr(config, "num_moe_experts", None):
            return
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.moe.moe_utils import (
            clear_aux_losses_tracker,
            get_moe_layer_wise_logging_tracker,
        )

        self._counting = False
        losses = {}
        for name, entry in get_moe_layer_wise_logging_tracker().items():
            values = entry["values"].detach().float().cpu().tolist()
            losses[name] = {
                str(layer): values[layer - 1] / calls for layer, calls in self._calls.items() if calls and values
            }
        clear_aux_losses_tracker()
        mine = {
            "tp": ps.get_tensor_model_parallel_rank(),
            "sequence_parallel": bool(config.sequence_parallel),
            "counts": {str(layer): counts.tolist() for layer, counts in self._counts.items()},
            "forwards": {str(layer): calls for layer, calls in self._calls.items()},
            "losses": losses,
            "expert_bias": {
                str(r.layer_number): r.expert_bias.detach().float().cpu().tolist()
                for r in self._routers
                if getattr(r, "expert_bias", None) is not None
            },
        }
        ranks = per_rank(mine)
        if trainer.global_rank == 0:
            from nemo_recipes.smoke_training.callbacks import attempt

            record = {"event": "routing", "phase": self.phase, "attempt": attempt(), "step": trainer.global_step}
            append(self.path, {**record, **merge(ranks)})


def merge(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The step's routing over all ranks: tokens per expert summed over the ranks that route distinct tokens (every
    data-parallel, context-parallel and pipeline rank; tensor-parallel ranks route the same tokens unless sequence
    parallelism splits them), the forwards of one such rank per layer, each balancing loss per layer averaged over the
    ranks that computed it, and the expert bias of the first rank holding each layer (replicas hold the same)."""
    counts: dict[str, list[int]] = {}
    forwards: dict[str, list[int]] = {}
    losses: dict[str, dict[str, list[float]]] = {}
    bias: dict[str, list[float]] = {}
    for rank in ranks:
        distinct = rank["tp"] == 0 or rank["sequence_parallel"]
        for layer, values in rank["counts"].items():
            if distinct:
                total = counts.setdefault(layer, [0] * len(values))
                counts[layer] = [a + b for a, b in zip(total, values, strict=True)]
                forwards.setdefault(layer, []).append(rank["forwards"][layer])
        for name, per_layer in rank["losses"].items():
            for layer, value in per_layer.items():
                losses.setdefault(name, {}).setdefault(layer, []).append(value)
        for layer, values in rank["expert_bias"].items():
            bias.setdefault(layer, values)
    return {
        "tokens_per_expert": counts,
        "forwards": forwards,
        "losses": {name: {layer: sum(v) / len(v) for layer, v in per.items()} for name, per in losses.items()},
        "loss_ranks": {name: {layer: len(v) for layer, v in per.items()} for name, per in losses.items()},
        "expert_bias": bias,
    }
