"""Memory per GPU on the most loaded pipeline stage (the first): weights, gradients, optimizer state, activations and
an allowance for everything PyTorch does not count as a tensor of the model.

Standard library only. Formulas and sources: `shared/reference/perf-model.md` sections 2.1, 2.3 and 2.4.

Model state (Megatron-Core distributed optimizer guide, bf16 row; what our NeMo bridge builds): bf16 weights
(2 bytes/param), fp32 main gradients (4, `grad_reduce_in_fp32=True`), fp32 master weights plus Adam m and v (12).
The distributed optimizer shards only the 12 optimizer bytes, over the data-parallel x context-parallel group
(Megatron-Core builds its optimizer shards on the DP group that includes CP ranks), giving 6 + 12/(d c).
FP8 does not change these numbers: Transformer Engine keeps bf16/fp32 master copies; its FP8 weight caches fall in
the "other" allowance.

Activations (Korthikanti et al. 2022, Table 2 and Section 4), assuming 16-bit activations and 1-byte dropout masks.
Assumption: no flash attention by default, i.e. Megatron-Core's local layer spec, which is what runs without
Transformer Engine; pass `flash_attention=True` for a Transformer Engine build, which removes the 5as^2b score term
the same way selective recomputation does. Generalised per layer, in units of s*b*h bytes:

    replicated across TP unless SP: 10    (two LayerNorm inputs 4, QKV and FC1 inputs 2 + 2, two dropout masks 2)
    sharded by TP:                  4 + 4 g/a + F      (Q 2, K and V 2 g/a each, output-projection input 2, MLP F)
    attention core, sharded by TP:  5 a s / h           (softmax output 2, its dropout mask 1, dropout output 2)

with F = 4 ffn/h for a GeLU MLP (activation input and FC2 input, each ffn wide) and F = 8 ffn/h for SwiGLU without
fusion, as the bridge builds it (the 2*ffn-wide FC1 output, silu's output and the product). For GPT-3 shapes
(g = a, ffn = 4h) this is exactly Korthikanti's 34 + 5as/h. The approximation: GQA is counted through the size of K
and V only, and dropout masks are counted even when a dropout probability is 0 (a slight overestimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.plan.hardware import GPU, Cluster, get_gpu

GIB = float(2**30)

WEIGHT_BYTES = 2      # bf16 parameters
GRADIENT_BYTES = 4    # fp32 main gradients (grad_reduce_in_fp32=True)
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam first and second moments

# "other": what the model's tensors do not account for. CUDA context and kernel images (~0.5 GiB with lazy loading
# on Hopper), cuBLAS/cuDNN workspaces (~0.5 GiB), NCCL buffers of the TP/PP/DP/CP communicators (~1 GiB): 2 GiB
# fixed. On top of that, the PyTorch caching allocator typically reserves 5 % more than it has allocated at peak
# (fragmentation), so 5 % of the modelled tensors. Both are allowances to calibrate on a GPU, not measurements.
OTHER_FIXED_GIB = 2.0
FRAGMENTATION = 0.05

# Replicated-under-TP part of a layer's activations, in units of s*b*h bytes (Korthikanti Table 2's "10").
_REPLICATED_SBH = 10.0
_ATTENTION_CORE_FACTOR = 5.0  # 5 a s^2 b bytes: softmax output, dropout mask, dropout output


# ---- model state ----

def state_bytes_per_param(distributed_optimizer: bool, shards: int = 1) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter held; `shards` = DP x CP ranks sharing optimizer state."""
    optimizer = OPTIMIZER_BYTES / max(1, shards) if distributed_optimizer else float(OPTIMIZER_BYTES)
    return float(WEIGHT_BYTES), float(GRADIENT_BYTES), optimizer


@dataclass(frozen=True)
class LayerParams:
    """One transformer layer's parameters, split by how TP stores them."""

    sharded: int      # column/row-parallel weights and column-parallel biases: divided by TP
    replicated: int   # row-parallel biases and norms: a full copy on every TP rank


