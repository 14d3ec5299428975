"""How close a GEMM and a fused attention kernel come to the tensor-core peak, by their shape.

Standard library only, no tables computed at import: the published figures are literals and every lookup
interpolates them when asked.

**Attention** (`attention_efficiency`). Fused attention's speed grows with the sequence length (more tiles per head to
hide each tile's softmax and pipeline fill) and with the head dimension (more math per byte of K and V), and a causal
mask costs most on short sequences (the diagonal tiles are half empty and the work per query row is unbalanced).
The tables are the two kernels Transformer Engine can run (`stack.Stack.attention_kernel`): cuDNN's (its
`FusedAttention` backend, preferred on Hopper and newer) and Tri Dao's FlashAttention-2, BF16, H100 SXM5, as
published in the FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608): Fig. 5, "Attention forward speed
(FP16/BF16) on H100 GPU", with and without causal mask, head dimensions 64, 128 and 256; Fig. 6, "Attention backward
speed (FP16/BF16) on H100 GPU", without causal mask, head dimensions 64 and 128. Each point holds batch x sequence
at 16k tokens with hidden size 2048. The paper counts FLOPs as FlashAttention does: 4·s²·d per head forward, half
that with a causal mask, 2.5x the forward for the backward (Dao 2023, FlashAttention-2, Sec. 4.1), which is how
`throughput` counts the FLOPs a fused kernel executes. The efficiency is the published TFLOP/s over the H100's dense
BF16 peak (989).

Two values are derived, not read: the causal backward is the non-causal backward times the forward's
causal/non-causal ratio at the same length and head dimension (the same diagonal tiles are half empty in both
passes; the paper plots no causal backward), and head dimensions above 128 take the backward of 128 (no published
backward at 256). Between the published points the efficiency is interpolated linearly in log2(sequence) and in
head dimension, and held at the end points outside them. The same fractions of the peak serve every GPU: on A100,
FlashAttention-2 reaches 50-73 % of the peak (Dao 2023, abstract), the range of cuDNN's fractions on H100. No
per-length Blackwell figures are published; the caller applies Blackwell's power derating (`throughput.
_power_derate`: B200 0.86, GB200 0.88), which agrees with the one published Blackwell point: FlashAttention-4
reaches 1613 TFLOP/s on B200 in BF16, "up to 1.3x" cuDNN 9.13 (the FlashAttention-4 paper, 2026, abstract), so
cuDNN reaches at least 1240 of 2250 (0.55), against its best 617 of 989 (0.62) on H100: 0.89 of the Hopper
fraction.

**GEMMs** (`gemm_efficiency`). A GEMM runs as output tiles, one thread block per tile, a wave of tiles per pass over
the GPU's streaming multiprocessors. Two shape effects follow (NVIDIA, "Matrix Multiplication Background User's
Guide", Deep Learning Performance Documentation, sections "Tile quantization" and "Wave quantization"):

- Wave quantisation: `tiles = ceil(M/Tm)·ceil(N/Tn)` tiles take `ceil(tiles/SMs)` waves, so the useful fraction is
  `tiles / (ceil(tiles/SMs)·SMs)`; cuBLAS's heuristics pick the tile orientation (128x256 or 256x128, the largest
  Hopper/Blackwell tile of CUTLASS's sm90 and sm100 kernels and the one the guide uses for A100), so the better of
  the two counts.
- Depth: every tile pays a fixed cost besides its K loop (the pipeline fill before the first tensor-core
  instruction and the epilogue that stores the tile), worth about two K-blocks of the main loop. A K-block is
  128 bytes of K: 64 elements in BF16, 128 in FP8 (CUTLASS sm90 tile shapes 128x256x64 for 16-bit inputs and
  128x256x128 for FP8). The depth fraction is `K / (K + 2·K-block)`. FP8's fixed cost is twice as large in K: an
  FP8 GEMM's speed-up over BF16 grows with its size, as NVIDIA reports for cuBLAS 12.9 on Hopper (block-scaled
  FP8: about 1.75x BF16 on large matmuls, at least 1.25x on most other shapes; NVIDIA technical blog "Boosting
  Matrix Multiplication Speed and Flexibility with NVIDIA cuBLAS 12.9", 2025).

The product multiplies the ceiling efficiencies of `throughput.ModelConstants` (`matmul`, `fp8_matmul`: what the
largest GEMMs reach). Operand traffic through HBM is added by the caller (`throughput._gemm_s`).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

# The sequence lengths of the published points (FlashAttention-3 paper, Figs. 5 and 6).
ATTENTION_SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384)
# The dense BF16 peak the published TFLOP/s are divided by: the H100 SXM5 of the benchmarks.
ATTENTION_REFERENCE_TFLOPS = 989.0
# BF16, H100 SXM5, TFLOP/s at ATTENTION_SEQUENCES: kernel -> (pass, causal) -> {head dim: figures}. "cudnn" is the
# red bars of the paper's figures, "flash-attn-2" the orange ones (FlashAttention-2, Tri Dao's flash-attn package).
ATTENTION_TFLOPS: dict[str, dict[tuple[str, bool], dict[int, tuple[float, ...]]]] = {
    "cudnn": {
        ("forward", False): {
            64: (335, 373, 395, 408, 412, 413),
            128: (497, 574, 617, 609, 600, 595),
            256: (470, 546, 580, 581, 580, 581),
        },
        ("forward", True): {
            64: (225, 288, 334, 363, 379, 388),
            128: (315, 410, 484, 518, 529, 539),
            256: (308, 391, 450, 483, 497, 509),
        },
        ("backward", False): {
            64: (266, 348, 395, 417, 432, 433),
            128: (305, 408, 465, 499, 518, 516),
        },
    },
    "flash-attn-2": {
        ("forward", False): {
            64: (282, 306, 318, 321, 322, 324),
            128: (309, 350, 362, 368, 370, 370),
            256: (275, 313, 321, 323, 324, 326),
        },
        ("forward", True): {
            64: (180, 229, 262, 284, 295, 299),
            128: (191, 260, 298, 319, 333, 335),
            256: (208, 251, 278, 293, 297, 298),
        },
        ("backward", False): {
            64: (198, 238, 264, 279, 287, 291),
            128: (214, 260, 291, 310, 318, 322),
        },
    },
}

# Output tile (elements) and the K-block of one main-loop stage (elements) by operand bytes; see the docstring.
GEMM_TILE = (128, 256)
GEMM_K_BLOCK = {2: 64, 1: 128}
GEMM_FIXED_K_BLOCKS = 2


def _between(points: tuple[float, ...], values: tuple[float, ...], x: float) -> float:
    """Linear interpolation of `values` at `x` over increasing `points`, held at the ends."""
    if x <= points[0]:
        return values[0]
    for i in range(1, len(points)):
        if x <= points[i]:
            x0, x1, y0, y1 = points[i - 1], points[i], values[i - 1], values[i]
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return values[-1]


def _published(kernel: str, kind: str, causal: bool, seq: float, head_dim: float) -> float:
    """Published TFLOP/s of one (kernel, pass, mask) series at `seq`, interpolated in log2(seq) and in head
    dimension."""
    by_dim = ATTENTION_TFLOPS[kernel][(kind, causal)]
    dims = tuple(sorted(by_dim))
    x = math.log2(max(seq, 1.0))
    logs = tuple(math.log2(s) for s in ATTENTION_SEQUENCES)
    at_dims = tuple(_between(logs, tuple(float(v) for v in by_dim[d]), x) for d in dims)
    return _between(tuple(float(d) for d in dims), at_dims, head_dim)


@functools.lru_cache(maxsize=1024, typed=True)  # pure, and asked the same few shapes in a plan search
def attention_efficiency(seq: float, head_dim: float, causal: bool, backward: bool, kernel: str = "cudnn") -> float:
    """Fraction of the dense BF16 peak a fused attention kernel (`kernel`: "cudnn" or "flash-attn-2") reaches on the
    FLOPs it executes, for sequences of `seq` tokens (per kernel call) and heads of `head_dim`."""
    forward = _published(kernel, "forward", causal, seq, head_dim)
    if not backward:
        return forward / ATTENTION_REFERENCE_TFLOPS
    dim = min(head_dim, 128.0)
    tflops = _published(kernel, "backward", False, seq, dim)
    if causal:
        tflops *= _published(kernel, "forward", True, seq, dim) / _published(kernel, "forward", False, seq, dim)
    return tflops / ATTENTION_REFERENCE_TFLOPS


def wave_fraction(m: float, n: float, sms: Optional[int], batch: float = 1.0) -> float:
    """The useful fraction of the waves that `batch` (m x n) outputs launched together take on `sms`
    multiprocessors, with the better of the two tile orientations (1.0 where the GPU's SM count is unknown)."""
    if not sms:
        return 1.0
    best = 0.0
    for tm, tn in (GEMM_TILE, GEMM_TILE[::-1]):
        tiles = math.ceil(batch) * math.ceil(m / tm) * math.ceil(n / tn)
        best = max(best, tiles / (math.ceil(tiles / sms) * sms))
    return best


def depth_fraction(k: float, operand_bytes: int) -> float:
    """The share of a tile's time spent in its K loop: K / (K + the K-equivalent of the fill and epilogue)."""
    fixed = GEMM_FIXED_K_BLOCKS * GEMM_K_BLOCK[operand_bytes]
    return k / (k + fixed)


@functools.lru_cache(maxsize=4096, typed=True)  # pure, and asked the same few shapes in a plan search
def gemm_efficiency(m: float, n: float, k: float, sms: Optional[int], operand_bytes: int, batch: float = 1.0) -> float:
    """The fraction of its ceiling efficiency an (m x k) @ (k x n) GEMM (`batch` of them in one launch) reaches:
    waves times depth."""
    return wave_fraction(m, n, sms, batch) * depth_fraction(k, operand_bytes)
