"""Memory per GPU on the most loaded pipeline stage (the first): weights, gradients, optimizer state, activations and
an allowance for everything PyTorch does not count as a tensor of the model.

Standard library only. Formulas and sources: `benchmarks/data/perf-model.md` sections 2.1, 2.3 and 2.4.

Model state (Megatron-Core distributed optimizer guide, bf16 row; what our training objects build): bf16 weights
(2 bytes/param), fp32 main gradients (4, `grad_reduce_in_fp32=True`), fp32 master weights plus Adam m and v (12).
The distributed optimizer shards only the 12 optimizer bytes, over the data-parallel x context-parallel group
(Megatron-Core builds its optimizer shards on the DP group that includes CP ranks), giving 6 + 12/(d c).
FP8 does not change these numbers: Transformer Engine keeps bf16/fp32 master copies; its FP8 weight caches fall in
the "other" allowance.

Activations (Korthikanti et al. 2022, Table 2 and Section 4), assuming 16-bit activations and 1-byte dropout masks.
The attention kernel is the one the program runs (`stack.Program`): fused attention (Transformer Engine, the NeMo
container) stores no score matrix, the same saving as selective recomputation; Megatron-Core's local layer spec
(no Transformer Engine) stores the 5as^2b score term. Generalised per layer, in units of s*b*h bytes:

    replicated across TP unless SP: 10    (two LayerNorm inputs 4, QKV and FC1 inputs 2 + 2, two dropout masks 2)
    sharded by TP:                  4 + 4 g/a + F      (Q 2, K and V 2 g/a each, output-projection input 2, MLP F)
                                    (with a head dimension d other than h/a, kv_channels: 4 a d/h + 4 g d/h + F)
    attention core, sharded by TP:  5 a s / h           (softmax output 2, its dropout mask 1, dropout output 2)

with F = 4 ffn/h for a GeLU MLP (activation input and FC2 input, each ffn wide) and F = 8 ffn/h for SwiGLU without
fusion, as the training objects build it (the 2*ffn-wide FC1 output, silu's output and the product). For GPT-3 shapes
(g = a, ffn = 4h) this is exactly Korthikanti's 34 + 5as/h. The approximation: GQA is counted through the size of K
and V only, and dropout masks are counted even when a dropout probability is 0 (a slight overestimate).

Layout numbers (DP, micro-batches, layers per stage and chunk, parameters per GPU) come from `layout.Layout`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.blocks import Attention, DenseMLP, channels_per_head
from nemo_recipes.plan.hardware import GPU, Cluster, get_gpu
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.stack import FP32_BYTES, Program, program_for

GIB = float(2**30)

WEIGHT_BYTES = 2  # bf16 parameters
GRADIENT_BYTES = FP32_BYTES  # fp32 main gradients (grad_reduce_in_fp32=True, as the recipes set it)
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam first and second moments

# "other": what the model's tensors do not account for. CUDA context and kernel images (~0.5 GiB with lazy loading
# on Hopper), cuBLAS/cuDNN workspaces (~0.5 GiB), NCCL buffers of the TP/PP/DP/CP communicators (~1 GiB): 2 GiB
# fixed. On top of that, the PyTorch caching allocator typically reserves 5 % more than it has allocated at peak
# (fragmentation), so 5 % of the modelled tensors. Both are allowances to calibrate on a GPU, not measurements.
OTHER_FIXED_GIB = 2.0
FRAGMENTATION = 0.05
# Transformer Engine's userbuffers for TP communication overlap (`initialize_ub`): 12 communicators (4 ring-exchange,
# 2 pipelined, 4 bulk, 2 external), each with a buffer of the [s b / CP, h] layer input. In BF16 that is 24 bytes per
# s*b*h/CP; with FP8 the 8 all-gather buffers hold 1-byte values (8 x 1 + 4 x 2 = 16).
TP_OVERLAP_BUFFER_BYTES = {False: 24, True: 16}

# Replicated-under-TP part of a layer's activations, in units of s*b*h bytes (Korthikanti Table 2's "10").
_REPLICATED_SBH = 10.0
_ATTENTION_CORE_FACTOR = 5.0  # 5 a s^2 b bytes: softmax output, dropout mask, dropout output


# ---- model state ----


def state_bytes_per_param(
    distributed_optimizer: bool, shards: int = 1, gradient_bytes: int = GRADIENT_BYTES
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter held; `shards` = DP x CP ranks sharing optimizer state;
    `gradient_bytes` the program's main-gradient element (`Program.gradient_bytes`)."""
    optimizer = OPTIMIZER_BYTES / max(1, shards) if distributed_optimizer else float(OPTIMIZER_BYTES)
    return float(WEIGHT_BYTES), float(gradient_bytes), optimizer


