"""A small corpus a model can learn, written as a real Megatron indexed dataset (`.bin`/`.idx`), so that the smoke
run reads its data through NeMo's own `PreTrainingDataModule` (which also checkpoints the data position) and the
loss falls by more than a frozen model's noise (the judge's "model learned").

Uniform random tokens (NeMo's mock data) cannot show learning: their loss stays at ln(vocabulary). Here documents
are strings of "phrases", short fixed token sequences over a quarter of the vocabulary, with Zipf-like frequencies,
so both the token frequencies and the next token within a phrase are predictable (unigram entropy 4.55 nats at
vocabulary 1000). In 20 steps at a recipe's learning rate the scaled-down model learns mostly the frequencies: the
loss falls ~0.4 nats from ~7.2. A corpus of the whole vocabulary, uniformly frequent (unigram entropy ~ln 1000) and
predictable only from context, was tried and learns slower (a fall of 0.05 in 20 steps, none below its entropy in
100): context takes more than a smoke run's steps.
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
