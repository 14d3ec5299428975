"""Step time, tokens/s, MFU and time-to-train of a GPT pretraining plan on a cluster.

Standard library only. An analytical model of one Megatron training step, built from the formulas of
`perf-model.md` (section numbers below refer to it):

- **Compute.** Every GEMM of a layer (forward, data and weight gradients; 2.2), recomputation included, at the GPU's
  dense peak for the precision times an achievable matrix efficiency, plus its operands' HBM traffic (a smooth
  roofline, so small GEMMs are slower per FLOP). FP8 (Transformer Engine) runs the linear layers of the transformer blocks in
  FP8; attention and the output layer stay in BF16 (as in Megatron-Core and NeMo unless FP8 attention is asked for).
  The attention core is a fused (flash) kernel: it skips the masked half of the causal score matrix and its backward
  recomputes the scores, so it executes `0.5 x (1 + 2.5)` times the forward attention FLOPs that the 72-formula counts
  three times (Dao 2023, FlashAttention-2, Sec. 3).
- **Memory-bound work.** Layer norms, bias-dropout-add, the activation function, FP8 casts, the cross-entropy over the
  vocabulary and the optimizer step move bytes at the achievable HBM bandwidth. Without sequence parallelism the
  norms and dropouts are replicated on every tensor-parallel rank (Korthikanti et al. 2022, Sec. 4.2.2).
- **Tensor parallelism** (2.6): `8·b·s·h·(t-1)/t` elements per layer and micro-batch (plus a forward's worth under
  full recomputation) over NVLink; sequence parallelism moves the same volume.
- **Pipeline** (2.5): 1F1B bubble `(p-1)/m`, interleaved `(p-1)/(v·m)`, of the stage time; the last stage also runs
  the output layer; point-to-point sends of `b·s·h/t` elements per boundary and micro-batch.
- **Data parallelism** (2.6): gradient reduce-scatter and parameter all-gather (distributed optimizer) or all-reduce,
  over NVLink when the group fits in a node and otherwise over the NICs of the group's GPUs; with overlap only what
  exceeds the backward (forward) of one micro-batch is exposed.
- **Context parallelism**: each rank holds `s/c` tokens; K/V chunks travel in a ring, hidden behind attention compute.
- **Optimizer**: Adam on the local (distributed-optimizer) shard and the gradient-buffer reset, at HBM bandwidth.

`stack=` names the software: "transformer-engine" (default; Megatron-Core + TE as NeMo 2 runs it) or
"megatron-legacy" (Megatron-LM of the 2021-22 papers: unfused softmax attention whose s x s tensors go through HBM,
no TP overlap). Global constants below, each with its source; there is no per-model or per-row adjustment.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.errors import InvalidRecipeError, Problem
from nemo_recipes.plan import flops as _flops
from nemo_recipes.plan.hardware import GPU, Cluster, get_gpu

# ---- global constants ----

# Fraction of the dense tensor-core peak that the math of a BF16/FP16 GEMM reaches, before its operand traffic (which
# `_gemm_s` adds): cuBLAS reaches 80-90 % of 312 TFLOP/s on large A100 GEMMs and about 75-80 % of 989 on H100 SXM.
# One value for every GPU; chosen once, globally, with benchmarks/planner_accuracy.py (0.75-0.80 fit equally well).
MATMUL_EFFICIENCY = 0.80
# FP8 GEMMs reach a smaller fraction of their doubled peak than BF16 ones (power and clock limits; H100 FP8 cuBLAS
# GEMMs reach about 1300 of 1979 TFLOP/s). Chosen once, globally, with the FP8 rows of calibration.csv.
FP8_MATMUL_EFFICIENCY = 0.65
# Fused (flash) attention reaches a smaller fraction of the peak than plain GEMMs: "FlashAttention-2 achieving only 35%
# utilization on the H100 GPU" (Shah et al. 2024, FlashAttention-3, abstract). Counted on the FLOPs it executes.
ATTENTION_EFFICIENCY = 0.35
# Fraction of the HBM bandwidth that streaming (element-wise) kernels reach: STREAM-like copies reach 80-90 %.
HBM_EFFICIENCY = 0.80
# Fraction of the link bandwidth that NCCL collectives reach as bus bandwidth for large messages (nccl-tests
# PERFORMANCE.md: all-reduce bus bandwidth of about 230-240 GB/s on A100 NVLink (300 GB/s per direction), 80 %).
COMM_EFFICIENCY = 0.80
# Fraction of the tensor-parallel communication hidden behind GEMMs when sequence parallelism is on: Transformer Engine
# splits the all-gather/reduce-scatter of SP into chunks overlapped with the neighbouring GEMM (userbuffers,
# `tp_comm_overlap`, on in NeMo 2's and Megatron-Core's performance configurations); the first and last chunks and
# the slowdown of GEMMs that share the GPU with NCCL stay exposed. Without SP, or on the legacy stack, nothing is
# overlapped. 0.8 is an estimate, checked against the TP > 1 rows of calibration.csv (0.6-1.0 fit about as well).
TP_OVERLAP_WITH_SP = 0.8

# Bytes moved per token and layer by the element-wise kernels of one forward pass, per unit of hidden size:
# layer norm in/out 2+2, bias-dropout-add reads two tensors and writes one plus a 1-byte mask 2+2+2+1, twice each
# (attention and MLP sides): 22 bytes x h. Counted from Megatron-Core's fused kernels (bias_dropout_add_fused,
# TE LayerNorm).
NORM_DROPOUT_BYTES_PER_HIDDEN = 22
# Activation function per element of the FFN width: GeLU reads and writes 2-byte values (4 bytes); SwiGLU reads two
# ffn-wide inputs and writes one (6 bytes).
ACTIVATION_BYTES_PER_FFN = {False: 4, True: 6}
# A backward element-wise kernel reads the saved input and the incoming gradient and writes a gradient: twice the
# forward traffic.
BACKWARD_BYTES_FACTOR = 2.0
# FP8 (Transformer Engine): every GEMM input in the forward and every output gradient in the backward is cast to FP8
# and transposed: read 2 bytes, write 1 + 1.
FP8_CAST_BYTES_PER_ELEMENT = 4
# Megatron-Core's (unfused) vocabulary-parallel cross entropy per logit, in fp32: cast up (read 2, write 4), max
# (read 4), subtract the max (4 + 4), exp (4 + 4), sum (4), normalise (4 + 4); backward: scale the saved softmax
# (4 + 4) and cast down (read 4, write 2). 52 bytes (megatron/core/tensor_parallel/cross_entropy.py).
CROSS_ENTROPY_BYTES_PER_LOGIT = 52
# Adam step per updated parameter (fp32 master weight, gradient, momentum, variance read = 16 bytes; master, momentum,
# variance written = 12; the BF16 copy written = 2; gradient norm read = 4), and zeroing the fp32 gradient buffer of
# every local parameter (4 bytes).
ADAM_BYTES_PER_PARAM = 34
GRAD_BUFFER_BYTES_PER_PARAM = 4
# Gradients are reduced in fp32 (NeMo 2 and Megatron-Core: grad_reduce_in_fp32 / accumulate_allreduce_grads_in_fp32
# for BF16); parameters are all-gathered in the 2-byte training dtype.
GRAD_REDUCE_BYTES = 4
PARAM_GATHER_BYTES = 2
ACTIVATION_BYTES = 2
# Unfused attention (Megatron-LM before Transformer Engine): per score element, forward: fused scale-mask-softmax reads
# and writes 2-byte values, dropout reads 2 and writes 2 plus a 1-byte mask (9 bytes); backward: dropout reads the
# gradient and mask and writes 2, softmax reads output and gradient and writes 2 (11 bytes).
SOFTMAX_DROPOUT_BYTES = (9, 11)

STACKS = {
    "transformer-engine": "Megatron-Core with Transformer Engine, as NeMo 2 runs it: fused (flash) attention, "
                          "TP communication overlapped with GEMMs under sequence parallelism",
    "megatron-legacy": "Megatron-LM of 2021-2022 (Narayanan et al. 2021, Korthikanti et al. 2022): unfused softmax "
                       "attention, no TP communication overlap",
}

FLOPS_CONVENTION = _flops.MODEL_FLOPS_CONVENTION


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
    mfu: float                    # model FLOP/s per GPU / dense BF16 peak
    mfu_fp8: Optional[float]      # against the dense FP8 peak, for FP8 plans
    hfu: float                    # hardware FLOP/s (recomputation included) / dense BF16 peak
    gpu: str
    num_gpus: int
    data_parallel_size: int
    micro_batches: int
    breakdown_s: dict[str, float] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["breakdown_s"] = dict(self.breakdown_s)
        out["assumptions"] = list(self.assumptions)
        return out


# ---- the model ----

@dataclass(frozen=True)
class _Layout:
    t: int
    p: int
    c: int
    d: int
    v: int
    b: int
    m: int
    world: int
    gpus_per_node: int


def _layout(spec: RecipeSpec, cluster: Cluster) -> _Layout:
    """Parallel layout of `spec` on `cluster`, or every reason it does not fit, in one InvalidRecipeError."""
    problems: list[Problem] = []
    t, p, c = spec.tensor_parallel, spec.pipeline_parallel, spec.context_parallel
    v = spec.virtual_pipeline or 1
    world = cluster.world_size
    model_parallel = t * p * c
    d = world // model_parallel if world % model_parallel == 0 else 0
    if d == 0:
        problems.append(Problem(
            "num_gpus", world, f"is not divisible by TP x PP x CP = {t} x {p} x {c} = {model_parallel}.",
            f"use a multiple of {model_parallel} GPUs, or change tensor_parallel/pipeline_parallel/context_parallel."))
    elif spec.global_batch_size % (spec.micro_batch_size * d):
        problems.append(Problem(
            "global_batch_size", spec.global_batch_size,
            f"is not divisible by micro_batch_size x DP = {spec.micro_batch_size} x {d}.",
            f"use a multiple of {spec.micro_batch_size * d}."))
    if spec.num_attention_heads % t:
        problems.append(Problem("num_attention_heads", spec.num_attention_heads,
                                f"is not divisible by tensor_parallel={t}.", "use a TP size that divides the heads."))
    if spec.num_attention_heads % spec.kv_groups:
        problems.append(Problem("num_query_groups", spec.num_query_groups,
                                f"does not divide num_attention_heads={spec.num_attention_heads}.",
                                "use a number of query groups that divides the heads."))
    elif spec.kv_groups % t and t % spec.kv_groups:
        problems.append(Problem("num_query_groups", spec.kv_groups,
                                f"and tensor_parallel={t} do not divide one another.",
                                "use a TP size that divides the query groups (or a multiple of them)."))
    if spec.hidden_size % spec.num_attention_heads:
        problems.append(Problem("hidden_size", spec.hidden_size,
                                f"is not divisible by num_attention_heads={spec.num_attention_heads}.",
                                "use a hidden size that is a multiple of the head count."))
    if p * v > spec.num_layers:
        problems.append(Problem("pipeline_parallel", p,
                                f"x virtual_pipeline={v} exceeds num_layers={spec.num_layers}.",
                                "use fewer pipeline stages or chunks than layers."))
    if v > 1 and p == 1:
        problems.append(Problem("virtual_pipeline", spec.virtual_pipeline,
                                "needs pipeline_parallel > 1.", "unset virtual_pipeline or use pipeline_parallel > 1."))
    if spec.seq_length % c:
        problems.append(Problem("context_parallel", c, f"does not divide seq_length={spec.seq_length}.",
                                "use a CP size that divides the sequence length."))
    if problems:
        raise InvalidRecipeError(problems, context=f"throughput of {spec.name!r} on {world} GPUs")
    m = spec.global_batch_size // (spec.micro_batch_size * d)
    return _Layout(t=t, p=p, c=c, d=d, v=v, b=spec.micro_batch_size, m=m, world=world,
                   gpus_per_node=cluster.gpus_per_node)


def _resolve_gpu(spec: RecipeSpec, cluster: Cluster, assumptions: list[str]) -> GPU:
    if cluster.gpu is not None:
        gpu = cluster.gpu
    else:
        gpu = get_gpu(spec.default_gpu)
        assumptions.append(f"cluster names no GPU: assumed the recipe's default GPU {gpu.name}")
    if spec.precision == "fp8" and not gpu.supports_fp8:
        raise InvalidRecipeError([Problem("precision", "fp8", f"{gpu.name} has no FP8 tensor cores.",
                                          "use precision='bf16' on this GPU, or an FP8-capable GPU (H100 or newer).")],
                                 context=f"throughput of {spec.name!r}")
    return gpu


def _gemm_s(m: float, k: float, n: float, rate: float, hbm: float, operand_bytes: int) -> float:
    """Time of an (m x k) @ (k x n) GEMM: its math at `rate` plus its operands and 2-byte output through HBM.

    A smooth roofline (math and traffic added, not overlapped): a GEMM whose arithmetic intensity is a few times the
    GPU's ridge point loses a visible fraction of its speed, which is why larger models reach a higher MFU (Megatron-LM
    README: "larger GEMMs have higher arithmetic intensity and are consequently more efficient")."""
    return 2.0 * m * k * n / rate + (operand_bytes * (m * k + k * n) + ACTIVATION_BYTES * m * n) / hbm


def _allreduce_s(nbytes: float, n: int, bus_gb_s: float) -> float:
    return 2.0 * (n - 1) / n * nbytes / (bus_gb_s * 1e9 * COMM_EFFICIENCY) if n > 1 else 0.0


def _gather_s(nbytes: float, n: int, bus_gb_s: float) -> float:
    """Reduce-scatter or all-gather of a buffer of `nbytes` per rank (nccl-tests convention)."""
    return (n - 1) / n * nbytes / (bus_gb_s * 1e9 * COMM_EFFICIENCY) if n > 1 else 0.0


def _group_bandwidth_gb_s(gpu: GPU, group: int, stride: int, gpus_per_node: int) -> float:
    """Bus bandwidth per GPU of a collective over `group` ranks spaced `stride` ranks apart.

    Inside one NVLink domain it is NVLink. Across nodes NCCL's rings leave every node once per ring, one ring per NIC
    that the group owns on the node: the group's k GPUs per node bring k NICs, so the bus bandwidth is k times a
    NIC's (capped by NVLink)."""
    # An HGX/DGX baseboard links 8 GPUs; a larger NVLink domain (GB200 NVL72) is a rack that spans nodes, while a
    # smaller node ends the domain at the node.
    domain = gpu.nvlink_domain if gpu.nvlink_domain > 8 else min(gpu.nvlink_domain, gpus_per_node)
    if group * stride <= domain:
        return gpu.nvlink_gb_s
    per_node = max(1, min(group, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return min(gpu.nvlink_gb_s, per_node * gpu.network_gb_s)


def _params_per_gpu(spec: RecipeSpec, lay: _Layout) -> float:
    """Parameters held by the most loaded GPU: its stage's layers and the embedding (perf-model.md 2.1)."""
    total = spec.num_parameters
    vocab_params = spec.padded_vocab_size * spec.hidden_size
    embeddings = vocab_params * (1 if spec.share_embeddings else 2)
    layers = total - embeddings
    first_stage_embeddings = vocab_params if lay.p > 1 else embeddings
    return (layers / lay.p + first_stage_embeddings) / lay.t


def estimate_throughput(spec: RecipeSpec, cluster: Cluster, *, stack: str = "transformer-engine") -> Throughput:
    """Step time, tokens/s, MFU and a breakdown for `spec` trained on `cluster`.

    The data-parallel size comes from the cluster (`cluster.world_size / (TP x PP x CP)`), not from the recipe's
    default node count. Raises InvalidRecipeError (naming each field) when the plan cannot be laid out on the cluster.
    """
    assumptions: list[str] = []
    if stack not in STACKS:
        raise InvalidRecipeError([Problem("stack", stack, "is not a software stack the planner models.",
                                          f"use one of: {', '.join(STACKS)}.")])
    gpu = _resolve_gpu(spec, cluster, assumptions)
    assumptions.append(f"software stack: {STACKS[stack]}")
    lay = _layout(spec, cluster)
    t, p, c, d, v, b, m = lay.t, lay.p, lay.c, lay.d, lay.v, lay.b, lay.m
    h, s = spec.hidden_size, spec.seq_length
    sp = spec.sequence_parallel_enabled and t > 1
    fp8 = spec.precision == "fp8"
    bf16_rate = gpu.bf16_tflops * 1e12 * MATMUL_EFFICIENCY
    dense_rate = gpu.fp8_tflops * 1e12 * FP8_MATMUL_EFFICIENCY if fp8 else bf16_rate
    attention_rate = gpu.bf16_tflops * 1e12 * ATTENTION_EFFICIENCY
    hbm = gpu.hbm_tb_s * 1e12 * HBM_EFFICIENCY

    tokens = b * s / c                     # tokens of one micro-batch that one GPU of a CP group holds
    per_token = _flops.forward_flops_per_token(spec)
    layers = spec.num_layers

    # One transformer layer, one micro-batch: its GEMMs (per GPU), forward and backward.
    d_head = h // spec.num_attention_heads
    q, kv = spec.num_attention_heads * d_head, spec.kv_groups * d_head
    mlp_in = spec.ffn_hidden_size * (2 if spec.gated_linear_unit else 1)
    gemms = [(h, (q + 2 * kv) / t), (q / t, h), (h, mlp_in / t), (spec.ffn_hidden_size / t, h)]
    operand = 1 if fp8 else ACTIVATION_BYTES
    dense_f = sum(_gemm_s(tokens, k, n, dense_rate, hbm, operand) for k, n in gemms)
    dense_b = sum(_gemm_s(tokens, n, k, dense_rate, hbm, operand) + _gemm_s(k, tokens, n, dense_rate, hbm, operand)
                  for k, n in gemms)
    attention_flops = per_token.attention / layers * tokens / t
    if stack == "transformer-engine":
        # Flash attention executes half the (causal) score matrix; its backward recomputes the scores.
        attention_f = 0.5 * attention_flops / attention_rate
        attention_b = 2.5 * attention_f
    else:
        # Unfused: per head, batched GEMMs over the whole s x s matrix (scores = Q K^T, context = P V; backward two
        # each), whose s x s operand goes through HBM, and softmax and dropout over the s x s values.
        heads = b * spec.num_attention_heads / t
        sq, sk = s / c, s
        qk = _gemm_s(sq, d_head, sk, bf16_rate, hbm, ACTIVATION_BYTES)     # Q K^T, and dP = dO V^T
        pv = _gemm_s(sq, sk, d_head, bf16_rate, hbm, ACTIVATION_BYTES)     # P V, and dQ = dS K
        pt = _gemm_s(sk, sq, d_head, bf16_rate, hbm, ACTIVATION_BYTES)     # dV = P^T dO, and dK = dS^T Q
        scores = heads * sq * sk
        attention_f = heads * (qk + pv) + scores * SOFTMAX_DROPOUT_BYTES[0] / hbm
        attention_b = heads * (qk + pv + 2 * pt) + scores * SOFTMAX_DROPOUT_BYTES[1] / hbm
    ffn = spec.ffn_hidden_size
    replicated = NORM_DROPOUT_BYTES_PER_HIDDEN * h / (t if sp else 1)
    split = ACTIVATION_BYTES_PER_FFN[spec.gated_linear_unit] * ffn / t
    if fp8:
        split += FP8_CAST_BYTES_PER_ELEMENT * (h + q + h + ffn) / t            # forward GEMM inputs
        split += FP8_CAST_BYTES_PER_ELEMENT * (q + 2 * kv + h + mlp_in + h) / t / BACKWARD_BYTES_FACTOR
    memory_f = tokens * (replicated + split) / hbm
    memory_b = BACKWARD_BYTES_FACTOR * memory_f

    # Tensor parallelism: two all-reduces (or reduce-scatter + all-gather pairs) forward, two backward.
    tp_bytes = tokens * h * ACTIVATION_BYTES
    tp_f = 2 * _allreduce_s(tp_bytes, t, _group_bandwidth_gb_s(gpu, t, 1, lay.gpus_per_node))
    tp_f *= 1.0 - (TP_OVERLAP_WITH_SP if sp and stack == "transformer-engine" else 0.0)
    tp_b = tp_f

    # Context parallelism: K and V chunks of s/c tokens go round the ring (c-1 hops) forward; the backward sends
    # them again with their gradients. Hidden behind the attention compute of the same layer.
    cp_f = cp_b = 0.0
    if c > 1:
        kv_bytes = tokens * 2 * spec.kv_groups * d_head / t * ACTIVATION_BYTES
        link = _group_bandwidth_gb_s(gpu, c, t, lay.gpus_per_node) * 1e9 * COMM_EFFICIENCY
        cp_f = max(0.0, (c - 1) * kv_bytes / link - attention_f)
        cp_b = max(0.0, 2 * (c - 1) * kv_bytes / link - attention_b)

    layer_f = dense_f + attention_f + memory_f + tp_f + cp_f
    recompute = 0.0
    if spec.recompute == "full":
        recompute = _flops.recompute_fraction(spec) * layer_f
    elif spec.recompute == "selective":
        recompute = attention_f
    layer_b = dense_b + attention_b + memory_b + tp_b + cp_b + recompute

    # The output layer and the loss, on the last stage.
    vocab = spec.padded_vocab_size / t
    logits = (_gemm_s(tokens, h, vocab, bf16_rate, hbm, ACTIVATION_BYTES)
              + _gemm_s(tokens, vocab, h, bf16_rate, hbm, ACTIVATION_BYTES)
              + _gemm_s(h, tokens, vocab, bf16_rate, hbm, ACTIVATION_BYTES))
    logits += tokens * spec.padded_vocab_size / t * CROSS_ENTROPY_BYTES_PER_LOGIT / hbm

    layers_per_stage = layers / p
    stage = layers_per_stage * (layer_f + layer_b)
    slowest = stage + logits                         # the last stage (or the only one)
    compute = m * slowest
    bubble = (p - 1) / v * (stage + logits / p)

    # Pipeline point-to-point: activations forward and gradients backward at every chunk boundary.
    p2p = 0.0
    if p > 1:
        p2p_bytes = tokens * h * ACTIVATION_BYTES / t
        link = _group_bandwidth_gb_s(gpu, 2, t * c * d, lay.gpus_per_node)
        p2p = (2 * v * m + 2 * (p - 1)) * p2p_bytes / (link * 1e9 * COMM_EFFICIENCY)

    # Data parallelism: one gradient synchronisation per step.
    params = _params_per_gpu(spec, lay)
    dp_link = _group_bandwidth_gb_s(gpu, d, t * c, lay.gpus_per_node)
    window_b = layers_per_stage * layer_b / v
    window_f = layers_per_stage * layer_f / v
    if spec.distributed_optimizer:
        reduce = _gather_s(params * GRAD_REDUCE_BYTES, d, dp_link)
        gather = _gather_s(params * PARAM_GATHER_BYTES, d, dp_link)
    else:
        reduce = _allreduce_s(params * GRAD_REDUCE_BYTES, d, dp_link)
        gather = 0.0
    dp_reduce = max(0.0, reduce - window_b) if spec.overlap_grad_reduce else reduce
    dp_gather = max(0.0, gather - window_f) if spec.overlap_param_gather else gather

    # Optimizer step: Adam on the local shard, and the gradient buffer reset.
    updated = params / d if spec.distributed_optimizer else params
    optimizer = (updated * ADAM_BYTES_PER_PARAM + params * GRAD_BUFFER_BYTES_PER_PARAM) / hbm

    step = compute + bubble + p2p + dp_reduce + dp_gather + optimizer

    mb_layers = m * layers_per_stage
    breakdown = {
        "dense_matmul": mb_layers * (dense_f + dense_b),
        "attention": mb_layers * (attention_f + attention_b),
        "memory_bound": mb_layers * (memory_f + memory_b),
        "recompute": mb_layers * recompute,
        "tp_comm_exposed": mb_layers * (tp_f + tp_b),
        "cp_comm_exposed": mb_layers * (cp_f + cp_b),
        "output_layer": m * logits,
        "pp_bubble": bubble,
        "pp_p2p": p2p,
        "dp_reduce_exposed": dp_reduce,
        "dp_gather_exposed": dp_gather,
        "optimizer": optimizer,
    }

    tokens_per_step = spec.global_batch_size * s
    tokens_per_s = tokens_per_step / step
    per_gpu = tokens_per_s / lay.world
    model_tflops = per_gpu * per_token.model / 1e12
    hardware_tflops = per_gpu * _flops.hardware_flops_per_token(spec) / 1e12
    if fp8:
        assumptions.append("FP8 for the linear layers of the transformer blocks; attention and output layer in BF16")
    if sp:
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
        num_gpus=lay.world,
        data_parallel_size=d,
        micro_batches=m,
        breakdown_s=breakdown,
        assumptions=tuple(assumptions),
    )


def time_to_train(throughput_or_spec: "Throughput | RecipeSpec", tokens: Optional[float] = None,
                  cluster: Optional[Cluster] = None) -> dict[str, float]:
    """Days and GPU-hours to train on `tokens` tokens (default: the recipe's `train_tokens`).

    Accepts a Throughput, or a RecipeSpec and a Cluster (`time_to_train(spec, cluster=c)` or
    `time_to_train(spec, 1e12, c)`)."""
    if isinstance(throughput_or_spec, RecipeSpec):
        spec = throughput_or_spec
        if cluster is None:
            raise InvalidRecipeError([Problem("cluster", None, "is needed to time a recipe.",
                                              "pass cluster=Cluster.of(nodes, gpus_per_node, gpu).")])
        result = estimate_throughput(spec, cluster)
        if tokens is None:
            tokens = spec.train_tokens
    else:
        result = throughput_or_spec
    if tokens is None or isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not tokens > 0:
        raise InvalidRecipeError([Problem("tokens", tokens, "must be a positive number of tokens.",
                                          "give a token budget such as 300e9.")])
    seconds = tokens / result.tokens_per_s
    return {"tokens": float(tokens), "seconds": seconds, "days": seconds / 86400.0,
            "gpu_hours": seconds * result.num_gpus / 3600.0}