def params_per_gpu(spec: RecipeSpec, cluster: Optional[Cluster] = None) -> float:
    """Parameters held by one GPU of the most loaded pipeline stage (`Layout.params_per_rank`)."""
    return Layout.of(spec, cluster).params_per_rank


# ---- activations ----


def layer_activation_bytes(
    *,
    seq: int,
    micro_batch: int,
    hidden: int,
    heads: int,
    ffn: int,
    kv_groups: int,
    gated: bool,
    tp: int,
    sequence_parallel: bool,
    attention_core: bool,
    head_dim: Optional[int] = None,
) -> float:
    """Activation bytes one dense transformer layer of these widths stores for the backward pass (Korthikanti Table 2,
    generalised as the module docstring states). `attention_core=False` when selective recompute or fused attention
    drops the score tensors. A recipe's layer is its family's blocks: `LayoutActivations.of` asks them."""
    d = channels_per_head(hidden, heads, head_dim)
    blocks = (Attention(hidden, heads, kv_groups, d, "", False), DenseMLP(hidden, ffn, gated, "", False))
    sharded = 0.0
    for block in blocks:
        sharded += block.stored_activations_per_sbh()
    per_layer = _stored_bytes(float(seq) * micro_batch * hidden, sharded, tp, sequence_parallel)
    if attention_core:
        per_layer += attention_core_bytes(seq=seq, micro_batch=micro_batch, heads=heads, tp=tp)
    return per_layer


def _stored_bytes(sbh: float, sharded_per_sbh: float, tp: int, sequence_parallel: bool) -> float:
    """A layer's stored bytes: the blocks' (sharded over TP) and the norms' and dropouts' (sharded by SP)."""
    replicated = _REPLICATED_SBH / tp if sequence_parallel else _REPLICATED_SBH
    return sbh * (replicated + sharded_per_sbh / tp)


def attention_core_bytes(*, seq: int, micro_batch: int, heads: int, tp: int) -> float:
    """5 a s^2 b / t: softmax output, its dropout mask and the dropout output of one layer."""
    return _ATTENTION_CORE_FACTOR * heads * float(seq) ** 2 * micro_batch / tp


def recomputed_layer_bytes(*, seq: int, micro_batch: int, hidden: int, tp: int, sequence_parallel: bool) -> float:
    """A fully recomputed layer keeps only its input: 2 s b h bytes, sharded over TP when SP is on."""
    sbh = float(seq) * micro_batch * hidden
    return 2.0 * sbh / tp if sequence_parallel else 2.0 * sbh


def in_flight_chunks(pipeline: int, virtual: int, microbatches: int) -> int:
    """Model-chunk forward passes whose activations the first stage holds at the peak of 1F1B.

    Non-interleaved: p micro-batches of the stage (fewer when m < p). Interleaved with v chunks: Megatron's warm-up
    runs 2(p-1) + (v-1)p chunk passes before the first backward, so v p + p - 1 in flight, at most m v. Each chunk
    holds l/(p v) layers, so the first stage holds l (1 + (p-1)/(p v)) layers' worth (Narayanan et al. 2021).
    """
    m = max(1, microbatches)
    if virtual <= 1:
        return min(pipeline, m)
    return min(virtual * pipeline + pipeline - 1, m * virtual)


def layers_in_flight(layout: Layout) -> float:
    """Layers' worth of activations on the first stage (l for a full 1F1B pipeline, l(1 + (p-1)/(pv)) interleaved)."""
    chunks = in_flight_chunks(layout.pp, layout.vp, layout.microbatches)
    return chunks * layout.layers_first_stage / layout.vp


@dataclass(frozen=True)
class ActivationBreakdown:
    """Activation bytes on the first stage. `layers` is what Korthikanti Fig. 1 plots; the rest are extras."""

    layers: float  # stored activations of the transformer layers in flight
    recompute_working: float  # one layer's re-materialised tensors while it is recomputed (transient peak)
    embedding: float  # token ids and embedding dropout of the micro-batches in flight
    output: float  # output layer input and fp32 logits for the cross-entropy (only the stage holding it)

    @property
    def total(self) -> float:
        return self.layers + self.recompute_working + self.embedding + self.output