def layer_params(spec: RecipeSpec) -> LayerParams:
    """Megatron GPT layer (the model `catalog.parameter_count` counts) split into TP-sharded and replicated parts."""
    h, ffn = spec.hidden_size, spec.ffn_hidden_size
    kv = spec.kv_groups * (h // spec.num_attention_heads)
    fc1_width = (2 if spec.gated_linear_unit else 1) * ffn
    norm = 2 * h if spec.normalization == "LayerNorm" else h
    qkv = h * (h + 2 * kv) + (h + 2 * kv)
    sharded = qkv + h * h + h * fc1_width + fc1_width + ffn * h
    replicated = h + h + 2 * norm  # output-projection bias, FC2 bias, two norms
    return LayerParams(sharded=sharded, replicated=replicated)


def _norm_params(spec: RecipeSpec) -> int:
    return 2 * spec.hidden_size if spec.normalization == "LayerNorm" else spec.hidden_size


def layers_per_stage(spec: RecipeSpec) -> int:
    """Layers on the most loaded pipeline stage (rounded up when PP does not divide the layers)."""
    return math.ceil(spec.num_layers / spec.pipeline_parallel)


def params_per_gpu(spec: RecipeSpec) -> float:
    """Parameters held by one GPU of the first pipeline stage (perf-model.md 2.1: `(transformer/p + embedding) / t`
    plus replicated norms and biases). The first stage holds the word (and position) embeddings; with PP = 1 it also
    holds the final norm and, untied, the output layer. CP does not split parameters."""
    t = spec.tensor_parallel
    layer = layer_params(spec)
    stage_layers = layers_per_stage(spec)
    total = stage_layers * (layer.sharded / t + layer.replicated)
    total += spec.padded_vocab_size * spec.hidden_size / t  # vocabulary-parallel word embeddings
    if spec.position_embedding_type == "learned_absolute":
        total += spec.seq_length * spec.hidden_size  # replicated on every TP rank
    if spec.pipeline_parallel == 1:
        total += _norm_params(spec)
        if not spec.share_embeddings:
            total += spec.padded_vocab_size * spec.hidden_size / t
    return total


# ---- activations ----

def layer_activation_bytes(*, seq: int, micro_batch: int, hidden: int, heads: int, ffn: int, kv_groups: int,
                           gated: bool, tp: int, sequence_parallel: bool, attention_core: bool) -> float:
    """Activation bytes one transformer layer stores for the backward pass (Korthikanti Table 2, generalised as the
    module docstring states). `attention_core=False` when selective recompute or flash attention drops the score
    tensors."""
    sbh = float(seq) * micro_batch * hidden
    mlp = (8.0 if gated else 4.0) * ffn / hidden
    sharded = 4.0 + 4.0 * kv_groups / heads + mlp
    replicated = _REPLICATED_SBH / tp if sequence_parallel else _REPLICATED_SBH
    per_layer = sbh * (replicated + sharded / tp)
    if attention_core:
        per_layer += attention_core_bytes(seq=seq, micro_batch=micro_batch, heads=heads, tp=tp)
    return per_layer


def attention_core_bytes(*, seq: int, micro_batch: int, heads: int, tp: int) -> float:
    """5 a s^2 b / t: softmax output, its dropout mask and the dropout output of one layer."""
    return _ATTENTION_CORE_FACTOR * heads * float(seq) ** 2 * micro_batch / tp


def recomputed_layer_bytes(*, seq: int, micro_batch: int, hidden: int, tp: int, sequence_parallel: bool) -> float:
    """A fully recomputed layer keeps only its input: 2 s b h bytes, sharded over TP when SP is on."""
    sbh = float(seq) * micro_batch * hidden
    return 2.0 * sbh / tp if sequence_parallel else 2.0 * sbh


def in_flight_chunks(pipeline: int, virtual: Optional[int], microbatches: int) -> int:
    """Model-chunk forward passes whose activations the first stage holds at the peak of 1F1B.

    Non-interleaved: p micro-batches of the stage (fewer when m < p). Interleaved with v chunks: Megatron's warm-up
    runs 2(p-1) + (v-1)p chunk passes before the first backward, so v p + p - 1 in flight, at most m v. Each chunk
    holds l/(p v) layers, so the first stage holds l (1 + (p-1)/(p v)) layers' worth (Narayanan et al. 2021).
    """
    v = virtual if virtual and virtual > 1 and pipeline > 1 else 1
    m = max(1, microbatches)
    if v == 1:
        return min(pipeline, m)
    return min(v * pipeline + pipeline - 1, m * v)


def layers_in_flight(spec: RecipeSpec, microbatches: int) -> float:
    """Layers' worth of activations on the first stage (l for a full 1F1B pipeline, l(1 + (p-1)/(pv)) interleaved)."""
    v = _virtual(spec)
    chunks = in_flight_chunks(spec.pipeline_parallel, v, microbatches)
    return chunks * spec.num_layers / (spec.pipeline_parallel * v)


def _virtual(spec: RecipeSpec) -> int:
    vp = spec.virtual_pipeline
    return vp if vp and vp > 1 and spec.pipeline_parallel > 1 else 1


def _chunk_layers(spec: RecipeSpec) -> int:
    return max(1, math.ceil(spec.num_layers / (spec.pipeline_parallel * _virtual(spec))))


def recomputed_fraction(spec: RecipeSpec) -> float:
    """Fraction of each model chunk's layers that full recompute covers ('block' method, as the bridge builds it:
    the first `recompute_num_layers` layers of every chunk; all of them when unset)."""
    if spec.recompute != "full":
        return 0.0
    chunk = _chunk_layers(spec)
    n = spec.recompute_num_layers or chunk
    return min(n, chunk) / chunk


@dataclass(frozen=True)
class ActivationBreakdown:
    """Activation bytes on the first stage. `layers` is what Korthikanti Fig. 1 plots; the rest are extras."""

    layers: float            # stored activations of the transformer layers in flight
    recompute_working: float  # one layer's re-materialised tensors while it is recomputed (transient peak)
    embedding: float         # token ids and embedding dropout of the micro-batches in flight
    output: float            # output layer input and fp32 logits for the cross-entropy (only the stage holding it)

    @property
    def total(self) -> float:
        return self.layers + self.recompute_working + self.embedding + self.output


def microbatches(spec: RecipeSpec, world_size: int) -> int:
    """Micro-batches per pipeline per step, m = B / (b d); at least 1."""
    dp = max(1, world_size // spec.model_parallel_size)
    return max(1, spec.global_batch_size // (spec.micro_batch_size * dp))


def activation_memory(spec: RecipeSpec, *, world_size: Optional[int] = None,
                      flash_attention: bool = False) -> ActivationBreakdown:
    """Activation bytes per GPU of the first pipeline stage; CP divides all of them by c."""
    world = spec.world_size if world_size is None else world_size
    m = microbatches(spec, world)
    s, b, h, t, c = spec.seq_length, spec.micro_batch_size, spec.hidden_size, spec.tensor_parallel, \
        spec.context_parallel
    sp = spec.sequence_parallel_enabled and t > 1
    shape = dict(seq=s, micro_batch=b, hidden=h, heads=spec.num_attention_heads, ffn=spec.ffn_hidden_size,
                 kv_groups=spec.kv_groups, gated=spec.gated_linear_unit, tp=t, sequence_parallel=sp)
    # Selective recompute drops the attention core of every layer; under full recompute the layers not recomputed
    # run as plain layers and keep it.
    core_stored = spec.recompute != "selective" and not flash_attention
    full_layer = layer_activation_bytes(**shape, attention_core=core_stored)
    held = layers_in_flight(spec, m)
    fraction = recomputed_fraction(spec)
    checkpoint = recomputed_layer_bytes(seq=s, micro_batch=b, hidden=h, tp=t, sequence_parallel=sp)
    layers = held * (fraction * checkpoint + (1.0 - fraction) * full_layer)

    # While a layer is recomputed its tensors exist once more: the whole layer under full recompute, the attention
    # core under selective recompute (unless flash attention never materialises it).
    if spec.recompute == "full":
        working = layer_activation_bytes(**shape, attention_core=not flash_attention)
    elif spec.recompute == "selective" and not flash_attention:
        working = attention_core_bytes(seq=s, micro_batch=b, heads=spec.num_attention_heads, tp=t)
    else:
        working = 0.0

    # Embedding extras per micro-batch in flight (Korthikanti Sec. 4.3): int64 token ids 8sb and the embedding
    # dropout mask sbh (sharded by SP); scaled like the layers for the interleaved schedule.
    stage_microbatches = held * spec.pipeline_parallel / spec.num_layers
    embedding = stage_microbatches * (8.0 * s * b + s * b * h / (t if sp else 1))
    output = 0.0
    if spec.pipeline_parallel == 1:
        # Output-layer input and fp32 logits for the cross-entropy: 4sbh + 4sbV, vocabulary-parallel over TP.
        output = 4.0 * s * b * h / (t if sp else 1) + 4.0 * s * b * spec.padded_vocab_size / t
    return ActivationBreakdown(layers=layers / c, recompute_working=working / c, embedding=embedding / c,
                               output=output / c)


# ---- the breakdown ----

@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory per GPU of the most loaded pipeline stage, in GiB. `capacity` is the GPU's memory (None without one)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float
    capacity: Optional[float] = None
    detail: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other

    @property
    def fits(self) -> Optional[bool]:
        return None if self.capacity is None else self.total <= self.capacity

    @property
    def headroom(self) -> Optional[float]:
        return None if self.capacity is None else self.capacity - self.total

    def to_dict(self, digits: int = 3) -> dict[str, Any]:
        out = {name: round(getattr(self, name), digits)
               for name in ("weights", "gradients", "optimizer", "activations", "other", "total")}
        out["capacity"] = None if self.capacity is None else round(self.capacity, digits)
        return out


def _resolve(gpu_or_cluster: Union[GPU, Cluster, str, None]) -> tuple[Optional[GPU], Optional[int]]:
    if isinstance(gpu_or_cluster, Cluster):
        return gpu_or_cluster.gpu, gpu_or_cluster.world_size
    if gpu_or_cluster is None:
        return None, None
    return get_gpu(gpu_or_cluster), None


def estimate_memory(spec: RecipeSpec, gpu_or_cluster: Union[GPU, Cluster, str, None] = None, *,
                    flash_attention: bool = False) -> MemoryBreakdown:
    """Memory per GPU of the first (most loaded) pipeline stage.

    With a `Cluster`, DP comes from its world size; with a GPU (or a GPU name), from the spec's own nodes x GPUs per
    node. Never raises for an inconsistent plan (the validator reports those): DP and the layers per stage round.
    """
    gpu, world = _resolve(gpu_or_cluster)
    world = spec.world_size if world is None else world
    dp = max(1, world // spec.model_parallel_size)
    shards = dp * spec.context_parallel
    params = params_per_gpu(spec)
    w_bytes, g_bytes, o_bytes = state_bytes_per_param(spec.distributed_optimizer, shards)
    acts = activation_memory(spec, world_size=world, flash_attention=flash_attention)
    weights, gradients, optimizer = params * w_bytes / GIB, params * g_bytes / GIB, params * o_bytes / GIB
    activations = acts.total / GIB
    other = OTHER_FIXED_GIB + FRAGMENTATION * (weights + gradients + optimizer + activations)
    detail = {
        "params_per_gpu": round(params),
        "bytes_per_param": round(w_bytes + g_bytes + o_bytes, 4),
        "optimizer_shards": shards if spec.distributed_optimizer else 1,
        "layers_per_stage": layers_per_stage(spec),
        "layers_in_flight": round(layers_in_flight(spec, microbatches(spec, world)), 4),
        "activations_layers": round(acts.layers / GIB, 3),
        "activations_recompute_working": round(acts.recompute_working / GIB, 3),
        "activations_embedding": round(acts.embedding / GIB, 3),
        "activations_output": round(acts.output / GIB, 3),
        "flash_attention": flash_attention,
        "other_fixed": OTHER_FIXED_GIB,
        "other_fragmentation": FRAGMENTATION,
    }
    return MemoryBreakdown(weights=weights, gradients=gradients, optimizer=optimizer, activations=activations,
                           other=other, capacity=None if gpu is None else gpu.memory_gib, detail=detail)

