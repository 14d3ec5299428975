"""Digests of the training state a resume must restore, recorded when NeMo saves a checkpoint and again when a fresh
process has loaded one, so that the judge can tell a resume that restored everything from one that restored only the
step counter and the data position.

Components (each a bit-exact digest per rank, `checksums.digest`): the model's parameters ("weights"), the
optimizer's own copy of them ("main weights": the fp32 master copy of mixed precision, the distributed optimizer's
shard; the same tensors as the weights when training in fp32), both Adam moments, Adam's step, and the schedule (the
scheduler's step, its last learning rate and the optimizer's current one).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.checksums import COMPONENTS, digest, per_rank
from nemo_recipes.smoke_training.record import append


def inner_optimizers(optimizer: Any) -> Iterator[Any]:
    """The torch optimizers inside NeMo's wrapper (McoreDistributedOptimizer) and Megatron-Core's (a chained
    optimizer of mixed-precision, fp32 or distributed ones): the ones whose param groups hold the main weights and
    whose state holds Adam's moments and step."""
    optimizer = getattr(optimizer, "mcore_optimizer", optimizer)
    for part in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
        yield getattr(part, "optimizer", part)


def state_digests(trainer: Any, pl_module: Any) -> dict[str, Any]:
    """This rank's digest of each component."""
    named: dict[str, list[tuple[str, Any]]] = {name: [] for name in COMPONENTS}
    named["weights"] = [(name, p) for name, p in pl_module.named_parameters()]
    for o, optimizer in enumerate(trainer.optimizers):
        for i, inner in enumerate(inner_optimizers(optimizer)):
            group_steps = []
            for g, group in enumerate(inner.param_groups):
                if "step" in group:
                    group_steps.append((f"{o}.{i}.{g}.step", group["step"]))
                named["schedule"].append((f"{o}.{i}.{g}.lr", group["lr"]))
                for n, param in enumerate(group["params"]):
                    key = f"{o}.{i}.{g}.{n}"
                    named["main weights"].append((key, param))
                    state = inner.state.get(param, {})
                    for moment in ("exp_avg", "exp_avg_sq"):
                        if moment in state:
                            named["Adam moments"].append((f"{key}.{moment}", state[moment]))
                    if "step" in state:
                        named["Adam step"].append((f"{key}.step", state["step"]))
            # torch's Adam counts steps per parameter; fused Adams (Apex, Transformer Engine) per group. Megatron's
            # load also leaves a "step" in torch Adam's groups, which that Adam never reads: per-parameter steps,
            # where there are any, are the step.
            if not any(name.startswith(f"{o}.{i}.") for name, _ in named["Adam step"]):
                named["Adam step"] += group_steps
    for s, config in enumerate(trainer.lr_scheduler_configs):
        scheduler = config.scheduler
        named["schedule"].append((f"{s}.last_epoch", scheduler.last_epoch))
        named["schedule"].append((f"{s}.last_lr", list(scheduler.get_last_lr())))
    digests: dict[str, Any] = {name: digest(pairs) for name, pairs in named.items()}
    if getattr(getattr(pl_module, "config", None), "num_moe_experts", None):
        from nemo_recipes.smoke_training.routing import expert_coordinates, expert_digest

        # The routed experts and routers alone, with the rank's expert-parallel coordinates (routing_checks.py).
        digests.update({"expert weights": expert_digest(pl_module), **expert_coordinates()})
    return digests


class StateDigests(Callback):
    """Records, per rank, the digests of the state each checkpoint is saved from ("saved", at the global step it
    holds) and of the state a phase starts training from ("loaded": after NeMo restored the checkpoint's model,
    optimizer and scheduler state, before the first step). Both are collectives: every rank takes part."""

    def __init__(self, path: str, phase: str):
        self.path, self.phase = path, phase

    def _record(self, trainer: Any, pl_module: Any, when: str) -> None:
        from nemo_recipes.smoke_training.callbacks import attempt

        ranks = per_rank(state_digests(trainer, pl_module))
        if trainer.global_rank == 0:
            append(
                self.path,
                {
                    "event": "state",
                    "when": when,
                    "phase": self.phase,
                    "attempt": attempt(),
                    "step": trainer.global_step,
                    "time": time.time(),
                    "ranks": ranks,
                },
            )

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        _gather_params(pl_module)
        self._record(trainer, pl_module, "saved")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._record(trainer, pl_module, "loaded")


def _gather_params(pl_module: Any) -> None:
    """With the distributed optimizer and overlap_param_gather, a save between two steps sees each rank's own shard
    of the weights updated and the others' still waiting for the all-gather the next forward starts: gather them now
    (synchronously, as Megatron-LM does before it saves), so that the digest and the checkpoint hold the step's
    weights. The next forward's gather then writes the same values again."""
    for chunk in pl_module if hasattr(pl_module, "__iter__") else [pl_module]:
        config = getattr(chunk, "ddp_config", None)
        if config is not None and config.use_distributed_optimizer and config.overlap_param_gather:
            chunk.start_param_sync(force_sync=True)
