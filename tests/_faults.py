"""Faults planted where NeMo, Megatron-Core or Lightning would have them, so that the smoke tests watch the judge fail
a run that is really broken (tests only: the package ships no planted bug). Each is a Lightning callback that replaces
one function of theirs (or changes what they built) in every training process; the training processes load this file
by its path (`planted`), handed to `smoke(faults={phase: planted(name, ...)})`.

Faults of the resume (weights not restored, gradient sync off); issue 31's (the loss across the resume, the optimizer
as built, the checkpoint files); the data fed (the loader, the replicas, the labels); issue 46's (every optimizer
step the optimizer's: its step counter, each group's learning rate, the AdamW update); and a Mixture-of-Experts
model's (routing collapsed, top-k ignored, the balancing loss dropped, an expert-parallel rank's experts not
restored)."""

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


class WeightsNotRestored(Callback):
    """A resumed phase trains from freshly initialised weights, as if the checkpoint's weights
    had not been loaded (normal(0, 0.02) matrices, unit norm scales, zero biases), while the step, the data
    position, the optimizer and the schedule are restored."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        import torch

        if not trainer.ckpt_path:
            return
        generator = torch.Generator().manual_seed(trainer.global_rank)
        with torch.no_grad():
            for name, param in pl_module.named_parameters():
                if param.dim() >= 2:
                    fresh = torch.empty(param.shape).normal_(0.0, 0.02, generator=generator)
                    param.copy_(fresh.to(param.dtype))
                else:
                    param.fill_(1.0 if name.endswith("weight") else 0.0)


class NoGradSync(Callback):
    """Megatron DDP's gradient all-reduce (reduce-scatter with the distributed optimizer) never
    runs: each data-parallel rank steps on its own micro-batches' gradients, unscaled and unshared."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

        def start_grad_sync(self: Any) -> None:
            return None

        def finish_grad_sync(self: Any) -> None:
            self.param_gather_dispatched = False  # what the real one resets besides the collective

        _ParamAndGradBucketGroup.start_grad_sync = start_grad_sync
        _ParamAndGradBucketGroup.finish_grad_sync = finish_grad_sync


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


class StepSkippedAtSecondResumedStep(Callback):
    """Megatron's mixed-precision optimizer skips the inner Adam step of the second resumed step and reports it done
    (as a step skipped for an inf that was never counted): the global step goes on, Adam's own counter does not."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.optimizer.optimizer import MixedPrecisionOptimizer

        original = MixedPrecisionOptimizer.step_with_ready_grads
        calls = [0]

        def step_with_ready_grads(self: Any) -> bool:
            calls[0] += 1
            return True if calls[0] == 2 else original(self)

        MixedPrecisionOptimizer.step_with_ready_grads = step_with_ready_grads


class LastGroupAtHalfTheSchedule(Callback):
    """NeMo's scheduler (WarmupAnnealHoldPolicy.get_lr, CosineAnnealing's) gives the last parameter group half the
    schedule's learning rate, as an lr multiplier applied to the wrong group would; the first group is untouched."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from nemo.core.optim.lr_scheduler import WarmupAnnealHoldPolicy

        original = WarmupAnnealHoldPolicy.get_lr

        def get_lr(self: Any) -> list[float]:
            lrs = list(original(self))
            if len(lrs) > 1:
                lrs[-1] *= 0.5
            return lrs

        WarmupAnnealHoldPolicy.get_lr = get_lr


