"""The optimizer and the parameters as Megatron built them, recorded on every rank for the judge (built_checks.py),
because a wrong weight decay, clipping left off or frozen layers change a smoke run's loss by thousandths of a nat:
no loss check sees them, only a look at what was built.

Recorded per rank when training starts (after the build and any load): the optimizer's config against the recipe,
each parameter group's weight decay against NeMo's rule for the parameters it holds, the precision of gradients and
main parameters, and which parameters do not require gradients; and a fingerprint of each parameter when the run
starts from step 0 and when a phase ends, so that the judge sees every parameter moved. Imported inside the
training processes (Lightning, torch, Megatron-Core)."""

from __future__ import annotations

import math
import time
from typing import Any

from lightning.pytorch.callbacks import Callback

from nemo_recipes.smoke_training.checksums import digest, per_rank
from nemo_recipes.smoke_training.module_fields import measured_fields
from nemo_recipes.smoke_training.record import append


def expected_optimizer(spec: Any) -> dict[str, Any]:
    """What the recipe asks of the optimizer (training/parts.py `optim`) and of the initialisation, as plain
    values."""
    from nemo_recipes.smoke_training.built_fields import recipe_values

    half = spec.precision in ("bf16", "fp8", "fp16")
    return {
        "recipe": recipe_values(spec),
        "init_method_std": spec.init_method_std,
        "num_layers": spec.num_layers,
        "lr": spec.max_lr,
        "min_lr": spec.min_lr,
        "weight_decay": spec.weight_decay,
        "adam_beta1": spec.adam_beta1,
        "adam_beta2": spec.adam_beta2,
        "adam_eps": spec.adam_eps,
        "clip_grad": spec.clip_grad,
        "use_distributed_optimizer": spec.distributed_optimizer,
        # Mixed precision keeps fp32 main parameters and reduces gradients in fp32 (parts.py grad_reduce_in_fp32).
        "main_params_dtype": "torch.float32",
        "main_grads_dtype": "torch.float32",
        "half": half,
    }


def no_weight_decay(name: str, param: Any) -> bool:
    """Megatron's default rule, which NeMo's MegatronOptimizerModule keeps (no_weight_decay_cond None): biases and
    one-dimensional parameters (norm scales and shifts) are not decayed."""
    return name.endswith(".bias") or len(param.shape) == 1


def mcore_parts(optimizer: Any) -> list[Any]:
    optimizer = getattr(optimizer, "mcore_optimizer", optimizer)
    return list(getattr(optimizer, "chained_optimizers", None) or [optimizer])


def _model_params_per_group(part: Any) -> list[list[Any]]:
    """The model parameters behind each of the torch optimizer's param groups: a distributed optimizer's and a
    mixed-precision optimizer's groups hold fp32 copies (shards), kept beside the model parameters they stand for."""
    if hasattr(part, "model_float16_groups"):
        return [a + b for a, b in zip(part.model_float16_groups, part.model_fp32_groups, strict=True)]
    if hasattr(part, "float16_groups"):
        return [a + b for a, b in zip(part.float16_groups, part.fp32_from_fp32_groups, strict=True)]
    return [list(group["params"]) for group in part.optimizer.param_groups]


def _main_params(part: Any) -> list[Any]:
    return [p for group in part.optimizer.param_groups for p in group["params"]]


def as_built(trainer: Any, pl_module: Any, expected: dict[str, Any]) -> dict[str, Any]:
    """This rank's findings: a list of wrong things per heading (empty: as the recipe says), and what was seen."""
    names = {id(p): n for n, p in pl_module.named_parameters()}
    config_wrong, decay_wrong, precision_wrong, seen = [], [], [], {}
    parts = [part for optimizer in trainer.optimizers for part in mcore_parts(optimizer)]
    for part in parts:
        config = part.config
        for key in ("lr", "min_lr", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "clip_grad"):
            seen[key] = getattr(config, key)
            if getattr(config, key) != expected[key]:
                config_wrong.append(f"{key} {getattr(config, key)} (recipe {expected[key]})")
        distributed = type(part).__name__ == "DistributedOptimizer"
        seen["distributed optimizer"] = distributed
        if distributed != expected["use_distributed_optimizer"]:
            config_wrong.append(f"{type(part).__name__} (recipe: distributed {expected['use_distributed_optimizer']})")
        for g, (group, params) in enumerate(
            zip(part.optimizer.param_groups, _model_params_per_group(part), strict=True)
        ):
            if tuple(group.get("betas", ())) != (expected["adam_beta1"], expected["adam_beta2"]):
                config_wrong.append(f"group {g} betas {group.get('betas')}")
            if group.get("eps") != expected["adam_eps"]:
                config_wrong.append(f"group {g} eps {group.get('eps')}")
            for param in params:
                name = names.get(id(param), "?")
                want = 0.0 if no_weight_decay(name, param) else expected["weight_decay"]
                if group.get("weight_decay") != want:
                    decay_wrong.append(f"{name}: {group.get('weight_decay')} (expected {want})")
        if expected["half"]:
            dtypes = {str(p.dtype) for p in _main_params(part)}
            seen["main params"] = sorted(dtypes)
            if dtypes != {expected["main_params_dtype"]}:
                precision_wrong.append(f"main params {sorted(dtypes)}")
    grads = {str(p.main_grad.dtype) for p in pl_module.parameters() if getattr(p, "main_grad", None) is not None}
    seen["grads"] = sorted(grads)
    if expected["half"] and grads != {expected["main_grads_dtype"]}:
        precision_wrong.append(f"gradient buffers {sorted(grads)}")
    if not parts:
        config_wrong.append("no Megatron optimizer built")
    frozen = [n for n, p in pl_module.named_parameters() if not p.requires_grad]
    return {
        "fields": measured_fields(trainer, parts, expected["recipe"]),
        "config": config_wrong,
        "weight_decay": decay_wrong,
        "precision": precision_wrong,
        "frozen": frozen,
        "parameters": sum(1 for _ in pl_module.parameters()),
        "seen": seen,
    }


