"""The CPU compatibility layer on its own: the backward passes Megatron nests inside a backward stay on the CPU, and
where CUDA is present the layer changes nothing.

Each case runs in a fresh interpreter: `engage()` wraps library functions for the life of a process, which must not
leak into the other tests of this session."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("megatron.core", reason="Megatron-Core is not installed (tier b)")

pytestmark = [pytest.mark.nemo]

#: Megatron's full recomputation of a layer that asks for buffers on torch.cuda.current_device() in its forward and
#: its backward, as the sequence-parallel all-gather does (mappings.py `_gather_along_first_dim`, and its backward's
#: reduce-scatter); gradients compared with a plain run.
NESTED_BACKWARD = textwrap.dedent(
    """
    import torch
    from megatron.core import tensor_parallel
    from nemo_recipes.training import cpu_compat

    print("patches", len(cpu_compat.engage()))

    class Gather(torch.autograd.Function):
        # the all-gather's own backward (a reduce-scatter) allocates its output on the current device too
        @staticmethod
        def forward(ctx, x):
            out = torch.empty(x.shape, dtype=x.dtype, device=torch.cuda.current_device())
            return out.copy_(x)

        @staticmethod
        def backward(ctx, grad):
            out = torch.empty(grad.shape, dtype=grad.dtype, device=torch.cuda.current_device())
            return out.copy_(grad)

    def layer(x, w):
        return torch.tanh(Gather.apply(x) @ w)

    def gradients(how, entry):
        torch.manual_seed(0)
        x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
        with cpu_compat.cpu_scope():
            out = tensor_parallel.checkpoint(layer, False, x, w) if how == "recompute" else layer(x, w)
            loss = (out * out).sum()
            # the schedule's entry point (schedules.py custom_backward) runs the engine directly; the nested
            # torch.autograd.backward is CheckpointFunction's own
            if entry == "engine":
                torch.autograd.graph._engine_run_backward((loss,), (torch.ones(()),), False, False, (), True, True)
            elif entry == "function":
                torch.autograd.backward(loss)
            else:
                loss.backward()
        return x.grad.tolist(), w.grad.tolist()

    for entry in ("engine", "function", "method"):
        try:
            same = gradients("recompute", entry) == gradients("plain", entry)
            print(entry, "same gradients" if same else "different gradients")
        except RuntimeError as error:
            print(entry, "failed:", error)
    """
)

#: With CUDA reported present, engage() installs nothing and every library function it would wrap stays the same
#: object; the scope is never entered by any wrapper.
WITH_CUDA = textwrap.dedent(
    """
    import inspect
    import torch
    from nemo_recipes.training import cpu_compat

    # the libraries are imported (and ask about the device) while the CPU is the truth; then CUDA "appears"
    before = {p.name: inspect.getattr_static(*p.resolve()) for p in cpu_compat.PATCHES}
    torch.cuda.is_available = lambda: True
    installed = cpu_compat.engage()
    after = {p.name: inspect.getattr_static(*p.resolve()) for p in cpu_compat.PATCHES}
    changed = [name for name in before if before[name] is not after[name]]
    print("installed", installed, "changed", changed)
    """
)


def _python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_full_recomputation_backward_stays_on_the_cpu():
    """Before the fix, every entry point failed with 'Cannot access accelerator device when none is available'
    inside CheckpointFunction.backward: torch pops the mode while its handler for torch.autograd.backward runs."""
    lines = _python(NESTED_BACKWARD).splitlines()
    assert int(lines[0].split()[1]) > 0  # the patches were installed, as on every CPU run
    # the same gradients to the last bit: the recomputation is the same maths, on the CPU
    assert lines[1:] == ["engine same gradients", "function same gradients", "method same gradients"]


def test_the_layer_changes_nothing_where_cuda_is_present():
    assert _python(WITH_CUDA).strip() == "installed [] changed []"