class CausalMaskOff(Callback):
    """Megatron-Core's softmax builds its default causal mask with nothing masked (get_default_causal_mask, as the
    PyTorch softmax path imports it): every position attends to the tokens after it too."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        import torch
        from megatron.core.fusions import fused_softmax

        def get_default_causal_mask(sq: int) -> Any:
            return torch.zeros(sq, sq, dtype=torch.bool)

        fused_softmax.get_default_causal_mask = get_default_causal_mask


class PositionsRestartMidSequence(Callback):
    """Megatron's `GPTDataset.__getitem__` returns position ids that restart at the middle of each sequence (as a
    position reset at a document's end that the recipe does not ask for, placed wrongly)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.datasets.gpt_dataset import GPTDataset

        original = GPTDataset.__getitem__

        def __getitem__(self: Any, idx: Any) -> dict[str, Any]:
            sample = original(self, idx)
            length = sample["position_ids"].shape[-1]
            sample["position_ids"] = sample["position_ids"] % max(1, length // 2)
            return sample

        GPTDataset.__getitem__ = __getitem__


class OutputProjectionsUnscaled(Callback):
    """The built recipe's model config draws the attention and MLP output projections with the init method of every
    other matrix (full init_method_std), Megatron's scaled init (std / sqrt(2 x layers)) dropped. Set before NeMo
    builds the model from the config."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl_module.config.output_layer_init_method = pl_module.config.init_method


class BlendWeightsEqualised(Callback):
    """Megatron-Core's dataset builder normalises a blend's weights to equal shares (its `normalize`, as
    blended_megatron_dataset_builder imports it): every source is drawn alike, whatever the recipe's weights. Planted
    when the callback is made, with the recipe: NeMo builds the datasets before any callback's setup."""

    def __init__(self) -> None:
        from megatron.core.datasets import blended_megatron_dataset_builder as builder

        def normalize(weights: list[float]) -> list[float]:
            return [1.0 / len(weights)] * len(weights)

        builder.normalize = normalize


class RouterLogitsZeroed(Callback):
    """Every router's gating returns zeros (a router whose weights never reach its logits): the top-k of equal
    scores is always the same k experts, every token goes to them and the others get none, while the load-balancing
    loss, uniform probabilities times those counts, reads exactly 1, as if balanced."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.transformer.moe.router import TopKRouter

        original = TopKRouter.gating

        def gating(self: Any, input: Any) -> Any:
            return original(self, input) * 0.0

        TopKRouter.gating = gating


class RouterTopOne(Callback):
    """The routers pick one expert per token whatever the recipe's top-k (k read as 1 in the routing)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.transformer.moe import router

        original = router.topk_routing_with_score_function

        def topk_routing_with_score_function(logits: Any, topk: int, *args: Any, **kwargs: Any) -> Any:
            return original(logits, 1, *args, **kwargs)

        router.topk_routing_with_score_function = topk_routing_with_score_function


class BalancingLossDropped(Callback):
    """The routers never attach (nor log) their load-balancing loss, as with its coefficient dropped."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from megatron.core.transformer.moe.router import TopKRouter

        def _apply_aux_loss(self: Any, probs: Any, scores_for_aux_loss: Any, routing_map: Any) -> Any:
            return probs

        TopKRouter._apply_aux_loss = _apply_aux_loss


class ExpertsNotRestoredOnLastEPRank(Callback):
    """After the resume's load, the last expert-parallel rank's routed experts are drawn afresh (normal(0, 0.02)),
    as if its expert shard of the checkpoint had not been read; every other tensor is restored."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        import torch
        from megatron.core import parallel_state as ps

        last = ps.get_expert_model_parallel_world_size() - 1
        if not trainer.ckpt_path or ps.get_expert_model_parallel_rank() != last:
            return
        generator = torch.Generator().manual_seed(11)
        with torch.no_grad():
            for name, param in pl_module.named_parameters():
                if ".mlp.experts." in name:
                    param.copy_(torch.empty(param.shape).normal_(0.0, 0.02, generator=generator).to(param.dtype))
        for optimizer in trainer.optimizers:  # the optimizer's main copies too, or the first step would undo it
            getattr(optimizer, "mcore_optimizer", optimizer).reload_model_params()


class NormEpsilonIgnored(Callback):
    """NeMo's GPTConfig.configure_model returns a model whose norms were built with eps 1e-2, whatever the recipe's
    norm_epsilon (the config object still says the recipe's: only the modules show it)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from nemo.collections.llm.gpt.model.base import GPTConfig

        original = GPTConfig.configure_model

        def configure_model(self: Any, *args: Any, **kwargs: Any) -> Any:
            model = original(self, *args, **kwargs)
            for module in model.modules():
                if "Norm" in type(module).__name__ and hasattr(module, "eps"):
                    module.eps = 1e-2
            return model

        GPTConfig.configure_model = configure_model


class ReportedLossDoubled(Callback):
    """NeMo's MaskedTokenLossReduction.reduce reports twice the mean loss of the global batch (as a reduction that
    divided the summed loss by half the tokens would); the gradient, from the micro-batches' own losses, is right."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from nemo.lightning.megatron_parallel import MaskedTokenLossReduction

        original = MaskedTokenLossReduction.reduce

        def reduce(self: Any, *args: Any, **kwargs: Any) -> Any:
            return 2.0 * original(self, *args, **kwargs)

        MaskedTokenLossReduction.reduce = reduce


