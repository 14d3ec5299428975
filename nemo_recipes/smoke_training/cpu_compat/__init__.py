"""The CPU compatibility layer: what it takes for NeMo's own `llm.pretrain` to train a recipe on a machine without
CUDA (gloo, one or more processes), so that "it trains" can be proven on every commit.

Two kinds of change, both confined to this package (the scope in scope.py, the patches in patches.py):

- settings (`cpu_settings`, the model's in `CPU_MODEL_SETTINGS`): supported recipe values that a CPU run needs
  (Lightning's CPU accelerator, Megatron's CPU initialisation; off: the fused softmax, Apex's persistent norm kernel
  that torch's LayerNorm and RMSNorm refuse, Transformer Engine's fused RoPE). They change the recipe Partial, never
  the library.
- patches (`engage`): each wraps exactly one named library function. The CUDA patches run that function inside
  `cpu_scope()`, where the function's requests for CUDA mean the CPU; the others fix defects of the pinned stack that
  only the CPU path reaches (Megatron's pure-PyTorch optimizer path, used when neither Apex nor Transformer Engine is
  installed). Every patch is listed in `PATCHES` with the library line that needs it.

Nothing here does anything where CUDA is available: `adapt()` and `engage()` return an empty list, and GPU runs use
the recipe and the libraries unchanged. On a CPU machine it refuses (CompatError) unless NeMo, Megatron-Core and torch
are exactly the releases the patches were written against (`PINNED`, the same as constraints.txt), since a patch that
silently misses its target on another release would make a CPU run prove nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import os
import shutil
from pathlib import Path
from typing import Any

from nemo_recipes.errors import InputError, Problem
from nemo_recipes.smoke_training.cpu_compat.patches import PATCHES, Patch  # noqa: F401  (the package's names)
from nemo_recipes.smoke_training.cpu_compat.scope import TRACE_ENV, cpu_scope  # noqa: F401

#: The releases the patches were written and tested against (constraints.txt pins the same; a test keeps them equal).
PINNED = {"nemo-toolkit": "2.7.3", "megatron-core": "0.15.3", "torch": "2.13.0"}


class CompatError(InputError):
    """The CPU compatibility layer cannot vouch for the installed stack."""


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def version_problems(installed: dict[str, str | None] | None = None) -> list[str]:
    """One line per package whose installed release differs from `PINNED` (local build tags such as +cpu ignored)."""
    if installed is None:
        installed = {}
        for package in PINNED:
            try:
                installed[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                installed[package] = None
    lines = []
    for package, pinned in PINNED.items():
        have = installed.get(package)
        if have is None or have.split("+")[0] != pinned:
            lines.append(
                f"{package} {have or 'is not installed'}{' is installed' if have else ''}; "
                f"the patches were written for {pinned}"
            )
    return lines


def private_extension_builds(run_dir: str | Path, phase: str, rank: int) -> Path:
    """Give this process a torch-extensions directory of its own inside the run's directory (unless the user set
    TORCH_EXTENSIONS_DIR), removed when the process ends.

    Why: importing Megatron-Core 0.15.3 (`megatron/core/inference/unified_memory.py`) compiles a CUDA extension with
    torch's `load_inline`, which on a CPU fails, but first takes a lock file in the shared default directory
    (~/.cache/torch_extensions/.../managed_alloc_runtime/lock) and waits, with no bound, for any lock it finds there.
    A worker stopped inside that import (Ctrl-C, a phase's timeout, SIGKILL) leaves the lock behind, and every later
    Megatron import on the machine then hangs for ever. In a directory of its own, a left lock stops nobody."""
    path = Path(run_dir) / ".torch_extensions" / f"{phase}-rank{rank}"
    if "TORCH_EXTENSIONS_DIR" not in os.environ:
        path.mkdir(parents=True, exist_ok=True)
        os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
        atexit.register(_remove, path)
    return Path(os.environ["TORCH_EXTENSIONS_DIR"])


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):  # the last rank to end removes the parent
        path.parent.rmdir()


def check_versions() -> None:
    problems = version_problems()
    if problems:
        raise CompatError(
            "the CPU compatibility layer refuses to train on this stack: " + "; ".join(problems) + ". Fix: install "
            "the pinned releases (pip install -c constraints.txt -e .), or run on a machine with CUDA, where no "
            "patch is needed."
        )


# ---- what the CPU cannot train ----


def cpu_problems(spec: Any) -> list[Problem]:
    """Recipe choices that cannot train without CUDA here, each with the fix (a RecipeSpec; standard library only).

    Context parallelism: Megatron-Core's attention without Transformer Engine (DotProductAttention, the local spec
    this CPU path builds) refuses context_parallel_size > 1 (dot_product_attention.py:57, "Context parallelism is only
    supported by TEDotProductAttention"), and Transformer Engine needs CUDA. Refused before any process starts."""
    problems: list[Problem] = []
    if spec.context_parallel > 1:
        problems.append(
            Problem(
                "context_parallel",
                spec.context_parallel,
                "cannot train on a CPU: Megatron-Core runs context parallelism only in Transformer Engine's "
                "attention, which needs CUDA (its CPU attention refuses CP > 1).",
                "leave context_parallel at 1 for the CPU smoke run, or run it on a GPU machine.",
            )
        )
    return problems + model_problems(spec)


def model_problems(spec: Any) -> list[Problem]:
    """The model choices no CPU layout can build here, whatever the smoke run's shape and processes (a RecipeSpec;
    standard library only): checked before the run is scaled down, so that the reason comes alone."""
    problems: list[Problem] = []
    if getattr(spec, "kv_lora_rank", None) is not None:
        problems.append(
            Problem(
                "kv_lora_rank",
                spec.kv_lora_rank,
                "multi-latent attention cannot be built on a CPU with this stack: without Transformer "
                "Engine, Megatron-Core's local attention core takes no k_channels or v_channels, which MLA passes it "
                "(multi_latent_attention.py:158, dot_product_attention.py:42), and its YaRN rotary embedding asks "
                "for torch.cuda.current_device() (yarn_rotary_pos_embedding.py:75).",
                "run the smoke test on a GPU machine with Transformer Engine; here `plan`, `show` and the dry run "
                "(`nemo llm pretrain --factory NAME --dryrun`) check the recipe.",
            )
        )
    return problems


# ---- settings ----


#: Model-config values a CPU run needs, each a supported GPTConfig value (a GPU run keeps the recipe's).
CPU_MODEL_SETTINGS: dict[str, Any] = {
    "use_cpu_initialization": True,  # Megatron layers otherwise allocate on torch.cuda.current_device()
    "masked_softmax_fusion": False,  # the fused kernel imports scaled_masked_softmax_cuda
    # Without Transformer Engine or Apex the norms are torch's LayerNorm/RMSNorm (torch_norm.py WrappedTorchNorm),
    # which refuse Apex's persistent kernel (torch_norm.py:30 'persist_layer_norm not supported').
    "persist_layer_norm": False,
    # RoPE's fused kernel is Transformer Engine's CUDA one (transformer_config.py:1267 refuses it without TE); the
    # unfused rope_utils.apply_rotary_pos_emb is the same maths in torch.
    "apply_rope_fusion": False,
}


def cpu_model_settings(config: Any) -> Any:
    """`CPU_MODEL_SETTINGS` written into a model config (a run.Config before it is built, or a built GPTConfig)."""
    for field, value in CPU_MODEL_SETTINGS.items():
        setattr(config, field, value)
    return config


def cpu_settings(recipe: Any, processes: int) -> Any:
    """The supported values a recipe Partial needs on CPU; every other choice of the recipe stays."""
    recipe.trainer.accelerator = "cpu"  # Lightning refuses accelerator='gpu' without CUDA
    recipe.trainer.devices = processes
    config = cpu_model_settings(recipe.model.config)
    if getattr(config, "overlap_p2p_comm", False):
        # The interleaved schedule's overlapped exchanges return before gloo has sent the buffers, and the schedule
        # frees its outputs meanwhile (CUDA streams order that; gloo's threads do not): NaN in step 1 (PP2 VP2).
        # Synchronous exchanges instead, still unbatched: with two stages the previous and the next stage are one
        # peer, and a batch_isend_irecv posts an activation and a gradient of the same shape to it in one group, where
        # gloo matches them by posting order and swaps them (a loss off the one-process model's from step 1, found by
        # the invariance check); unbatched, Megatron-Core sends the two directions on two process groups.
        config.overlap_p2p_comm = False
        config.batch_p2p_comm = False
    # Megatron's fused element-wise functions (bias-GeLU, bias-SwiGLU, bias-dropout-add, cross-entropy) go through
    # torch.compile; inside the CUDA scopes the function mode changes on every call, so each call would recompile
    # until Dynamo gives up. Run them as the plain Python functions they are (same maths, no compile time).
    import torch._dynamo

    torch._dynamo.config.disable = True
    return recipe


def adapt(recipe: Any, processes: int) -> list[str]:
    """Where there is no CUDA: the CPU settings on `recipe` and the patches, whose names it returns. Where there is
    CUDA: nothing at all (an empty list), so a GPU run is the recipe as built."""
    if cuda_available():
        return []
    cpu_settings(recipe, processes)
    return engage()


def engage() -> list[str]:
    """Install the patches this machine needs; the names of those installed (none where CUDA is available)."""
    if cuda_available():
        return []
    check_versions()
    return [patch.name for patch in PATCHES if patch.install(patch)]
