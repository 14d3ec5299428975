"""The patches of the CPU compatibility layer: each wraps exactly one named library function, either to run it in
`cpu_scope()` or to fix a defect of the pinned stack that only the CPU path reaches. `PATCHES` lists each with the
library line that needs it; the package's `engage()` installs them."""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from nemo_recipes.smoke_training.cpu_compat.scope import cpu_scope


@dataclass(frozen=True)
class Patch:
    """One wrapped library function: `target` is 'module:Owner.attribute' (or 'module:function')."""

    name: str
    target: str
    why: str
    install: Callable[["Patch"], bool]  # returns False when the installed library no longer needs it

    def resolve(self) -> tuple[Any, str]:
        module_name, _, path = self.target.partition(":")
        owner: Any = __import__(module_name, fromlist=["_"])
        *owners, attribute = path.split(".")
        for part in owners:
            owner = getattr(owner, part)
        return owner, attribute


def _replace(patch: Patch, make: Callable[[Callable], Callable]) -> bool:
    owner, attribute = patch.resolve()
    original = inspect.getattr_static(owner, attribute)
    is_static = isinstance(original, staticmethod)
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    if getattr(function, "__cpu_compat__", False):
        return True  # already wrapped in this process
    wrapper = functools.wraps(function)(make(function))
    wrapper.__cpu_compat__ = True  # type: ignore[attr-defined]  # a marker on the function object
    setattr(owner, attribute, staticmethod(wrapper) if is_static else wrapper)
    return True


