"""A small corpus a model can learn, written as a real Megatron indexed dataset (`.bin`/`.idx`), so that the smoke
run reads its data through NeMo's own `PreTrainingDataModule` (which also checkpoints the data position) and a
falling loss means the model learned something.

Uniform random tokens (NeMo's mock data) cannot show learning: their loss stays at ln(vocabulary). Here documents
are strings of "phrases", short fixed token sequences over part of the vocabulary, so both the token frequencies and
the next token within a phrase are predictable, and the loss falls within tens of steps.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Bump when the generator changes, so that a cached corpus is rewritten.
FORMAT = 1


def write_corpus(prefix: Path, vocab_size: int, *, documents: int = 2000, phrases: int = 64, seed: int = 1234) -> Path:
    """Write `prefix`.bin/.idx (once: an identical corpus already there is kept) and return `prefix`."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = Path(prefix)
    recipe = {"format": FORMAT, "vocab_size": vocab_size, "documents": documents, "phrases": phrases, "seed": seed}
    stamp = prefix.with_suffix(".json")
    if stamp.exists() and prefix.with_suffix(".idx").exists() and json.loads(stamp.read_text()) == recipe:
        return prefix
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    # A quarter of the vocabulary is used at all, and each phrase is 3-8 tokens long.
    alphabet = rng.choice(vocab_size, size=max(8, vocab_size // 4), replace=False)
    table = [rng.choice(alphabet, size=int(rng.integers(3, 9))) for _ in range(phrases)]
    # Zipf-like phrase frequencies, as in natural text.
    weights = 1.0 / np.arange(1, phrases + 1)
    weights /= weights.sum()
    builder = IndexedDatasetBuilder(str(prefix.with_suffix(".bin")), dtype=np.int32)
    for _ in range(documents):
        picks = rng.choice(phrases, size=int(rng.integers(20, 60)), p=weights)
        tokens = np.concatenate([table[i] for i in picks]).astype(np.int32)
        builder.add_document(torch.from_numpy(tokens), [len(tokens)])
    builder.finalize(str(prefix.with_suffix(".idx")))
    stamp.write_text(json.dumps(recipe))
    return prefix