def _stored_per_sbh(arch: Architecture, imbalance: float) -> float:
    """What a layer's blocks store per s·b·h before TP divides it; with experts, on the busiest expert-parallel
    rank, which receives `imbalance` times its even share of the routed tokens (`RecipeSpec.moe_imbalance`)."""
    stored = arch.stored_activations_per_sbh()
    moe = arch.moe
    if moe is not None and imbalance != 1.0:
        stored += (imbalance - 1.0) * moe.routed_activations_per_sbh()
    return stored


def _stage_stored_bytes(
    arch: Architecture, layout: Layout, imbalance: float, sbh: float, tp: int, sequence_parallel: bool
) -> float:
    """What a layer of the first stage stores without its attention core, on average over the stage's layers (each
    its own group's blocks: DeepSeek-V3's first stages hold its dense layers), so that the stage's layers in flight
    store `held` times it. One kind of layer on the stage: that layer's. Interleaved, the stage's first chunk's
    layers stand for its later chunks' (the warm-up holds mostly the first)."""
    stage = arch.layers_in(0, layout.layers_first_stage) or [(0, arch.groups[0])]  # none: `held` is 0
    if len(stage) == 1:
        return _stored_bytes(sbh, _stored_per_sbh(arch.alone(stage[0][1]), imbalance), tp, sequence_parallel)
    total = sum(
        n * _stored_bytes(sbh, _stored_per_sbh(arch.alone(g), imbalance), tp, sequence_parallel) for n, g in stage
    )
    return total / sum(n for n, _ in stage)


# (seq, micro batch, hidden, the first stage's groups, TP, SP, routing imbalance) -> `LayoutActivations`' first four.
_LAYER_TERMS: dict[tuple, tuple[float, float, float, float]] = {}


@dataclass(frozen=True)
class LayoutActivations:
    """The activation bytes of `spec` on a layout whatever is recomputed (before CP divides them): computed once, a
    plan search tries every recompute mode of a layout on them (`search.recompute_options`)."""

    layer_with_core: float  # one layer of the first stage (their mean) that stores its attention core
    layer_without_core: float  # one that does not (fused attention, or selective recompute)
    core: float  # the attention core of one layer
    checkpoint: float  # the input a fully recomputed layer keeps
    held: float  # layers' worth in flight on the first stage
    embedding: float  # token ids and embedding dropout of the micro-batches in flight
    output: float  # output layer input and fp32 logits (only the stage holding it)

    @classmethod
    def of(cls, spec: RecipeSpec, layout: Layout) -> "LayoutActivations":
        s, b, h, t = spec.seq_length, layout.micro_batch, spec.hidden_size, layout.tp
        sp = layout.sequence_parallel
        arch = layout.architecture  # the shape's, built once (`layout.shape_architecture`): only its groups are read
        # A search lays out one shape hundreds of times over a few (micro batch, TP) pairs: the per-layer terms are
        # counted once per process for each (they read nothing else).
        stage = tuple((n, g.blocks) for n, g in arch.layers_in(0, layout.layers_first_stage))
        key = (s, b, h, stage, t, sp, spec.moe_imbalance)
        per_layer = _LAYER_TERMS.get(key)
        if per_layer is None:
            heads = arch.attention.heads
            core = attention_core_bytes(seq=s, micro_batch=b, heads=heads, tp=t)
            without = _stage_stored_bytes(arch, layout, spec.moe_imbalance, float(s) * b * h, t, sp)
            per_layer = _LAYER_TERMS[key] = (
                without + core,
                without,
                core,
                recomputed_layer_bytes(seq=s, micro_batch=b, hidden=h, tp=t, sequence_parallel=sp),
            )
        # Embedding extras per micro-batch in flight (Korthikanti Sec. 4.3): int64 token ids 8sb and the embedding
        # dropout mask sbh (sharded by SP); scaled like the layers for the interleaved schedule.
        stage_microbatches = in_flight_chunks(layout.pp, layout.vp, layout.microbatches) / layout.vp
        output = 0.0
        if layout.pp == 1:
            # Output-layer input and fp32 logits for the cross-entropy: 4sbh + 4sbV, vocabulary-parallel over TP.
            output = 4.0 * s * b * h / (t if sp else 1) + 4.0 * s * b * spec.padded_vocab_size / t
        return cls(
            layer_with_core=per_layer[0],
            layer_without_core=per_layer[1],
            core=per_layer[2],
            checkpoint=per_layer[3],
            held=layers_in_flight(layout),
            embedding=stage_microbatches * (8.0 * s * b + s * b * h / (t if sp else 1)),
            output=output,
        )


