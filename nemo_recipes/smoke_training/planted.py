"""Faults planted where NeMo, Megatron-Core or Lightning would have them (issue 31): each a monkeypatch of their own
function, installed by a Lightning callback in every training process, so that the tests see the judge's checks of
the loss across the resume, the optimizer as built and the checkpoint files fail on a real bug. Tests only
(registered in faults.FAULTS); imported inside the training processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lightning.pytorch.callbacks import Callback


def _once_before_first_step(action: Callable[[Any], None]) -> None:
    """Megatron's mixed-precision optimizer step (the inner Adam step, then main params copied to the model) runs
    `action(optimizer)` first, once: the first step this process takes."""
    from megatron.core.optimizer.optimizer import MixedPrecisionOptimizer

    original = MixedPrecisionOptimizer.step_with_ready_grads

    def step_with_ready_grads(self: Any) -> bool:
        MixedPrecisionOptimizer.step_with_ready_grads = original
        action(self)
        return original(self)

    MixedPrecisionOptimizer.step_with_ready_grads = step_with_ready_grads


class MomentsZeroedAtFirstResumedStep(Callback):
    """Adam's moments, restored exactly by the load, are zeroed inside the first resumed step (after the state
    digests), as an optimizer step that re-initialised its state would."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.ckpt_path:
            return

        def zero(optimizer: Any) -> None:
            for state in optimizer.optimizer.state.values():
                for moment in ("exp_avg", "exp_avg_sq"):
                    if moment in state:
                        state[moment].zero_()

        _once_before_first_step(zero)


class TensorRankReinitialisedAtFirstResumedStep(Callback):
    """Tensor-parallel rank 1 re-initialises its shard of every weight matrix (its fp32 main copy, which the step
    then copies into the model: normal(0, 0.02)) inside the first resumed step."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        from megatron.core import parallel_state as ps

        if not trainer.ckpt_path or ps.get_tensor_model_parallel_rank() != 1:
            return

        def reinitialise(optimizer: Any) -> None:
            import torch

            from nemo_recipes.smoke_training.built import main_copies

            generator = torch.Generator().manual_seed(7)
            with torch.no_grad():
                for model, copy in main_copies(optimizer):
                    if model.dim() >= 2:
                        copy.copy_(torch.empty(copy.shape).normal_(0.0, 0.02, generator=generator).to(copy.dtype))

        _once_before_first_step(reinitialise)


class WeightDecayZero(Callback):
    """Megatron's param groups all get wd_mult 0, as if its no-decay rule matched every parameter."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        import megatron.core.optimizer as mcore_optimizer

        original = mcore_optimizer._get_param_groups

        def _get_param_groups(*args: Any, **kwargs: Any) -> Any:
            groups = original(*args, **kwargs)
            for group in groups:
                group["wd_mult"] = 0.0
            return groups

        mcore_optimizer._get_param_groups = _get_param_groups


class NoClipping(Callback):
    """The optimizer is built with clip_grad 0 (no clipping), as a NeMo that dropped the recipe's value would."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        import megatron.core.optimizer as mcore_optimizer

        original = mcore_optimizer.get_megatron_optimizer

        def get_megatron_optimizer(config: Any, *args: Any, **kwargs: Any) -> Any:
            config.clip_grad = 0.0
            return original(config, *args, **kwargs)

        mcore_optimizer.get_megatron_optimizer = get_megatron_optimizer


class FrozenAttention(Callback):
    """NeMo's GPTConfig.configure_model returns a model whose attention parameters do not require gradients."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from nemo.collections.llm.gpt.model.base import GPTConfig

        original = GPTConfig.configure_model

        def configure_model(self: Any, *args: Any, **kwargs: Any) -> Any:
            model = original(self, *args, **kwargs)
            for name, param in model.named_parameters():
                if "self_attention" in name:
                    param.requires_grad_(False)
            return model

        GPTConfig.configure_model = configure_model


class TruncatedFinalCheckpoint(Callback):
    """NeMo's checkpoint IO leaves the tensor files of the final checkpoint (at max_steps) at 0 bytes, its metadata
    whole: a save torn after the index was written."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from nemo.lightning.io.pl import MegatronCheckpointIO, ckpt_to_weights_subdir

        original = MegatronCheckpointIO.save_checkpoint

        def save_checkpoint(self: Any, checkpoint: dict[str, Any], path: Any, *args: Any, **kwargs: Any) -> Any:
            request = original(self, checkpoint, path, *args, **kwargs)
            if checkpoint.get("global_step") == trainer.max_steps:

                def truncate() -> None:
                    for tensors in Path(ckpt_to_weights_subdir(path, is_saving=True)).rglob("*.distcp"):
                        tensors.write_bytes(b"")

                # An asynchronous save writes its files later: cut them once it has finalised.
                request.add_finalize_fn(truncate) if request is not None else truncate()
            return request

        MegatronCheckpointIO.save_checkpoint = save_checkpoint


PLANTED: dict[str, type[Callback]] = {
    "moments-zeroed-at-first-resumed-step": MomentsZeroedAtFirstResumedStep,
    "tp-rank-reinitialised-at-first-resumed-step": TensorRankReinitialisedAtFirstResumedStep,
    "weight-decay-0": WeightDecayZero,
    "no-clipping": NoClipping,
    "frozen-attention": FrozenAttention,
    "truncated-final-checkpoint": TruncatedFinalCheckpoint,
}
