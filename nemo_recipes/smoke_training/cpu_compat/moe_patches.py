"""The CPU compatibility layer's patches for Mixture-of-Experts layers (Megatron-Core 0.15.3 without Transformer
Engine): the router's linear layer, the all-to-all token dispatcher's CUDA streams and the router's buffers. Each was
found by training a scaled Mixtral and Qwen3-MoE here (moe-cpu.md). Settings a CPU run needs (grouped GEMM and
permute fusion off) are `cpu_compat.CPU_MOE_SETTINGS`; these are the library functions."""

from __future__ import annotations

from typing import Any, Callable

from nemo_recipes.smoke_training.cpu_compat.patches import Patch, _in_cpu_scope, _replace


def _router_gemm_without_te(patch: Patch) -> bool:
    """`RouterGatingLinearFunction` (under `router_gating_linear`) tests `te_general_gemm is not None` in its forward
    and backward, but the module binds that name only when Transformer Engine imports: without it every router's
    first forward raises NameError. Bound to None, the function takes its own `torch.mm` path (the same product)."""
    from megatron.core.transformer.moe import moe_utils

    if moe_utils.HAVE_TE or hasattr(moe_utils, "te_general_gemm"):
        return False
    moe_utils.te_general_gemm = None
    return True


def _dtoh_on_the_host(patch: Patch) -> bool:
    """The all-to-all dispatcher copies its split sizes to the host on a side CUDA stream and waits on an event of it
    (`_maybe_dtoh_and_synchronize`). On the CPU the tensors are already on the host: what remains of the copy is the
    conversion to the host arrays that its all-to-all takes as split sizes (`as_numpy=True` in the original); there is
    no stream to wait on. `tokens_per_expert` and the other counts stay tensors, as the original leaves them."""

    def make(function: Callable) -> Callable:
        def _maybe_dtoh_and_synchronize(self: Any, point: str, tokens_per_expert: Any = None) -> Any:
            import torch

            if not self.drop_and_pad and point == self.cuda_dtoh_point:
                for name in ("input_splits", "output_splits", "output_splits_tp"):
                    value = getattr(self, name)
                    if torch.is_tensor(value):
                        setattr(self, name, value.numpy())
            return tokens_per_expert

        return _maybe_dtoh_and_synchronize

    return _replace(patch, make)


_DISPATCHER = "megatron.core.transformer.moe.token_dispatcher:MoEAlltoAllTokenDispatcher"

MOE_PATCHES: tuple[Patch, ...] = (
    Patch(
        "moe-router-gemm",
        "megatron.core.transformer.moe.moe_utils:router_gating_linear",
        "moe_utils.py:958,982 read te_general_gemm, bound only when Transformer Engine imports (NameError)",
        _router_gemm_without_te,
    ),
    Patch(
        "moe-router-buffers",
        "megatron.core.transformer.moe.router:TopKRouter.__init__",
        "router.py:165-194 puts the expert bias and token counts on torch.cuda.current_device()",
        _in_cpu_scope,
    ),
    Patch(
        "moe-alltoall-stream",
        f"{_DISPATCHER}.__init__",
        "token_dispatcher.py:425 makes a torch.cuda.Stream() for the split sizes' device-to-host copy",
        _in_cpu_scope,
    ),
    Patch(
        "moe-alltoall-dtoh",
        f"{_DISPATCHER}._maybe_dtoh_and_synchronize",
        "token_dispatcher.py:822-859 copies the split sizes on that stream and waits on its event",
        _dtoh_on_the_host,
    ),
)
