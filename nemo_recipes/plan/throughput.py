"""Step time, tokens/s, MFU and time-to-train of a GPT pretraining plan on a cluster.

Standard library only. An analytical model of one Megatron training step, built from the formulas of
`perf-model.md` (section numbers below refer to it):

- **Compute.** Every GEMM of a layer (forward, data and weight gradients; 2.2), recomputation included, at the GPU's
  dense peak for the precision times the ceiling efficiency of the largest GEMMs and its shape's fraction of it
  (`kernels.gemm_efficiency`: wave quantisation over the GPU's SMs and the depth K against each tile's fixed cost),
  plus its operands' HBM traffic (a smooth roofline, so small GEMMs are slower per FLOP). FP8 (Transformer Engine)
  runs the linear layers of the transformer blocks in FP8; attention and the output layer stay in BF16 (as in
  Megatron-Core and NeMo unless FP8 attention is asked for). With Transformer Engine the attention core is a fused
  (flash) kernel: it skips the masked half of the causal score matrix and its backward recomputes the scores, so it
  executes `0.5 x (1 + 2.5)` times the forward attention FLOPs that the 72-formula counts three times (Dao 2023,
  FlashAttention-2, Sec. 3), at the published speed of the stack's kernel (cuDNN or FlashAttention-2) for its
  sequence length, head dimension and mask (`kernels.attention_efficiency`; no fitted constant).
- **Memory-bound work.** Layer norms, bias-dropout-add, the activation function, FP8 casts, the cross-entropy over the
  vocabulary and the optimizer step move bytes at the achievable HBM bandwidth. Without sequence parallelism the
  norms and dropouts are replicated on every tensor-parallel rank (Korthikanti et al. 2022, Sec. 4.2.2).
- **Tensor parallelism** (2.6): `8·b·s·h·(t-1)/t` elements per layer and micro-batch (plus a forward's worth under
  full recomputation) over NVLink; sequence parallelism moves the same volume. Overlapped with the GEMMs only when
  the program has TP communication overlap (`stack.Program`: the recipe asks for it, Transformer Engine, Hopper or
  newer).
- **Pipeline** (2.5): 1F1B bubble `(p-1)/m`, interleaved `(p-1)/(v·m)`, of the stage time; the slowest stage sets
  the pace (the last one also runs the output layer); point-to-point sends of `b·s·h/t` elements per boundary and
  micro-batch, hidden behind the next chunk's compute when the interleaved schedule overlaps them
  (`overlap_p2p_comm`), except in warm-up and cool-down.
- **Data parallelism** (2.6): gradient reduce-scatter and parameter all-gather (distributed optimizer) or all-reduce,
  in the bytes the program moves (fp32 or bf16 gradients, bf16 or FP8 parameters), over NVLink when the group fits
  in a node and otherwise over the NICs of the group's GPUs; with overlap, each model chunk's share hides behind the
  backward (forward) that follows its last (first) pass, as Megatron-Core launches it.
- **Context parallelism**: each rank holds `s/c` tokens; K/V chunks travel in a ring, hidden behind attention compute.
- **Optimizer**: Adam on the local (distributed-optimizer) shard and the gradient-buffer reset, at HBM bandwidth.
- **Power.** A GPU with fewer board watts per peak TFLOP/s than the H100 (Blackwell) sustains a lower tensor clock:
  its tensor-core rates are derated by the cube root of that ratio (`_power_derate`).
- **Fixed cost per step** (`ModelConstants.step_overhead`): synchronisations, optimizer launches, data, logging.

`stack=` names the software (`stack.resolve_stack`; default: the NeMo container, Megatron-Core with Transformer
Engine); without Transformer Engine (Megatron-Core's local spec, or the Megatron-LM of the 2021-22 papers) attention
is unfused: its s x s tensors go through HBM. Layout sizes come from `layout.Layout`, and the plans it refuses are
exactly those `rules.STRUCTURAL_RULES` call errors. The efficiencies in `ModelConstants` are global (one value
each for every GPU and model, no per-row adjustment); `benchmarks/planner_accuracy.py` refits them, in sample and
leaving each source out. `Throughput.terms_s` groups the step into the terms a user can act on (`STEP_TERMS`: matmul,
attention, memory-bound kernels, recomputation, exposed communication, pipeline bubble, per-step cost) and
`dominant_term` names the largest: why a layout is as slow as it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.families.architecture import Architecture, LayerGroup
from nemo_recipes.plan import flops as _flops
from nemo_recipes.plan import kernels as _kernels
from nemo_recipes.plan.experts import NONE as NO_EXPERTS
from nemo_recipes.plan.experts import expert_times, once_per_token_gemms
from nemo_recipes.plan.hardware import GPU, Cluster, get_gpu, group_bandwidth_gb_s
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.model_constants import (  # noqa: F401  (re-exported: throughput's names before the split)
    ACTIVATION_BYTES,
    ACTIVATION_BYTES_PER_FFN,
    ADAM_BYTES_PER_PARAM,
    BACKWARD_BYTES_FACTOR,
    CONSTANTS,
    CROSS_ENTROPY_BYTES_PER_LOGIT,
    FP8_CAST_BYTES_PER_ELEMENT,
    FUSED_CROSS_ENTROPY_BYTES_PER_LOGIT,
    GRAD_BUFFER_BYTES_PER_PARAM,
    NORM_DROPOUT_BYTES_PER_HIDDEN,
    SOFTMAX_DROPOUT_BYTES,
    ModelConstants,
    active_constants,
    using_constants,
)
from nemo_recipes.plan.rates import POWER_REFERENCE, Rates, gemm_s, power_derate
from nemo_recipes.plan.rules import raise_if_unstructured
from nemo_recipes.plan.stack import Program, program_for
from nemo_recipes.plan.stages import LayerTimes, Stage, stages

# ---- the model's constants: model_constants.py ----

FLOPS_CONVENTION = _flops.MODEL_FLOPS_CONVENTION
# The names before `rates.py` held them (the tests read the private ones).
_Rates = Rates
_power_derate = power_derate


@dataclass(frozen=True)
class Throughput:
    """What one training step costs on a cluster, and what it produces."""

    step_time_s: float
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    flops_convention: str
    mfu: float  # model FLOP/s per GPU / dense BF16 peak
    mfu_fp8: Optional[float]  # against the dense FP8 peak, for FP8 plans
    hfu: float  # hardware FLOP/s (recomputation included) / dense BF16 peak
    gpu: str
    num_gpus: int
    data_parallel_size: int
    micro_batches: int
    breakdown_s: dict[str, float] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()

    @property
    def terms_s(self) -> dict[str, float]:
        """The step by the term a user can act on (`STEP_TERMS`), in seconds, largest first."""
        terms = {term: sum(self.breakdown_s.get(part, 0.0) for part in parts) for term, parts in STEP_TERMS.items()}
        return dict(sorted(terms.items(), key=lambda item: -item[1]))

    @property
    def dominant_term(self) -> str:
        """The term that takes the largest share of the step: why the layout is as slow as it is."""
        return next(iter(self.terms_s))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["breakdown_s"] = dict(self.breakdown_s)
        out["assumptions"] = list(self.assumptions)
        out["terms_s"] = self.terms_s
        out["dominant_term"] = self.dominant_term
        return out


# The terms of a step a user can act on, each the sum of parts of `Throughput.breakdown_s`: GEMMs (the transformer
# blocks' and the output layer's, with the loss), the attention core, memory-bound kernels (norms, activations,
# casts, the optimizer step), recomputation, communication that is not hidden behind compute (TP, CP, pipeline
# sends, DP reduce and gather), the pipeline bubble and the fixed per-step cost.
STEP_TERMS: dict[str, tuple[str, ...]] = {
    "matmul": ("dense_matmul", "output_layer", "expert_matmul"),
    "attention": ("attention",),
    "memory_bound": ("memory_bound", "optimizer"),
    "recompute": ("recompute",),
    "exposed_communication": (
        "tp_comm_exposed",
        "cp_comm_exposed",
        "pp_p2p",
        "dp_reduce_exposed",
        "dp_gather_exposed",
        "ep_comm_exposed",
    ),
    "pipeline_bubble": ("pp_bubble",),
    "per_step": ("step_overhead",),
}


#: The parts only a Mixture of Experts' step has: its routed experts' GEMMs and their exposed dispatch and combine.
EXPERT_PARTS = ("expert_matmul", "ep_comm_exposed")

# ---- the model ----


def _resolve_gpu(spec: RecipeSpec, cluster: Cluster, assumptions: list[str]) -> GPU:
    if cluster.gpu is not None:
        return cluster.gpu
    gpu = get_gpu(spec.default_gpu)
    assumptions.append(f"cluster names no GPU: assumed the recipe's default GPU {gpu.name}")
    return gpu


def _layer(
    spec: RecipeSpec,
    layout: Layout,
    program: Program,
    gpu: GPU,
    rates: Rates,
    k: ModelConstants,
    shared: Optional[dict[tuple, Any]] = None,
    group: Optional[LayerGroup] = None,
) -> LayerTimes:
    """One layer of `group` (the model's only one without it). `shared`: see `step_time`; what a layer costs before
    recomputation depends on no other field of a plan."""
    whole = layout.architecture  # the shape's: only its blocks are read
    arch = whole.alone(group) if group is not None else whole
    key = (
        *(layout.tp, layout.cp, layout.tokens_per_rank, layout.micro_batch, layout.sequence_parallel),
        *(program.fused_attention, program.stack.attention_kernel, program.tp_comm_overlap),
        *(layout.ep, layout.etp, spec.moe_imbalance, arch.blocks),
    )
    shared = {} if shared is None else shared
    if key not in shared:
        shared[key] = _layer_parts(spec, layout, program, gpu, rates, k, arch)
    dense_f, dense_b, attention_f, attention_b, memory_f, memory_b, tp_f, cp_f, cp_b, experts = shared[key]
    forward = dense_f + attention_f + memory_f + tp_f + cp_f + experts.forward
    recompute = 0.0
    if spec.recompute == "full":
        recompute = layout.recomputed_fraction(spec) * forward
    elif spec.recompute == "selective":
        recompute = attention_f
    parts = (dense_f, dense_b, attention_f, attention_b, memory_f, memory_b, tp_f, tp_f, cp_f, cp_b, recompute)
    return LayerTimes(*parts, experts)


def _layer_parts(
    spec: RecipeSpec, layout: Layout, program: Program, gpu: GPU, rates: Rates, k: ModelConstants, arch: Architecture
) -> tuple[Any, ...]:
    """`arch`: the layer's (`Architecture.alone` of its group): what its blocks compute and send (`families.blocks`)."""
    t, c, tokens, s, h = layout.tp, layout.cp, layout.tokens_per_rank, spec.seq_length, spec.hidden_size
    fp8 = spec.fp8
    attention, mlp, moe = arch.attention, arch.mlp, arch.moe
    layer_gemms = arch.layer_gemms() if moe is None else once_per_token_gemms(arch)  # routed: `expert_times`
    d_head, gemms = attention.head_dim, [g.on_rank(t) for g in layer_gemms]
    operand = 1 if fp8 else ACTIVATION_BYTES
    dense_f = sum(gemm_s(tokens, a, n, rates.dense, rates, operand) for a, n in gemms)
    dense_b = sum(
        gemm_s(tokens, n, a, rates.dense, rates, operand) + gemm_s(a, tokens, n, rates.dense, rates, operand)
        for a, n in gemms
    )

    if len(layout.architecture.groups) == 1:  # every layer alike: the model's attention FLOPs, a layer's share
        attention_flops = _flops.forward_flops_per_token(spec).attention / spec.num_layers * tokens / t
    else:
        attention_flops = sum(b.attention_flops_per_token(s) for b in arch.blocks) * tokens / t
    if program.fused_attention:
        attention_f, attention_b = _fused_attention_s(
            0.5 * attention_flops, s, c, d_head, rates, program.stack.attention_kernel
        )
    else:
        # Unfused: per head, batched GEMMs over the whole s x s matrix (scores = Q K^T, context = P V; backward two
        # each), whose s x s operand goes through HBM, and softmax and dropout over the s x s values.
        heads = layout.micro_batch * attention.heads / t
        sq, sk = s / c, s
        # One batched GEMM over all heads of the micro-batch for each product.
        qk = gemm_s(sq, d_head, sk, rates.bf16, rates, ACTIVATION_BYTES, heads)  # Q K^T, and dP = dO V^T
        pv = gemm_s(sq, sk, d_head, rates.bf16, rates, ACTIVATION_BYTES, heads)  # P V, and dQ = dS K
        pt = gemm_s(sk, sq, d_head, rates.bf16, rates, ACTIVATION_BYTES, heads)  # dV = P^T dO, and dK = dS^T Q
        scores = heads * sq * sk
        attention_f = qk + pv + scores * SOFTMAX_DROPOUT_BYTES[0] / rates.hbm
        attention_b = qk + pv + 2 * pt + scores * SOFTMAX_DROPOUT_BYTES[1] / rates.hbm

    replicated = NORM_DROPOUT_BYTES_PER_HIDDEN * h / (t if layout.sequence_parallel else 1)
    split = ACTIVATION_BYTES_PER_FFN[mlp.gated] * mlp.ffn / t if mlp is not None else 0.0
    if fp8:
        split += FP8_CAST_BYTES_PER_ELEMENT * sum(g.k for g in layer_gemms) / t  # forward GEMM inputs
        split += FP8_CAST_BYTES_PER_ELEMENT * sum(g.n for g in layer_gemms) / t / BACKWARD_BYTES_FACTOR
    memory_f = tokens * (replicated + split) / rates.hbm
    memory_b = BACKWARD_BYTES_FACTOR * memory_f

    # Tensor parallelism: the blocks' all-reduces (or reduce-scatter + all-gather pairs), as many backward.
    collectives = arch.layer_collectives()
    tp_link, tp = group_bandwidth_gb_s(gpu, t, 1, layout.gpus_per_node), [x for x in collectives if x.group == "tp"]
    timed = [(rates.allreduce_s if x.kind == "all-reduce" else rates.gather_s, x) for x in tp]  # or a half of one
    tp_f = sum(time(tokens * x.elements_per_token * ACTIVATION_BYTES, t, tp_link) for time, x in timed)
    tp_f *= 1.0 - (k.tp_overlap if program.tp_comm_overlap else 0.0)

    # Context parallelism: K and V chunks of s/c tokens go round the ring (c-1 hops) forward; the backward sends
    # them again with their gradients. Hidden behind the attention compute of the same layer.
    cp_f = cp_b = 0.0
    ring = next((x for x in collectives if x.group == "cp"), None)
    if c > 1 and ring is not None:
        kv_bytes = tokens * ring.elements_per_token / t * ACTIVATION_BYTES
        link = group_bandwidth_gb_s(gpu, c, t, layout.gpus_per_node)
        cp_f = max(0.0, (c - 1) * rates.send_s(kv_bytes, link) - attention_f)
        cp_b = max(0.0, 2 * (c - 1) * rates.send_s(kv_bytes, link) - attention_b)
    experts = NO_EXPERTS if moe is None else expert_times(spec, layout, gpu, rates, k, moe, operand)
    return dense_f, dense_b, attention_f, attention_b, memory_f, memory_b, tp_f, cp_f, cp_b, experts


def _fused_attention_s(
    executed: float, s: int, c: int, d_head: int, rates: Rates, kernel: str = "cudnn"
) -> tuple[float, float]:
    """Forward and backward seconds of a fused (flash) attention core that executes `executed` forward FLOPs (half
    the causal score matrix; the backward executes 2.5 times as much: it recomputes the scores, Dao 2023, Sec. 4.1),
    at the published efficiency of its sequence length, head dimension and mask (`kernels.attention_efficiency`).

    Under context parallelism a rank attends its s/c queries to the s keys in c ring steps: the step on its own
    chunk is causal (1/c of the work, length s/c); the c - 1 others are full (unmasked) blocks that pair s/c queries
    with half a chunk of keys, or half the queries with a whole chunk (Megatron-Core's load-balanced split: each rank
    holds two mirrored halves of chunks), so their shorter side, s/(2c), sets the kernel's length."""
    forward = backward = 0.0
    for causal, share, length in ((True, 1.0 / c, s / c), (False, 1.0 - 1.0 / c, s / (2 * c))):
        if share <= 0.0:
            continue
        forward += (
            share * executed / (rates.attention * _kernels.attention_efficiency(length, d_head, causal, False, kernel))
        )
        backward += (
            share
            * 2.5
            * executed
            / (rates.attention * _kernels.attention_efficiency(length, d_head, causal, True, kernel))
        )
    return forward, backward


def _output_layer_s(spec: RecipeSpec, layout: Layout, program: Program, rates: Rates) -> float:
    """The output layer (forward, data and weight gradients, in BF16) and the loss, per micro-batch."""
    tokens, h, vocab = layout.tokens_per_rank, spec.hidden_size, spec.padded_vocab_size / layout.tp
    logits = (
        gemm_s(tokens, h, vocab, rates.bf16, rates, ACTIVATION_BYTES)
        + gemm_s(tokens, vocab, h, rates.bf16, rates, ACTIVATION_BYTES)
        + gemm_s(h, tokens, vocab, rates.bf16, rates, ACTIVATION_BYTES)
    )
    per_logit = FUSED_CROSS_ENTROPY_BYTES_PER_LOGIT if program.fused_cross_entropy else CROSS_ENTROPY_BYTES_PER_LOGIT
    return logits + tokens * vocab * per_logit / rates.hbm


def _p2p_s(spec: RecipeSpec, layout: Layout, program: Program, gpu: GPU, rates: Rates, chunk_s: float) -> float:
    """Exposed pipeline point-to-point time per step: activations forward and gradients backward at every chunk
    boundary. With `overlap_p2p_comm` a transfer hides behind the next chunk's compute; the warm-up and cool-down
    transfers stay exposed either way."""
    if layout.pp == 1:
        return 0.0
    nbytes = layout.tokens_per_rank * spec.hidden_size * ACTIVATION_BYTES / layout.tp
    link = group_bandwidth_gb_s(gpu, 2, layout.tp * layout.cp * layout.dp, layout.gpus_per_node)
    one = rates.send_s(nbytes, link)
    steady = 2 * layout.vp * layout.microbatches
    ramps = 2 * (layout.pp - 1)
    if program.pp_comm_overlap:
        return steady * max(0.0, one - chunk_s) + ramps * one
    return (steady + ramps) * one


def _data_parallel_s(
    spec: RecipeSpec, layout: Layout, program: Program, gpu: GPU, rates: Rates, chunk_b: float, chunk_f: float
) -> tuple[float, float]:
    """Exposed gradient reduce and parameter gather per step, in the bytes the program moves (`Program.
    gradient_bytes`, `param_gather_bytes`).

    With overlap, Megatron-Core reduces a bucket as soon as the last micro-batch's backward has produced it, so the
    reduction of a model chunk hides behind that chunk's own last backward (`chunk_b`). With the interleaved
    schedule each of the v chunks starts its reduction when its final backward ends, and these ends are p chunk
    backwards apart (the last group of p micro-batches goes through the chunks in turn), so the reductions of the
    later chunks also hide behind the backward of the earlier ones; the parameter gathers mirror this in the
    forward (`param_sync_func` launches the next chunk's gather at the first forward of the current one)."""
    groups = [(layout.params_per_rank, layout.dp, layout.tp * layout.cp)]
    if layout.expert_params_per_rank:  # the routed experts reduce and gather over their expert-data-parallel group
        groups = [(layout.dense_params_per_rank, layout.dp, layout.tp * layout.cp)]
        groups.append((layout.expert_params_per_rank, layout.expert_data_parallel, layout.ep * layout.etp))
    reduce = gather = 0.0
    for params, d, stride in groups:
        link = group_bandwidth_gb_s(gpu, d, stride, layout.gpus_per_node)
        if spec.distributed_optimizer:
            reduce += rates.gather_s(params * program.gradient_bytes, d, link)
            gather += rates.gather_s(params * program.param_gather_bytes, d, link)
        else:
            reduce += rates.allreduce_s(params * program.gradient_bytes, d, link)
    if program.overlap_grad_reduce:
        reduce = _exposed_behind_chunks(reduce, layout, chunk_b)
    if program.overlap_param_gather:
        gather = _exposed_behind_chunks(gather, layout, chunk_f)
    return reduce, gather


def _exposed_behind_chunks(total: float, layout: Layout, chunk: float) -> float:
    """What is left of `total` seconds of communication, split evenly over the v model chunks, each part starting
    when its chunk is done (p chunk passes apart) and the last one hidden behind one chunk pass."""
    v = layout.vp
    spacing = layout.pp * chunk
    tail = max(total / v, total - (v - 1) * spacing)
    return max(0.0, tail - chunk)


def estimate_throughput(
    spec: RecipeSpec, cluster: Cluster, *, stack: Optional[str] = None, constants: Optional[ModelConstants] = None
) -> Throughput:
    """Step time, tokens/s, MFU and a breakdown for `spec` trained on `cluster`, running the program that `stack`
    (`stack.resolve_stack`; default: the NeMo container with Transformer Engine) makes of it, with `constants`
    (default: the shipped ones, or a calibration's within `using_constants`).

    The data-parallel size comes from the cluster (`cluster.world_size / (TP x PP x CP)`), not from the recipe's
    default node count. Raises InvalidInputError (naming each field) for the plans `rules.STRUCTURAL_RULES`
    refuse, and for FP8 on a GPU or a stack without it.
    """
    assumptions: list[str] = []
    gpu, layout, program = _checked_plan(spec, cluster, stack, assumptions)
    step, breakdown = _timed(spec, gpu, layout, program, constants, assumptions)
    return _throughput(spec, layout, gpu, step, breakdown, assumptions)


def step_time(
    spec: RecipeSpec,
    cluster: Cluster,
    *,
    stack: Optional[str] = None,
    known: Optional[tuple[Layout, Program]] = None,
    shared: Optional[dict[tuple, Any]] = None,
) -> tuple[float, dict[str, float]]:
    """`estimate_throughput`'s step seconds and breakdown (what a search ranks); `known`: its (layout, program), of a
    plan whose rules report no error (a search's valid plan), so their refusals are not looked for again. `shared`: a
    dict that one search (one shape and precision, cluster, stack and constants) passes to each plan it times, in
    which a layer's times are kept for the plans with its TP, CP, micro batch and program, and the rates and the
    output layer's time for theirs."""
    notes: list[str] = []
    return _timed(spec, *_checked_plan(spec, cluster, stack, notes, known), None, notes, shared)


def _timed(
    spec: RecipeSpec,
    gpu: GPU,
    layout: Layout,
    program: Program,
    k: Optional[ModelConstants],
    notes: list[str],
    shared: Optional[dict[tuple, Any]] = None,
) -> tuple[float, dict[str, float]]:
    constants = k if k is not None else active_constants()
    # The plans of one search share their GPU, precision and constants (`step_time`), so their rates.
    rates = _kept(shared, ("rates",), lambda: Rates.of(gpu, spec.fp8, constants))
    if rates.derate < 1.0:
        notes.append(
            f"{gpu.name} sustains {rates.derate:.2f} of its rated tensor-core peak (board power {gpu.tdp_w:g} W for "
            f"{gpu.bf16_tflops:g} BF16 TFLOP/s, against the {POWER_REFERENCE.name}'s {POWER_REFERENCE.tdp_w:g} W for "
            f"{POWER_REFERENCE.bf16_tflops:g}: a power-limited clock)"
        )
    groups = layout.architecture.groups
    if len(groups) == 1:
        one = _layer(spec, layout, program, gpu, rates, constants, shared)
        layers = {groups[0]: one}
    else:
        layers = {g: _layer(spec, layout, program, gpu, rates, constants, shared, g) for g in groups}
    return _step_s(spec, layout, program, gpu, rates, stages(spec, layout, layers), constants, shared)


def _kept(shared: Optional[dict[tuple, Any]], key: tuple, make: Callable[[], Any]) -> Any:
    """`make()`, kept in one search's `shared` (see `step_time`) under `key` for its other plans."""
    if shared is None:
        return make()
    found = shared.get(key)
    if found is None:
        found = shared[key] = make()
    return found


def _checked_plan(
    spec: RecipeSpec, cluster: Cluster, stack: Optional[str], assumptions: list[str], known: Optional[tuple] = None
) -> tuple[GPU, Layout, Program]:
    """The GPU, layout and program of a plan the model can time; the refusals `estimate_throughput` documents."""
    gpu = _resolve_gpu(spec, cluster, assumptions)
    layout = known[0] if known else Layout.of(spec, cluster)
    context = f"throughput of {spec.name!r} on {cluster.world_size} GPUs"
    if not known:  # a known plan is a valid one (`step_time`): its rules ran
        raise_if_unstructured(spec, layout, context)
    program = known[1] if known else program_for(spec, gpu, stack, layout.interleaved)
    if spec.fp8 and not (gpu.supports_fp8 and program.stack.transformer_engine):
        raise InvalidInputError(
            [
                Problem(
                    "precision",
                    spec.precision,
                    f"FP8 needs Transformer Engine and FP8 tensor cores ({gpu.name}, stack '{program.stack.name}').",
                    "use precision='bf16', or an FP8-capable GPU with Transformer Engine.",
                )
            ],
            context=context,
        )
    assumptions += program.notes
    return gpu, layout, program


def _step_s(
    spec: RecipeSpec,
    layout: Layout,
    program: Program,
    gpu: GPU,
    rates: Rates,
    stages: tuple[Stage, Stage, Stage],
    k: ModelConstants,
    shared: Optional[dict[tuple, Any]] = None,
) -> tuple[float, dict[str, float]]:
    """Seconds of one step (pipeline schedule, exposed communication, optimizer) and their breakdown by kind;
    `stages`: `_stages`' first, slowest middle and last pipeline stage; `shared`: see `step_time`."""
    # The output layer reads of a plan its tokens per GPU and TP (which pads the vocabulary) and the program's loss.
    output_key = ("output layer", layout.tokens_per_rank, layout.tp, program.fused_cross_entropy)
    output_s = _kept(shared, output_key, lambda: _output_layer_s(spec, layout, program, rates))
    # Each multi-token prediction layer (on the last stage, `_stages`) runs the output layer and the loss once more.
    logits = (1 + layout.architecture.mtp_layers) * output_s
    m, p, v = layout.microbatches, layout.pp, layout.vp

    # Each stage's layers: the first's, the middle's (the most loaded stage's count) and the last's with the logits.
    times = [n * (layer.forward + layer.backward) for n, layer in stages]
    last = times[2] + logits
    slowest = max(max(times[:2]), last)  # every stage runs every micro-batch at this pace
    layer = stages[2][1] if last >= slowest else stages[times.index(max(times[:2]))][1]
    per_layer = layer.forward + layer.backward
    compute = m * slowest
    bubble = (p - 1) / v * (max(times) + logits / p)
    chunk_s = layout.layers_per_chunk * min(layer.forward, layer.backward)
    p2p = _p2p_s(spec, layout, program, gpu, rates, chunk_s)
    chunk_b = layout.layers_per_chunk * layer.backward
    chunk_f = layout.layers_per_chunk * layer.forward
    dp_reduce, dp_gather = _data_parallel_s(spec, layout, program, gpu, rates, chunk_b, chunk_f)
    # Optimizer step: Adam on the local shard, and the gradient buffer reset.
    params = layout.params_per_rank
    updated = params / layout.dp if spec.distributed_optimizer else params
    if layout.expert_params_per_rank and spec.distributed_optimizer:  # the experts' shards: expert-data-parallel
        updated = layout.dense_params_per_rank / layout.dp + layout.expert_params_per_rank / layout.expert_data_parallel
    optimizer = (updated * ADAM_BYTES_PER_PARAM + params * GRAD_BUFFER_BYTES_PER_PARAM) / rates.hbm
    step = compute + bubble + p2p + dp_reduce + dp_gather + optimizer + k.step_overhead

    # The compute of the slowest stage, by kind of work (the idle time of a stage waiting for a slower one is
    # counted where it arises, in the kind that makes the slow stage slow).
    stage_layers = m * (slowest - (logits if last >= slowest else 0.0)) / per_layer
    breakdown = {
        "dense_matmul": stage_layers * (layer.dense_f + layer.dense_b),
        "attention": stage_layers * (layer.attention_f + layer.attention_b),
        "memory_bound": stage_layers * (layer.memory_f + layer.memory_b),
        "recompute": stage_layers * layer.recompute,
        "tp_comm_exposed": stage_layers * (layer.tp_f + layer.tp_b),
        "cp_comm_exposed": stage_layers * (layer.cp_f + layer.cp_b),
        "output_layer": m * logits if last >= slowest else 0.0,
        "pp_bubble": bubble,
        "pp_p2p": p2p,
        "dp_reduce_exposed": dp_reduce,
        "dp_gather_exposed": dp_gather,
        "optimizer": optimizer,
        "step_overhead": k.step_overhead,
    }
    if layout.architecture.moe is not None:  # the routed experts' GEMMs and their exposed all-to-all, apart
        e = layer.experts
        breakdown["expert_matmul"] = stage_layers * (e.matmul_f + e.matmul_b)
        breakdown["memory_bound"] += stage_layers * (e.memory_f + e.memory_b)
        breakdown["ep_comm_exposed"] = stage_layers * (e.dispatch_f + e.dispatch_b + e.latency)
    return step, breakdown


def _throughput(
    spec: RecipeSpec, layout: Layout, gpu: GPU, step: float, breakdown: dict[str, float], assumptions: list[str]
) -> Throughput:
    """Tokens/s, FLOP rates and utilisation of a step of `step` seconds."""
    tokens_per_step = spec.global_batch_size * spec.seq_length
    tokens_per_s = tokens_per_step / step
    per_gpu = tokens_per_s / layout.world
    model_tflops = per_gpu * _flops.model_flops_per_token(spec) / 1e12
    hardware_tflops = per_gpu * _flops.hardware_flops_per_token(spec) / 1e12
    fp8 = spec.fp8
    if fp8:
        assumptions.append("FP8 for the linear layers of the transformer blocks; attention and output layer in BF16")
    if layout.sequence_parallel:
        assumptions.append("sequence parallelism on (TP > 1)")
    return Throughput(
        step_time_s=step,
        tokens_per_step=tokens_per_step,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=per_gpu,
        model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=hardware_tflops,
        flops_convention=FLOPS_CONVENTION,
        mfu=model_tflops / gpu.bf16_tflops,
        mfu_fp8=model_tflops / gpu.fp8_tflops if fp8 and gpu.fp8_tflops else None,
        hfu=hardware_tflops / gpu.bf16_tflops,
        gpu=gpu.name,
        num_gpus=layout.world,
        data_parallel_size=layout.dp,
        micro_batches=layout.microbatches,
        breakdown_s=breakdown,
        assumptions=tuple(assumptions),
    )


def time_to_train(throughput: Throughput, tokens: float) -> dict[str, float]:
    """Days and GPU-hours to train on `tokens` tokens at `throughput` (`estimate_throughput`'s result)."""
    if tokens is None or isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not tokens > 0:
        raise InvalidInputError(
            [Problem("tokens", tokens, "must be a positive number of tokens.", "give a token budget such as 300e9.")]
        )
    seconds = tokens / throughput.tokens_per_s
    return {
        "tokens": float(tokens),
        "seconds": seconds,
        "days": seconds / 86400.0,
        "gpu_hours": seconds * throughput.num_gpus / 3600.0,
    }
