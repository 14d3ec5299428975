"""The names Megatron's distributed checkpoint gives an architecture's tensors, and which of its files are shorter
than its index says: read by the exporter (conversion.megatron_checkpoint), the smoke judge, and the planner's check
of `restore_from` (plan.restore), which must not import the conversion layer. Standard library only."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from nemo_recipes.families.blocks import MEGATRON_KEYS
from nemo_recipes.families.latent_attention import MultiLatentAttention

#: A role of `Architecture.layer_tensors` -> Megatron's keys under `module.decoder.layers.`: each block's own
#: (`families.blocks`), Transformer Engine's layer spec first, then the local spec's.
LAYER_KEYS: dict[str, tuple[str, ...]] = {**MEGATRON_KEYS, **MultiLatentAttention.MEGATRON_KEYS}
#: A role of `Architecture.global_tensors` -> Megatron's key.
GLOBAL_KEYS: dict[str, str] = {
    "embedding.weight": "embedding.word_embeddings.weight",
    "position.weight": "embedding.position_embeddings.weight",
    "final_norm.weight": "decoder.final_layernorm.weight",
    "final_norm.bias": "decoder.final_layernorm.bias",
    "output.weight": "output_layer.weight",
}
PREFIX = "module."  # NeMo's MegatronParallel wraps the model: its keys are `module.` + Megatron's


def short_files(weights: Path, metadata: Any) -> list[tuple[Path, Optional[int], int]]:
    """(file, its size or None where it is missing, the bytes the index needs in it) for each file of the
    checkpoint at `weights` that does not hold every byte range its index (`metadata`) points to."""
    ends: dict[str, int] = {}
    for info in metadata.storage_data.values():
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
    short = []
    for name, end in sorted(ends.items()):
        file = weights / name
        size = file.stat().st_size if file.is_file() else None
        if size is None or size < end:
            short.append((file, size, end))
    return short
