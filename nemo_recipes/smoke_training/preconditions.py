"""What the layout-invariance comparison (invariance.py) sets in both of its runs, read by the runner that asks for it
and by the worker that trains: below both, so that neither imports the other's side (issue 32). Plain data."""

from __future__ import annotations

#: Seed of the layout-invariant start (replicas.py).
INIT_SEED = 1234

#: Dropout off: NeMo's dropout streams differ per layout (Megatron forks them per tensor-parallel rank and seeds them
#: per pipeline stage).
NO_DROPOUT = {"hidden_dropout": 0.0, "attention_dropout": 0.0}