def initial_stds(pl_module: Any, expected: dict[str, Any]) -> dict[str, list[float]]:
    """Each weight matrix of this rank (its shard) at step 0: [elements, measured std, the recipe's std]. Megatron
    draws every matrix from normal(0, init_method_std), the output projections of attention and MLP from
    normal(0, init_method_std / sqrt(2 x layers)); norms and biases start constant and are not listed."""
    from nemo_recipes.smoke_training.replicas import SCALED_INIT

    sigma = expected["init_method_std"]
    found = {}
    for name, param in pl_module.named_parameters():
        if param.dim() < 2 or param.numel() < 2:
            continue
        want = sigma / math.sqrt(2.0 * expected["num_layers"]) if name.endswith(SCALED_INIT) else sigma
        found[name] = [param.numel(), float(param.detach().float().std()), want]
    return found


def main_copies(part: Any) -> list[tuple[Any, Any]]:
    """(model parameter, the optimizer's copy of it: fp32 main param, this rank's shard with the distributed
    optimizer) for each parameter this part of the optimizer steps on this rank."""
    mains = [group["params"] for group in part.optimizer.param_groups]
    if hasattr(part, "shard_fp32_from_float16_groups"):
        mains = [a + b for a, b in zip(part.shard_fp32_from_float16_groups, part.shard_fp32_groups, strict=True)]
    elif hasattr(part, "fp32_from_float16_groups"):
        mains = [a + b for a, b in zip(part.fp32_from_float16_groups, part.fp32_from_fp32_groups, strict=True)]
    return [
        pair
        for models, copies in zip(_model_params_per_group(part), mains, strict=True)
        for pair in zip(models, copies, strict=True)
    ]


def fingerprints(trainer: Any, pl_module: Any) -> dict[str, str]:
    """Each parameter's optimizer copy, by the model parameter's name: the copy that moves. A bf16 norm scale of 1.0
    stays bit-equal through a smoke run's updates of ~1e-4 (half its rounding step is 2e-3); its fp32 copy moves."""
    names = {id(p): n for n, p in pl_module.named_parameters()}
    found: dict[str, str] = {}
    for optimizer in trainer.optimizers:
        for part in mcore_parts(optimizer):
            for model, copy in main_copies(part):
                name = names.get(id(model), f"?{len(found)}")
                found[name] = digest([(name, copy)])
    return found


class BuiltAsRecipe(Callback):
    """Records `as_built` when training starts and the parameters' fingerprints at the start of step 0 and at the
    end of each phase, from every rank (collectives: every rank takes part)."""

    def __init__(self, path: str, phase: str, expected: dict[str, Any]):
        self.path, self.phase, self.expected = path, phase, expected

    def _record(self, trainer: Any, event: dict[str, Any], mine: Any) -> None:
        from nemo_recipes.smoke_training.callbacks import attempt

        ranks = per_rank(mine)
        if trainer.global_rank == 0:
            append(
                self.path,
                {**event, "phase": self.phase, "attempt": attempt(), "time": time.time(), "ranks": ranks},
            )

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._record(
            trainer, {"event": "built", "step": trainer.global_step}, as_built(trainer, pl_module, self.expected)
        )
        if trainer.global_step == 0:
            self._record(
                trainer, {"event": "parameters", "when": "initial", "step": 0}, fingerprints(trainer, pl_module)
            )
            self._record(trainer, {"event": "initial std", "step": 0}, initial_stds(pl_module, self.expected))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._record(
            trainer,
            {"event": "parameters", "when": "end", "step": trainer.global_step},
            fingerprints(trainer, pl_module),
        )