def _in_cpu_scope(patch: Patch) -> bool:
    def make(function: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with cpu_scope():
                return function(*args, **kwargs)

        return wrapper

    return _replace(patch, make)


def _no_cuda_rng_state(patch: Patch) -> bool:
    """Megatron's recomputation (tensor_parallel.CheckpointFunction) saves and restores the CUDA generator's state
    around the recomputed forward; without CUDA there is none to keep (the CPU state is kept by the caller)."""

    def make(function: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            import torch

            return torch.empty(0, dtype=torch.uint8) if function.__name__.startswith("_get") else None

        return wrapper

    return _replace(patch, make)


def _cpu_rng_tracker(patch: Patch) -> bool:
    """NeMo seeds Megatron's model-parallel RNG tracker only when a GPU is counted, and the tracker keeps CUDA
    generator states; dropout under tracker.fork() then fails. After NeMo's own seeding, install a tracker with the
    same interface and seeds whose states are CPU generator states."""
    import torch
    from megatron.core.tensor_parallel import random as mrandom
    from nemo.lightning import megatron_init

    class CpuRNGStatesTracker(mrandom.CudaRNGStatesTracker):
        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise Exception(f"seed {seed} already exists")
            if name in self.states_:
                raise Exception(f"rng state {name} already exists")
            self.seeds_.add(seed)
            outer = torch.get_rng_state()
            torch.manual_seed(seed)
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)

        @contextlib.contextmanager
        def fork(self, name: str = mrandom._MODEL_PARALLEL_RNG_TRACKER_NAME) -> Iterator[None]:
            if name not in self.states_:
                raise Exception(f"rng state {name} is not added")
            outer = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(outer)

    def make(function: Callable) -> Callable:
        def wrapper(seed: int) -> None:
            function(seed)
            mrandom._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
            mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
            # The same seed NeMo gives Megatron on a GPU: distinct per pipeline stage.
            mrandom.model_parallel_cuda_manual_seed(seed + 100 * megatron_init.get_pipeline_model_parallel_rank())

        return wrapper

    return _replace(patch, make)


def _torch_optimizer_path() -> bool:
    from megatron.core.optimizer import distrib_optimizer

    return not distrib_optimizer.HAVE_APEX_OR_TE


def _template_without_state(patch: Patch) -> bool:
    """On resume NeMo asks the distributed optimizer for a state-dict template before any step; on the pure-PyTorch
    optimizer path DistributedOptimizer.state_dict() reads Adam's per-parameter 'step', which a fresh AdamW does not
    have yet (`assert len(steps) == 1`). Give the same template with a placeholder step 0; the load below puts the
    checkpoint's step back."""
    if not _torch_optimizer_path():
        return False

    def make(function: Callable) -> Callable:
        def state_dict(self: Any) -> Any:
            if len(self.optimizer.state) > 0:
                return function(self)
            inner = self.optimizer.state_dict()
            result = {"optimizer": {k: v for k, v in inner.items() if k != "state"}}
            for group in result["optimizer"]["param_groups"]:
                del group["params"]
                group["step"] = 0
            if self.grad_scaler:
                result["grad_scaler"] = self.grad_scaler.state_dict()
            return result

        return state_dict

    return _replace(patch, make)


def _restore_adam_step(patch: Patch) -> bool:
    """After loading, Megatron copies every per-parameter state key from the load template, 'step' included, so a
    resumed Adam would restart its bias correction at the template's step: set it to the checkpoint's step."""
    if not _torch_optimizer_path():
        return False

    def make(function: Callable) -> Callable:
        def load_state_dict(self: Any, state_dict: Any) -> Any:
            import torch

            result = function(self, state_dict)
            steps = {group.get("step") for group in state_dict["optimizer"]["param_groups"]}
            if len(steps) == 1 and None not in steps:
                step = torch.tensor(float(steps.pop()), dtype=torch.float32)
                for state in self.optimizer.state.values():
                    if "step" in state:
                        state["step"] = step.clone()
            return result

        return load_state_dict

    return _replace(patch, make)


def _dp_reshardable_without_step(patch: Patch) -> bool:
    """Megatron-Core 0.15.3 puts torch AdamW's 0-dim per-parameter 'step' into the dp-reshardable bucket state next
    to the flat moments, and the shape check of sharded_param_state_dp_reshardable then fails on the first save
    (0.16 leaves 'step' out). Leave it out here too; the param-group step in the checkpoint carries it."""
    from megatron.core.optimizer import distrib_optimizer

    if not _torch_optimizer_path() or "if key == 'step'" in inspect.getsource(
        distrib_optimizer.DistributedOptimizer.sharded_param_state_dp_reshardable
    ):
        return False

    def make(function: Callable) -> Callable:
        def get_parameter_state_dp_reshardable(self: Any) -> Any:
            state = function(self)
            for gbuf_index in range(len(self.gbuf_ranges)):
                for buckets in state[gbuf_index].values():
                    for bucket_state in buckets:
                        for tensors in bucket_state:
                            tensors.pop("step", None)
            return state

        return get_parameter_state_dp_reshardable

    return _replace(patch, make)


def _keep_step_on_load(patch: Patch) -> bool:
    """The load side of the previous patch: a checkpoint without per-parameter 'step' keeps the optimizer's own
    (which the Adam-step restore then sets to the checkpoint's step) instead of raising KeyError 'step'."""
    from megatron.core.optimizer import distrib_optimizer

    if not _torch_optimizer_path() or "if key == 'step'" in inspect.getsource(
        distrib_optimizer.DistributedOptimizer.sharded_param_state_dp_reshardable
    ):
        return False

    def make(function: Callable) -> Callable:
        def _set_main_param_and_optimizer_states(self: Any, model_param: Any, tensors: dict) -> Any:
            if "step" not in tensors and not self.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
                group_index, group_order = self.model_param_group_index_map[model_param]
                main_param = self.optimizer.param_groups[group_index]["params"][group_order]
                own = self.optimizer.state[main_param]
                if "step" in own:
                    tensors = {**tensors, "step": own["step"].clone()}
            return function(self, model_param, tensors)

        return _set_main_param_and_optimizer_states

    return _replace(patch, make)


def _timers_without_timers(patch: Patch) -> bool:
    """NeMo's progress printer asks Megatron for its timers every step on rank 0 only; with no timer registered,
    Megatron-Core 0.15.3 still allocates on the GPU and all-gathers over the whole world (a rank-0-only collective
    that would hang the other ranks). 0.16 returns early when there is nothing to gather; do the same."""
    from megatron.core.timers import Timers

    if "len(names) == 0" in inspect.getsource(Timers._get_elapsed_time_all_ranks):
        return False

    def make(function: Callable) -> Callable:
        def _get_elapsed_time_all_ranks(self: Any, names: Any, reset: bool, barrier: bool) -> Any:
            return None if len(names) == 0 else function(self, names, reset, barrier)

        return _get_elapsed_time_all_ranks

    return _replace(patch, make)


def _identity(patch: Patch) -> bool:
    """NeMo moves loaded checkpoint tensors to the current CUDA device and asserts CUDA is initialised; on the CPU
    they already are where they belong."""
    return _replace(patch, lambda function: lambda checkpoint: checkpoint)


def _sequence_parallel_torch_norm(patch: Patch) -> bool:
    """Without Transformer Engine or Apex, Megatron's local layer spec uses torch LayerNorm, which refuses sequence
    parallelism. Sequence parallelism only needs the norm's gradients summed over the tensor-parallel group, which
    Megatron does for every parameter marked `sequence_parallel` (as TE's and Apex's norms mark theirs): build the
    norm without the flag, then mark its parameters."""

    def make(function: Callable) -> Callable:
        def __new__(cls: Any, config: Any, hidden_size: int, *args: Any, **kwargs: Any) -> Any:
            if not config.sequence_parallel:
                return function(cls, config, hidden_size, *args, **kwargs)
            config.sequence_parallel = False  # for the constructor's check only; the model keeps it on
            try:
                norm = function(cls, config, hidden_size, *args, **kwargs)
            finally:
                config.sequence_parallel = True
            for parameter in norm.parameters():
                parameter.sequence_parallel = True
            return norm

        return __new__

    return _replace(patch, make)


def _async_finalize_available(patch: Patch) -> bool:
    from nemo.utils.callbacks import dist_ckpt_io

    return getattr(dist_ckpt_io, "HAVE_MEGATRON_CORE", False) and _in_cpu_scope(patch)


PATCHES: tuple[Patch, ...] = (
    Patch(
        "cuda-stream",
        "nemo.lightning.megatron_parallel:MegatronParallel.init_model_parallel",
        "megatron_parallel.py:617 wraps DDP set-up in torch.cuda.stream(torch.cuda.Stream())",
        _in_cpu_scope,
    ),
    Patch(
        "ddp-buffers",
        "megatron.core.distributed.param_and_grad_buffer:_ParamAndGradBuffer.__init__",
        "param_and_grad_buffer.py:796-806 allocates gradient buffers on torch.cuda.current_device()",
        _in_cpu_scope,
    ),
    Patch(
        "optimizer-build",
        "megatron.core.optimizer:get_megatron_optimizer",
        "optimizer.py:485 allocates on 'cuda'; distrib_optimizer.py:361 checks for torch.cuda tensor types",
        _in_cpu_scope,
    ),
    *(
        Patch(
            f"schedule-{kind}",
            f"megatron.core.pipeline_parallel.schedules:forward_backward_{kind}",
            "schedules.py:596 counts tokens on 'cuda'; pipeline sends and the global memory buffer allocate there",
            _in_cpu_scope,
        )
        for kind in ("no_pipelining", "pipelining_without_interleaving", "pipelining_with_interleaving")
    ),
    Patch(
        "training-step",
        "nemo.lightning.pytorch.strategies.megatron_strategy:MegatronStrategy.training_step",
        "megatron_strategy.py:801-881 and data_sampler.py:192,212 copy step scalars with pin_memory to 'cuda'",
        _in_cpu_scope,
    ),
    Patch(
        "validation-step",
        "nemo.lightning.pytorch.strategies.megatron_strategy:MegatronStrategy.validation_step",
        "the validation twin of training-step",
        _in_cpu_scope,
    ),
    Patch(
        "optimizer-step",
        "nemo.lightning.pytorch.strategies.megatron_strategy:MegatronStrategy.optimizer_step",
        "clip_grads.py:103-174 computes the gradient norm on 'cuda'",
        _in_cpu_scope,
    ),
    Patch(
        "checkpoint-save",
        "nemo.lightning.pytorch.strategies.megatron_strategy:MegatronStrategy.save_checkpoint",
        "filesystem_async.py:230 and async_utils.py:210 call torch.cuda.synchronize(); state_dict_saver.py:251",
        _in_cpu_scope,
    ),
    Patch(
        "checkpoint-load",
        "nemo.lightning.pytorch.strategies.megatron_strategy:MegatronStrategy.load_checkpoint",
        "distrib_optimizer.py:790 allocates the loaded optimizer state on 'cuda'",
        _in_cpu_scope,
    ),
    Patch(
        "async-finalize",
        "nemo.utils.callbacks.dist_ckpt_io:AsyncFinalizableCheckpointIO.maybe_finalize_save_checkpoint",
        "async_utils.py:163 gathers the writers' liveness on torch.cuda.current_device()",
        _async_finalize_available,
    ),
    Patch(
        "tied-embeddings",
        "megatron.core.models.common.language_module.language_module:LanguageModule.setup_embeddings_and_output_layer",
        "language_module.py:244 moves the tied embedding to the GPU before its first/last-stage all-reduce (PP > 1)",
        _in_cpu_scope,
    ),
    Patch(
        "recompute-rng-get",
        "megatron.core.tensor_parallel.random:_get_cuda_rng_state",
        "random.py:383 saves the CUDA generator state around recomputed layers",
        _no_cuda_rng_state,
    ),
    Patch(
        "recompute-rng-set",
        "megatron.core.tensor_parallel.random:_set_cuda_rng_state",
        "random.py:391 restores it",
        _no_cuda_rng_state,
    ),
    Patch(
        "rng-tracker",
        "nemo.lightning.megatron_init:_set_random_seed",
        "megatron_init.py:238 seeds the model-parallel RNG tracker only when a GPU is counted",
        _cpu_rng_tracker,
    ),
    Patch(
        "loaded-tensors-device",
        "nemo.lightning.io.pl:_fix_tensors_device",
        "pl.py:495 asserts torch.cuda.is_initialized() after every distributed-checkpoint load",
        _identity,
    ),
    Patch(
        "norm-sequence-parallel",
        "megatron.core.transformer.torch_norm:WrappedTorchNorm.__new__",
        "torch_norm.py:32 refuses sequence parallelism for torch LayerNorm",
        _sequence_parallel_torch_norm,
    ),
    Patch(
        "timers-rank0",
        "megatron.core.timers:Timers._get_elapsed_time_all_ranks",
        "timers.py:286 allocates on the GPU and all-gathers on rank 0 alone",
        _timers_without_timers,
    ),
    Patch(
        "distopt-template",
        "megatron.core.optimizer.distrib_optimizer:DistributedOptimizer.state_dict",
        "distrib_optimizer.py:640 asserts an Adam step exists before the first step (resume template)",
        _template_without_state,
    ),
    Patch(
        "distopt-adam-step",
        "megatron.core.optimizer.distrib_optimizer:DistributedOptimizer.load_state_dict",
        "distrib_optimizer.py:936 overwrites the loaded Adam step with the template's",
        _restore_adam_step,
    ),
    Patch(
        "distopt-save-step",
        "megatron.core.optimizer.distrib_optimizer:DistributedOptimizer.get_parameter_state_dp_reshardable",
        "distrib_optimizer.py:1646 shape check fails on torch AdamW's 0-dim step (0.15.3)",
        _dp_reshardable_without_step,
    ),
    Patch(
        "distopt-load-step",
        "megatron.core.optimizer.distrib_optimizer:DistributedOptimizer._set_main_param_and_optimizer_states",
        "distrib_optimizer.py:928 KeyError 'step' once the step is left out of the saved state",
        _keep_step_on_load,
    ),
)
