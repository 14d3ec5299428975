"""`conversion.checkpoint_writer`: a Megatron torch_dist checkpoint written one layer at a time. Each tensor is made
when the writer reaches it and freed once written (so an import never holds the model), and what is written reads
back, layer by layer, as the tensors given."""

from __future__ import annotations

import gc
import weakref

import pytest

from nemo_recipes.conversion.checkpoint_writer import Chunk, save_streaming
from nemo_recipes.conversion.megatron_checkpoint import MegatronCheckpoint

pytestmark = [pytest.mark.nemo]

torch = pytest.importorskip("torch")

LAYERS = 4


def _tensor(chunk: Chunk) -> "torch.Tensor":
    shape = chunk.size if chunk.layer is None else chunk.size[1:]
    seed = hash((chunk.key, chunk.layer)) % 2**31
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_each_tensor_is_made_when_written_and_freed_after(tmp_path):
    chunks = [Chunk("module.embedding.word_embeddings.weight", (256, 32))]
    for layer in range(LAYERS):
        chunks += [Chunk("module.decoder.layers.mlp.linear_fc1.weight", (LAYERS, 64, 32), layer),
                   Chunk("module.decoder.layers.mlp.linear_fc2.weight", (LAYERS, 32, 64), layer)]  # fmt: skip
    made: list[tuple[Chunk, weakref.ref]] = []
    alive_at_each_call = []

    def produce(chunk: Chunk) -> "torch.Tensor":
        gc.collect()
        # What the writer still holds: at most the tensor it is writing (the one made last).
        alive_at_each_call.append(sum(ref() is not None for _chunk, ref in made[:-1]))
        tensor = _tensor(chunk)
        made.append((chunk, weakref.ref(tensor)))
        return tensor

    objects = {"module.decoder.layers.mlp.linear_fc1._extra_state/shard_0_1": [None]}
    save_streaming(tmp_path / "weights", chunks, produce, torch.bfloat16, objects)

    assert [chunk for chunk, _ref in made] == chunks  # made in the order planned, each once
    assert max(alive_at_each_call) == 0, alive_at_each_call
    checkpoint = MegatronCheckpoint.open(str(tmp_path))
    assert torch.equal(checkpoint.read(chunks[0].key), _tensor(chunks[0]))
    for chunk in chunks[1:]:
        assert checkpoint.shape(chunk.key) == chunk.size
        assert torch.equal(checkpoint.read(chunk.key, chunk.layer), _tensor(chunk)), chunk
