"""`conversion.checkpoint_writer`: a Megatron torch_dist checkpoint written one layer at a time. Each tensor is made
when the writer reaches it and freed once written, but for the last one written of each key, which
torch.distributed.checkpoint's file writer keeps until the file is done (so an import holds one layer and the
embeddings, never the model); and what is written reads back, layer by layer, as the tensors given."""

from __future__ import annotations

import gc
import weakref

import pytest

from nemo_recipes.conversion.checkpoint_writer import Chunk, save_streaming
from nemo_recipes.conversion.megatron_checkpoint import MegatronCheckpoint

pytestmark = [pytest.mark.nemo]

torch = pytest.importorskip("torch")

LAYERS = 4


def _array(chunk: Chunk):
    """The chunk's values as a numpy array: a torch tensor made from it keeps it alive exactly as long as its memory
    (a weak reference to a torch tensor object would see a view or a detached copy die while the memory lives)."""
    import numpy as np

    shape = chunk.size if chunk.layer is None else chunk.size[1:]
    seed = [ord(c) for c in chunk.key] + [chunk.layer or 0]
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_each_tensor_is_made_when_written_and_freed_after(tmp_path):
    chunks = [Chunk("module.embedding.word_embeddings.weight", (256, 32))]
    for layer in range(LAYERS):
        chunks += [Chunk("module.decoder.layers.mlp.linear_fc1.weight", (LAYERS, 64, 32), layer),
                   Chunk("module.decoder.layers.mlp.linear_fc2.weight", (LAYERS, 32, 64), layer)]  # fmt: skip
    made: list[tuple[Chunk, weakref.ref]] = []
    held_twice = []

    def produce(chunk: Chunk) -> "torch.Tensor":
        gc.collect()
        alive = [c.key for c, ref in made if ref() is not None]
        held_twice.append(len(alive) - len(set(alive)))  # two chunks of one key alive: a layer kept after writing
        array = _array(chunk)
        made.append((chunk, weakref.ref(array)))
        return torch.from_numpy(array)

    objects = {"module.decoder.layers.mlp.linear_fc1._extra_state/shard_0_1": [None]}
    save_streaming(tmp_path / "weights", chunks, produce, torch.float32, objects)

    assert [chunk for chunk, _ref in made] == chunks  # made in the order planned, each once
    assert max(held_twice) == 0, held_twice
    checkpoint = MegatronCheckpoint.open(str(tmp_path))
    assert torch.equal(checkpoint.read(chunks[0].key), torch.from_numpy(_array(chunks[0])))
    for chunk in chunks[1:]:
        assert checkpoint.shape(chunk.key) == chunk.size
        assert torch.equal(checkpoint.read(chunk.key, chunk.layer), torch.from_numpy(_array(chunk))), chunk
