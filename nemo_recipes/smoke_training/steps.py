"""Every optimizer step, as the optimizer itself saw it (issue 46, item 3), recorded on every rank for the judge
(step_checks.py): a check from what any correct run satisfies, whatever went wrong.

- After each training step: the optimizer's own step counter (torch Adam's per-parameter `step`, a fused Adam's
  per-group one), the fewest and the most over every parameter this rank steps, and every parameter group's learning
  rate, not only the first.
- Around the first optimizer step of each process (the first step of a run, the first resumed step): a few sampled
  elements of a few parameters per group (the optimizer's fp32 copy, this rank's shard), with Adam's moments and step
  as they stood when training started (restored by the load, or none), the gradient the step was given, the group's
  learning rate and weight decay, and the same elements after the step. The judge recomputes the AdamW update from
  them and the recipe's betas and eps.

Imported inside the training processes (Lightning, torch)."""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.checksums import per_rank
from nemo_recipes.smoke_training.record import append
from nemo_recipes.smoke_training.state import inner_optimizers

#: Parameters sampled per parameter group, and elements per parameter (spread over it: first, thirds, last).
SAMPLED_PARAMS = 2
SAMPLED_ELEMENTS = 4


def _optimizers(trainer: Any) -> list[Any]:
    return [inner for optimizer in trainer.optimizers for inner in inner_optimizers(optimizer)]


def _step_of(inner: Any, group: dict[str, Any], param: Any) -> float | None:
    """Adam's step count for `param`: torch's per-parameter one, else a fused Adam's per-group one; None before the
    first step (a fresh optimizer holds no state)."""
    state = inner.state.get(param, {})
    step = state.get("step", group.get("step"))
    return None if step is None else float(step)


def step_counters(trainer: Any) -> dict[str, Any]:
    """This rank's step counters (fewest, most) and each group's learning rate, by "optimizer.group"."""
    counts: list[float] = []
    lrs: dict[str, float] = {}
    for i, inner in enumerate(_optimizers(trainer)):
        for g, group in enumerate(inner.param_groups):
            lrs[f"{i}.{g}"] = float(group["lr"])
            counts += [c for p in group["params"] if (c := _step_of(inner, group, p)) is not None]
    return {"step": [min(counts), max(counts)] if counts else None, "lr": lrs}


def _elements(numel: int) -> list[int]:
    return sorted({0, numel // 3, 2 * numel // 3, numel - 1})[:SAMPLED_ELEMENTS] if numel else []


def _sampled(trainer: Any) -> list[tuple[Any, dict[str, Any], Any, list[int], str]]:
    """(optimizer, group, parameter, element indices, key) of the sampled parameters of this rank."""
    found = []
    for i, inner in enumerate(_optimizers(trainer)):
        for g, group in enumerate(inner.param_groups):
            params = [p for p in group["params"] if p.numel() > 0][:SAMPLED_PARAMS]
            found += [(inner, group, p, _elements(p.numel()), f"{i}.{g}.{n}") for n, p in enumerate(params)]
    return found


def _values(tensor: Any, at: list[int]) -> list[float] | None:
    return None if tensor is None else [float(x) for x in tensor.detach().reshape(-1)[at].double().tolist()]


def _moments(inner: Any, param: Any, at: list[int]) -> dict[str, Any]:
    state = inner.state.get(param, {})
    return {"m": _values(state.get("exp_avg"), at), "v": _values(state.get("exp_avg_sq"), at)}


class OptimizerSteps(Callback):
    """Records the step counters and every group's learning rate after each step ("steps"), and the first optimizer
    step's sampled update ("update"), gathered from every rank to rank 0 (collectives: every rank takes part).
    `seconds` in each record: this callback's own time on rank 0, the judge's cost (benchmarks/judge_cost.py)."""

    def __init__(self, path: str, phase: str):
        self.path, self.phase = path, phase
        self._before: dict[str, dict[str, Any]] = {}
        self._update: dict[str, dict[str, Any]] = {}
        self._hooks: list[Any] = []
        self._cost = 0.0

    def _append(self, trainer: Any, event: dict[str, Any], mine: Any, started: float) -> None:
        from nemo_recipes.smoke_training.callbacks import attempt

        ranks = per_rank(mine)
        self._cost += time.perf_counter() - started
        if trainer.global_rank == 0:
            append(
                self.path,
                {**event, "phase": self.phase, "attempt": attempt(), "ranks": ranks, "seconds": self._cost},
            )
        self._cost = 0.0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        started = time.perf_counter()
        sampled = _sampled(trainer)
        # The state as restored: weights, Adam's step and moments spoilt between the load and the step fail.
        for inner, group, param, at, key in sampled:
            self._before[key] = {
                "p": _values(param, at),
                "step": _step_of(inner, group, param),
                **_moments(inner, param, at),
            }
        optimizers = {id(inner): inner for inner, *_ in sampled}

        def before_step(inner: Any, *args: Any, **kwargs: Any) -> None:
            for mine, group, param, at, key in sampled:
                if mine is inner:
                    if self._before[key]["m"] is None:
                        # A fresh run restored nothing: the weights the step updates are read as it starts (with an
                        # interleaved schedule, VP2, the fp32 main weights change between on_train_start and the
                        # first step of a fresh run).
                        self._before[key]["p"] = _values(param, at)
                    self._update[key] = {
                        "g": _values(param.grad, at),
                        "lr": float(group["lr"]),
                        "weight_decay": float(group.get("weight_decay", 0.0)),
                    }

        def after_step(inner: Any, *args: Any, **kwargs: Any) -> None:
            for mine, group, param, at, key in sampled:
                if mine is inner and key in self._update:
                    after = {
                        "p": _values(param, at),
                        "step": _step_of(inner, group, param),
                        **_moments(inner, param, at),
                    }
                    self._update[key]["after"] = after

        for inner in optimizers.values():
            self._hooks += [inner.register_step_pre_hook(before_step), inner.register_step_post_hook(after_step)]
        self._cost += time.perf_counter() - started

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        started = time.perf_counter()
        if self._hooks:  # the first step of this process: its update, then the hooks go
            for hook in self._hooks:
                hook.remove()
            self._hooks = []
            mine = [{"key": k, "before": b, **self._update.get(k, {})} for k, b in self._before.items()]
            self._append(trainer, {"event": "update", "step": trainer.global_step}, mine, started)
            started = time.perf_counter()
        self._append(trainer, {"event": "steps", "step": trainer.global_step}, step_counters(trainer), started)
