"""Text from a smoke run's last checkpoint, through Megatron's own forward pass: the `GPTModel` NeMo builds from the
recipe's config (with the tokenizer's vocabulary), its weights loaded from the distributed checkpoint, then greedy
or temperature sampling one token at a time.

Run in a process of its own (`python -m nemo_recipes.smoke_training.sample CONFIG.json OUT.json`, by
`learned.py`), as the training phases are, so that the runner stays light; on a machine without CUDA the CPU
compatibility layer engages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from nemo_recipes.catalog import RecipeSpec


def load_model(spec: RecipeSpec, weights: str, expert_parallel: int = 1) -> tuple[Any, Any]:
    """(Megatron GPTModel with the checkpoint's weights, NeMo tokenizer), in this single process, or with
    `expert_parallel` > 1 on each of that many processes (started by torchrun: its environment names the group),
    each holding its share of the experts."""
    import fiddle as fdl
    import torch.distributed as dist
    from megatron.core import dist_checkpointing, parallel_state

    from nemo_recipes.checkpoint_pickles import refuse_unsafe
    from nemo_recipes.smoke_training import cpu_compat
    from nemo_recipes.training import parts
    from nemo_recipes.training.model import model

    # Megatron's load unpickles the index and the objects among the tensors plainly.
    refuse_unsafe(Path(weights), "weights", "sample from a checkpoint you trust; nothing of this one was loaded.")
    cpu = not cpu_compat.cuda_available()
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29_500 + os.getpid() % 1000))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        dist.init_process_group("gloo" if cpu else "nccl", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=expert_parallel)
    if cpu:
        cpu_compat.engage()
    # NeMo's own seeding (on CPU, the layer's patch installs Megatron's RNG tracker with CPU states): attention's
    # dropout forks the tracker even in eval mode.
    from nemo.lightning.megatron_init import _set_random_seed

    _set_random_seed(1234)
    tokenizer = fdl.build(parts.tokenizer(spec))
    model_config = model(spec).config
    if cpu:
        cpu_compat.cpu_model_settings(model_config)  # before the build: a built config has refused TE-only fusions
    model_config.masked_softmax_fusion = False
    config = fdl.build(model_config)
    config.hidden_dropout = config.attention_dropout = 0.0
    with _device_scope():
        gpt = config.configure_model(tokenizer)
        # The checkpoint names the model's tensors as NeMo's MegatronParallel wraps them: `module.` + Megatron's key.
        sharded = gpt.sharded_state_dict(prefix="module.")
        state = dist_checkpointing.load(sharded, weights)
    # (the loaded dict also holds the trainer's common state: step, loops, optimizer, data position)
    weights_only = {key.removeprefix("module."): value for key, value in state.items() if key.startswith("module.")}
    result = gpt.load_state_dict(weights_only, strict=False)
    missing = [key for key in result.missing_keys if not key.endswith("_extra_state")]
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"the checkpoint at {weights} does not match the model: missing {missing}, "
            f"unexpected {result.unexpected_keys}"
        )
    gpt.eval()
    return gpt, tokenizer


def generate(gpt: Any, prompt: list[int], tokens: int, temperature: float, seq_length: int, vocab: int) -> list[int]:
    """`prompt` (token ids) continued by `tokens` tokens (greedy when temperature is 0), each from a full forward
    pass over the last `seq_length` tokens; logits of Megatron's padding entries (beyond `vocab`) are ignored."""
    import torch

    ids = list(prompt)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad(), _device_scope():
        for _ in range(tokens):
            window = torch.tensor([ids[-seq_length:]], dtype=torch.long)
            positions = torch.arange(window.shape[1], dtype=torch.long).unsqueeze(0)
            mask = torch.triu(torch.ones(1, 1, window.shape[1], window.shape[1], dtype=torch.bool), diagonal=1)
            logits = gpt(window, positions, mask)[0, -1, :vocab].float()
            if temperature <= 0:
                ids.append(int(logits.argmax()))
            else:
                probabilities = torch.softmax(logits / temperature, dim=-1)
                ids.append(int(torch.multinomial(probabilities, 1, generator=generator)))
    return ids


def forward_logits(gpt: Any, ids: list[int], vocab: int) -> list[list[float]]:
    """Megatron's logits over `ids` (one sequence), in FP32: the model cast to FP32 first, so that a comparison with
    another implementation of the same weights (an exported Hugging Face model) sees arithmetic, not BF16 rounding;
    Megatron's padding entries (beyond `vocab`) left out."""
    import torch

    gpt.float()
    gpt.config.params_dtype = torch.float32
    gpt.config.bf16 = False
    with torch.no_grad(), _device_scope():
        window = torch.tensor([ids], dtype=torch.long)
        positions = torch.arange(window.shape[1], dtype=torch.long).unsqueeze(0)
        mask = torch.triu(torch.ones(1, 1, window.shape[1], window.shape[1], dtype=torch.bool), diagonal=1)
        return gpt(window, positions, mask)[0, :, :vocab].float().tolist()


def _device_scope() -> Any:
    """Megatron's CUDA requests mean the CPU where there is no CUDA (the compatibility layer's scope)."""
    import contextlib

    from nemo_recipes.smoke_training import cpu_compat

    return contextlib.nullcontext() if cpu_compat.cuda_available() else cpu_compat.cpu_scope()


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    spec = RecipeSpec(**config["spec"])
    gpt, tokenizer = load_model(spec, config["weights"])
    if "logits_of" in config:  # `forward_logits`: the reference of a conversion's numerics
        logits = forward_logits(gpt, config["logits_of"], spec.vocab_size)
        Path(argv[1]).write_text(json.dumps({"logits": logits}), encoding="utf-8")
        return 0
    prompt = config["prompt_ids"]
    samples = [
        {
            "temperature": temperature,
            "prompt": tokenizer.ids_to_text(prompt),
            "text": tokenizer.ids_to_text(
                generate(gpt, prompt, config["tokens"], temperature, spec.seq_length, tokenizer.vocab_size)
            ),
        }
        for temperature in config["temperatures"]
    ]
    Path(argv[1]).write_text(json.dumps({"samples": samples}, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