class GradientsDoubled(Callback):
    """Megatron-Core's finalize_model_grads (as NeMo's MegatronOptimizerModule calls it) leaves every gradient
    twice its value, as a gradient scaled by a wrong factor (1 / DP taken for 2 / DP) would."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        import nemo.lightning.pytorch.optim.megatron as nemo_optim

        original = nemo_optim.finalize_model_grads

        def finalize_model_grads(model: Any, *args: Any, **kwargs: Any) -> Any:
            found = original(model, *args, **kwargs)
            for chunk in model:
                for param in chunk.parameters():
                    if getattr(param, "main_grad", None) is not None:
                        param.main_grad.mul_(2.0)
            return found

        nemo_optim.finalize_model_grads = finalize_model_grads


class TokenizerVocabularyShort(Callback):
    """NeMo's AutoTokenizer reports one id fewer than the tokenizer holds (its last added token not counted): the run's
    tokenizer is not the one the data was written with, though its padded model vocabulary is the same."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer

        original = AutoTokenizer.vocab_size
        AutoTokenizer.vocab_size = property(lambda self: original.fget(self) - 1)  # type: ignore[method-assign]


#: Fault name -> the callback that plants it.
FAULTS: dict[str, type[Callback]] = {
    "weights-not-restored": WeightsNotRestored,
    "no-grad-sync": NoGradSync,
    "moments-zeroed-at-first-resumed-step": MomentsZeroedAtFirstResumedStep,
    "tp-rank-reinitialised-at-first-resumed-step": TensorRankReinitialisedAtFirstResumedStep,
    "weight-decay-0": WeightDecayZero,
    "no-clipping": NoClipping,
    "frozen-attention": FrozenAttention,
    "truncated-final-checkpoint": TruncatedFinalCheckpoint,
    "loader-restarts-at-zero": LoaderRestartsAtZero,
    "loader-skips-a-batch": LoaderSkipsABatch,
    "replicas-read-the-same-data": ReplicasReadTheSameData,
    "labels-not-shifted": LabelsNotShifted,
    "step-skipped-at-second-resumed-step": StepSkippedAtSecondResumedStep,
    "last-group-at-half-the-schedule": LastGroupAtHalfTheSchedule,
    "causal-mask-off": CausalMaskOff,
    "positions-restart-mid-sequence": PositionsRestartMidSequence,
    "output-projections-unscaled": OutputProjectionsUnscaled,
    "blend-weights-equalised": BlendWeightsEqualised,
    "router-logits-zeroed": RouterLogitsZeroed,
    "router-top-one": RouterTopOne,
    "balancing-loss-dropped": BalancingLossDropped,
    "experts-not-restored-on-last-ep-rank": ExpertsNotRestoredOnLastEPRank,
    "norm-epsilon-ignored": NormEpsilonIgnored,
    "reported-loss-doubled": ReportedLossDoubled,
    "gradients-doubled": GradientsDoubled,
    "tokenizer-vocabulary-short": TokenizerVocabularyShort,
}


def planted(*names: str) -> str:
    """The faults `names` as a phase's `fault` value: each "this file's path:its class", which the training
    processes load by path (they do not have tests/ on their import path)."""
    return ",".join(f"{Path(__file__).resolve()}:{FAULTS[name].__name__}" for name in names)
