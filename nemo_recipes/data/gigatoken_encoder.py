"""gigatoken as `data prepare`'s encoder: the maintained Rust tokenizer that Megatron-LM's fast path
(`tools/preprocess_data_fast.py`) encodes with, loaded from the tokenizer's own `tokenizer.json`, used only after it
gave, id for id, what the tokenizer's own library gives (fast_encoder.check).

Why it is the first choice: on a worker's core it encoded 4-10x faster than tiktoken built from the same vocabulary
and 1.3x faster on words that never repeat (its cache of split words is per process, so a worker's later shards
gain from its earlier ones), and its ids come back as one flat array with offsets (`encode_flat`), with no Python
list per document to convert. It encodes literal special tokens as their ids, as Hugging Face does. A document with
a character unassigned in Python's Unicode tables is encoded by the tokenizer's own library (unassigned.py says
why). gigatoken and awkward are imported inside the functions that need them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from nemo_recipes.data import tokenizers, unassigned
from nemo_recipes.data.process_memory import give_back_freed_memory, resident_bytes

if TYPE_CHECKING:
    import numpy

GIGATOKEN = "gigatoken"
#: gigatoken's cache of split words belongs to its tokenizer object and has no bound: on text whose words never repeat
#: a process grew from 147 MB to 580 MB in 41 MB (measured here). A fresh object once the process's resident memory
#: has grown this much since its first encoding keeps a worker's memory flat in the corpus size (deleting the object
#: gave the memory back: 466 -> 114 MB). On text whose words repeat, the cache stays small and is never thrown away:
#: a fresh object costs its load (18 ms for 8,192 entries, 72 ms for 50,000) and a cold cache (a 50,000-entry
#: tokenizer encoded 36M characters of plays in 0.45 s cold, 0.09 s warm).
FRESH_AFTER_GROWTH_BYTES = 256 << 20
#: Where the resident memory cannot be read (no /proc), a fresh object every this many characters instead.
FRESH_EVERY_CHARS = 32_000_000


class GigatokenEncoder(tokenizers.Encoder):
    """gigatoken over a Hugging Face `tokenizer.json`, with that tokenizer's vocabulary size and end-of-document id.
    It encodes on the calling thread: the worker processes are the parallelism (one core each). The documents of
    `unassigned.rare` go to `reference`."""

    kind = GIGATOKEN

    def __init__(self, load: Callable[[], Any], reference: tokenizers.Encoder):
        self._load = load
        self._backend = load()
        self._chars = 0
        self._baseline: Optional[tuple[int, int]] = None  # (pid, resident bytes) at this process's first encoding
        self._reference = reference
        self.vocab_size = reference.vocab_size
        self.eod_id = reference.eod_id

    def _fresh(self, texts: list[str]) -> Any:
        self._chars += sum(map(len, texts))
        resident = resident_bytes()
        if resident is None:
            grown = self._chars > FRESH_EVERY_CHARS
        elif self._baseline is None or self._baseline[0] != os.getpid():  # a forked worker measures its own
            self._baseline, grown = (os.getpid(), resident), False
        else:
            grown = resident - self._baseline[1] > FRESH_AFTER_GROWTH_BYTES
        if grown:
            self._backend, self._chars = None, 0  # the old cache freed before the new object exists
            # ... and given back: once glibc has freed a few large blocks it serves the next ones from its heap, which
            # kept the freed caches resident (a test process grew 166 MB over a 32 MB bound without this).
            give_back_freed_memory()
            self._backend = self._load()
            # Measured again at the next call: memory held by something else is not counted twice, so it cannot
            # make every call start a fresh object.
            self._baseline = None
        return self._backend

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        result = self._fresh(texts).encode_batch_list(texts, parallel=False)
        rare = unassigned.rare(texts)
        if rare:
            for i, ids in zip(rare, self._reference.encode_batch([texts[i] for i in rare]), strict=True):
                result[i] = ids
        return result

    def encode_flat(self, texts: list[str]) -> tuple["numpy.ndarray", "numpy.ndarray"]:
        """The ids of every text, concatenated (uint32), and the offsets of each text's first id (len(texts) + 1):
        the awkward array gigatoken returns, unpacked without a copy."""
        import numpy

        if unassigned.rare(texts):  # rare: the lists, with those documents from the reference, made flat
            encoded_lists = self.encode_batch(texts)
            offsets = numpy.zeros(len(texts) + 1, dtype=numpy.int64)
            numpy.cumsum([len(ids) for ids in encoded_lists], out=offsets[1:])
            flat = numpy.fromiter((i for ids in encoded_lists for i in ids), dtype=numpy.uint32, count=int(offsets[-1]))
            return flat, offsets
        encoded = self._fresh(texts).encode_batch(texts, parallel=False)
        layout = encoded.layout
        if hasattr(layout, "offsets") and hasattr(layout.content, "data"):
            offsets = numpy.asarray(layout.offsets.data, dtype=numpy.int64)
            ids = numpy.asarray(layout.content.data)
            return ids[offsets[0] : offsets[-1]], offsets - offsets[0]
        import awkward  # another layout than gigatoken 0.10's: the same through awkward's own calls (a copy)

        ids = numpy.asarray(awkward.flatten(encoded, axis=1), dtype=numpy.uint32)
        return ids, numpy.concatenate(([0], numpy.cumsum(awkward.num(encoded, axis=1)))).astype(numpy.int64)

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(self._backend.decode(list(ids))).decode("utf-8")


def build(path: str | Path, reference: tokenizers.Encoder) -> GigatokenEncoder | str:
    """gigatoken for the Hugging Face tokenizer at `path` (loaded as `reference`), or why there is none."""
    if reference.kind != tokenizers.HUGGINGFACE:
        return f"gigatoken reads tokenizer.json, not a {reference.kind} model"
    path = Path(path)
    file = path if path.is_file() else path / "tokenizer.json"
    try:
        import gigatoken
    except ImportError as error:  # a dependency; an environment without it keeps the next encoder
        return f"gigatoken is not installed ({error})"
    data = file.read_bytes()

    def load() -> Any:
        return gigatoken.Tokenizer.from_json(data).backend

    try:
        return GigatokenEncoder(load, reference)
    except Exception as error:  # noqa: BLE001  a tokenizer it does not support is a reason, never a failure
        first = (str(error).strip().splitlines() or [""])[0]  # its Rust errors add lines of location
        return f"gigatoken cannot load it: {type(error).__name__}: {first[:120]}"