def activation_memory(
    spec: RecipeSpec,
    layout: Optional[Layout] = None,
    *,
    fused_attention: bool,
    terms: Optional[LayoutActivations] = None,
) -> ActivationBreakdown:
    """Activation bytes per GPU of the first pipeline stage (on the recipe's own cluster without `layout`); CP
    divides all of them by c. `fused_attention`: the program's attention kernel stores no score matrix. `terms`:
    `LayoutActivations.of(spec, layout)`, or of a spec that differs from `spec` only in what it recomputes."""
    layout = layout or Layout.of(spec)
    terms = terms or LayoutActivations.of(spec, layout)
    layers, working = _stored_and_working(spec, layout, fused_attention, terms)
    c = layout.cp
    return ActivationBreakdown(
        layers=layers / c, recompute_working=working / c, embedding=terms.embedding / c, output=terms.output / c
    )


def _stored_and_working(
    spec: RecipeSpec, layout: Layout, fused_attention: bool, terms: LayoutActivations
) -> tuple[float, float]:
    """The bytes of the layers in flight and of one recomputed layer's working set, before CP divides them."""
    # Selective recompute drops the attention core of every layer; under full recompute the layers not recomputed
    # run as plain layers and keep it.
    core_stored = spec.recompute != "selective" and not fused_attention
    full_layer = terms.layer_with_core if core_stored else terms.layer_without_core
    fraction = layout.recomputed_fraction(spec)
    layers = terms.held * (fraction * terms.checkpoint + (1.0 - fraction) * full_layer)

    # While a layer is recomputed its tensors exist once more: the whole layer under full recompute, the attention
    # core under selective recompute (unless fused attention never materialises it).
    if spec.recompute == "full":
        working = terms.layer_without_core if fused_attention else terms.layer_with_core
    elif spec.recompute == "selective" and not fused_attention:
        working = terms.core
    else:
        working = 0.0
    return layers, working


def tp_overlap_buffer_bytes(spec: RecipeSpec, layout: Layout, program: Program) -> float:
    """Userbuffers that Transformer Engine allocates once for TP communication overlap (0 when it is off)."""
    if not program.tp_comm_overlap:
        return 0.0
    per_sbh = TP_OVERLAP_BUFFER_BYTES[spec.fp8]
    return per_sbh * layout.tokens_per_rank * spec.hidden_size


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
        out = {
            name: round(getattr(self, name), digits)
            for name in ("weights", "gradients", "optimizer", "activations", "other", "total")
        }
        out["capacity"] = None if self.capacity is None else round(self.capacity, digits)
        return out


def _resolve(spec: RecipeSpec, gpu_or_cluster: Union[GPU, Cluster, str, None]) -> tuple[Optional[GPU], Cluster]:
    if isinstance(gpu_or_cluster, Cluster):
        return gpu_or_cluster.gpu, gpu_or_cluster
    gpu = None if gpu_or_cluster is None else get_gpu(gpu_or_cluster)
    return gpu, Cluster(nodes=spec.num_nodes, gpus_per_node=spec.num_gpus_per_node, gpu=gpu)


def total_gib(
    spec: RecipeSpec,
    layout: Layout,
    program: Program,
    terms: Optional[LayoutActivations] = None,
    state: Optional[ModelState] = None,
) -> float:
    """`estimate_memory(spec, layout=layout, program=program).total` without the breakdown (what a plan search
    compares with the GPU's memory, hundreds of times); `terms` as `activation_memory` takes them, `state`:
    `model_state(...)` of a spec that differs from `spec` only in what it recomputes."""
    _, weights, gradients, optimizer, buffers = state or model_state(spec, layout, program)
    terms = terms or LayoutActivations.of(spec, layout)
    layers, working = _stored_and_working(spec, layout, program.fused_attention, terms)
    c = layout.cp
    # `_parts` without the breakdown objects, in its order of operations: the same float, bit for bit.
    activations = (layers / c + working / c + terms.embedding / c + terms.output / c) / GIB
    return _total(weights, gradients, optimizer, activations, buffers)


def _other(weights: float, gradients: float, optimizer: float, activations: float, buffers: float) -> float:
    """GiB beyond the four parts: fixed, the TP overlap buffers and fragmentation."""
    return OTHER_FIXED_GIB + buffers + FRAGMENTATION * (weights + gradients + optimizer + activations)


def _total(weights: float, gradients: float, optimizer: float, activations: float, buffers: float) -> float:
    """The total GiB, summed in the order `MemoryBreakdown.total` sums it (the same float, bit for bit)."""
    other = _other(weights, gradients, optimizer, activations, buffers)
    return weights + gradients + optimizer + activations + other


