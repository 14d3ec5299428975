"""The CPU compatibility layer on its own: the backward passes Megatron nests inside a backward stay on the CPU, and
where CUDA is present the layer changes nothing.

Each case runs in a fresh interpreter: `engage()` wraps library functions for the life of a process, which must not
leak into the other tests of this session."""

from __future__ import annotations

import os
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
    from nemo_recipes.smoke_training import cpu_compat

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
    from nemo_recipes.smoke_training import cpu_compat

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


#: A Llama recipe through `adapt()`, as the smoke worker calls it, first with CUDA reported present, then (CUDA gone,
#: a fresh recipe) on the CPU: its model config before and after, and whether the config builds (Megatron-Core refuses
#: apply_rope_fusion without Transformer Engine, which this machine lacks); and Megatron's torch RMSNorm under sequence
#: parallelism before and after. One interpreter serves all: with CUDA the layer installs nothing that could leak
#: into the CPU case.
LLAMA_SETTINGS = textwrap.dedent(
    """
    import copy, json
    import fiddle as fdl
    import torch
    import nemo_recipes
    from nemo_recipes.smoke_training import cpu_compat

    def builds(config):
        try:
            fdl.build(config)
            return "builds"
        except Exception as error:
            return str(error)

    def adapted(device):
        recipe = nemo_recipes.llama_8b()  # the libraries are imported while the CPU is the truth (see WITH_CUDA)
        config = recipe.model.config
        keys = ["apply_rope_fusion", "persist_layer_norm", "use_cpu_initialization", "masked_softmax_fusion",
                "normalization", "position_embedding_type", "rotary_base", "activation_func"]
        before = {key: getattr(config, key) for key in keys}
        untouched = copy.deepcopy(config)
        available = torch.cuda.is_available
        if device == "cuda":
            torch.cuda.is_available = lambda: True
        patches = cpu_compat.adapt(recipe, 1)
        torch.cuda.is_available = available
        return {
            "before": before,
            "after": {key: getattr(config, key) for key in keys},
            "patches": len(patches),
            "accelerator": recipe.trainer.accelerator,
            "adapted": builds(config),
            "as_built": builds(untouched),
        }

    def rmsnorm_with_sequence_parallelism():
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization="RMSNorm",
                                   tensor_model_parallel_size=2, sequence_parallel=True, use_cpu_initialization=True)
        try:
            norm = WrappedTorchNorm(config, 8)
        except AssertionError as error:
            return f"refused: {error}"
        marks = [getattr(p, "sequence_parallel", False) for p in norm.parameters()]
        return f"{type(norm).__name__} sequence_parallel={config.sequence_parallel} marks={marks}"

    runs = {"cuda": adapted("cuda"), "norm_before": rmsnorm_with_sequence_parallelism()}
    runs.update(cpu=adapted("cpu"), norm_after=rmsnorm_with_sequence_parallelism())
    print(json.dumps(runs, default=str))  # activation_func as its name
    """
)


@pytest.fixture(scope="module")
def llama_runs() -> dict:
    import json

    return json.loads(_python(LLAMA_SETTINGS).strip().splitlines()[-1])


@pytest.mark.slow
def test_llama_fusions_stay_on_with_cuda_and_go_off_on_the_cpu(llama_runs):
    """RoPE fusion (Transformer Engine's CUDA kernel) and the persistent norm kernel (refused by torch's RMSNorm, the
    norm without TE) are switched off for a CPU run, and nothing of the architecture changes; where CUDA is present
    the recipe stays as built."""
    cuda, cpu = llama_runs["cuda"], llama_runs["cpu"]
    assert cuda["after"] == cuda["before"] and cuda["before"]["apply_rope_fusion"] is True
    assert cuda["before"]["persist_layer_norm"] is True and cuda["before"]["use_cpu_initialization"] is False
    assert cuda["patches"] == 0 and cuda["accelerator"] == "gpu"
    assert cpu["before"] == cuda["before"]
    assert cpu["after"] == {
        **cpu["before"],
        "apply_rope_fusion": False,
        "persist_layer_norm": False,
        "use_cpu_initialization": True,
        "masked_softmax_fusion": False,
    }
    assert cpu["patches"] > 0 and cpu["accelerator"] == "cpu"
    assert cpu["adapted"] == "builds"
    assert "apply_rope_fusion is not available" in cpu["as_built"]  # why the CPU run needs the setting


@pytest.mark.slow
def test_rmsnorm_with_sequence_parallelism_is_torchs_rmsnorm_marked_for_the_tensor_parallel_reduction(llama_runs):
    """Without TE, Llama's RMSNorm is torch's, which Megatron refuses under sequence parallelism; engaged, the layer's
    norm-sequence-parallel patch builds it with its weight marked `sequence_parallel`, the mark by which Megatron sums
    such gradients over the TP group (as TE's RMSNorm marks its own), and the model keeps sequence parallelism on."""
    assert llama_runs["norm_before"] == "refused: sequence parallel not supported by torch LayerNorm"
    assert llama_runs["norm_after"] == "RMSNorm sequence_parallel=True marks=[True]"


def test_a_lock_left_by_a_stopped_run_does_not_hang_the_next_one(tmp_path):
    """Megatron-Core's import takes a lock in torch's shared extensions directory and waits for it with no bound; a
    worker stopped inside that import leaves it. A smoke worker builds in a directory of its own, so a left lock
    (planted here where torch's default directory is) stops nobody, and its directory goes when it ends."""
    cache = tmp_path / "cache"
    stale = cache / "torch_extensions" / "py311_cpu" / "managed_alloc_runtime" / "lock"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    run = tmp_path / "run"
    code = textwrap.dedent(
        f"""
        from nemo_recipes.smoke_training import cpu_compat
        private = cpu_compat.private_extension_builds({str(run)!r}, "train", 0)
        import megatron.core.inference.unified_memory
        print("imported in", private)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "XDG_CACHE_HOME": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported in {run / '.torch_extensions' / 'train-rank0'}" in done.stdout
    assert not (run / ".torch_extensions").exists()
    assert stale.exists()  # the user's lock is theirs: untouched