#: Bytes per parameter (weights, gradients, optimizer), then GiB of weights, gradients, optimizer and TP overlap
#: buffers: what recomputation does not change.
ModelState = tuple[tuple[float, float, float], float, float, float, float]


def model_state(spec: RecipeSpec, layout: Layout, program: Program) -> ModelState:
    """The routed experts' optimizer state shards over the expert-data-parallel group, the rest over DP x CP
    (Megatron-Core's distributed optimizer builds one per group); the bytes per parameter are the dense ones'."""
    params, experts = layout.params_per_rank, layout.expert_params_per_rank
    per_param = state_bytes_per_param(spec.distributed_optimizer, layout.optimizer_shards, program.gradient_bytes)
    w_bytes, g_bytes, o_bytes = per_param
    expert_o_bytes = state_bytes_per_param(spec.distributed_optimizer, layout.expert_data_parallel)[2]
    optimizer = ((params - experts) * o_bytes + experts * expert_o_bytes) / GIB
    weights, gradients = params * w_bytes / GIB, params * g_bytes / GIB
    return per_param, weights, gradients, optimizer, tp_overlap_buffer_bytes(spec, layout, program) / GIB


def state_floor_gib(state: ModelState) -> float:
    """The least total GiB of any recomputation on a layout whose model state is `state`: `total_gib` with no
    activations. Each rounded addition and product of that sum only grows with the activations, so no plan of the
    layout totals less, to the last bit."""
    _, weights, gradients, optimizer, buffers = state
    return _total(weights, gradients, optimizer, 0.0, buffers)


def _parts(
    spec: RecipeSpec,
    layout: Layout,
    program: Program,
    terms: Optional[LayoutActivations] = None,
    state: Optional[ModelState] = None,
) -> tuple[tuple[float, float, float], ActivationBreakdown, float, tuple[float, float, float, float, float]]:
    """Bytes per parameter (weights, gradients, optimizer), the activations, the TP overlap buffers (GiB), and the
    GiB of weights, gradients, optimizer, activations and other."""
    per_param, weights, gradients, optimizer, buffers = state or model_state(spec, layout, program)
    acts = activation_memory(spec, layout, fused_attention=program.fused_attention, terms=terms)
    activations = acts.total / GIB
    other = _other(weights, gradients, optimizer, activations, buffers)
    return per_param, acts, buffers, (weights, gradients, optimizer, activations, other)


def estimate_memory(
    spec: RecipeSpec,
    gpu_or_cluster: Union[GPU, Cluster, str, None] = None,
    *,
    stack: Optional[str] = None,
    layout: Optional[Layout] = None,
    program: Optional[Program] = None,
) -> MemoryBreakdown:
    """Memory per GPU of the most loaded pipeline stage, for the program that runs (`stack`, see
    `stack.resolve_stack`; default: the NeMo container with Transformer Engine).

    With a `Cluster`, DP comes from its world size; with a GPU (or a GPU name), from the spec's own nodes x GPUs per
    node. Never raises for an inconsistent plan (the validator reports those): DP and the layers per stage round.
    `layout` and `program`, when the caller has them, are used as they are.
    """
    gpu, cluster = _resolve(spec, gpu_or_cluster)
    layout = layout or Layout.of(spec, cluster)
    program = program or program_for(spec, gpu, stack, layout.interleaved)
    params = layout.params_per_rank
    (w_bytes, g_bytes, o_bytes), acts, buffers, (weights, gradients, optimizer, activations, other) = _parts(
        spec, layout, program
    )
    detail = {
        "params_per_gpu": round(params),
        "bytes_per_param": round(w_bytes + g_bytes + o_bytes, 4),
        "optimizer_shards": layout.optimizer_shards if spec.distributed_optimizer else 1,
        "layers_per_stage": layout.layers_per_stage,
        "layers_per_chunk": layout.layers_per_chunk,
        "layers_in_flight": round(layers_in_flight(layout), 4),
        "activations_layers": round(acts.layers / GIB, 3),
        "activations_recompute_working": round(acts.recompute_working / GIB, 3),
        "activations_embedding": round(acts.embedding / GIB, 3),
        "activations_output": round(acts.output / GIB, 3),
        "attention": "fused" if program.fused_attention else "unfused",
        "stack": program.stack.name,
        "other_fixed": OTHER_FIXED_GIB,
        "other_tp_overlap_buffers": round(buffers, 3),
        "other_fragmentation": FRAGMENTATION,
    }
    return MemoryBreakdown(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        activations=activations,
        other=other,
        capacity=None if gpu is None else gpu.memory_gib,
        detail=detail,
    )
