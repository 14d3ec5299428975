"""GPUs and clusters the planner knows: memory, dense peaks, FP8 support and interconnect.

Standard library only. Peaks are dense (no sparsity) tensor-core figures; sources in `perf-model.md` section 2.7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from nemo_recipes.errors import InvalidInputError, Problem, did_you_mean

# Cluster bounds, as the catalog's num_nodes and num_gpus_per_node (beyond any cluster built; they also keep the
# planner's divisor searches over the world size instant).
MAX_NODES = 2**17
MAX_GPUS_PER_NODE = 4096
# The first compute capability with MXFP8 tensor cores (Blackwell, sm_100).
MXFP8_COMPUTE_CAPABILITY = (10, 0)


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One accelerator model. A user can describe their own: `GPU(name="my-gpu", memory_gib=96, ...)`."""

    name: str
    memory_gib: float  # what the driver reports (nvidia-smi MiB / 1024), before any allocation
    bf16_tflops: float  # dense BF16/FP16 tensor-core peak
    fp8_tflops: Optional[float]  # dense FP8 peak; None where the GPU has no FP8 tensor cores
    hbm_tb_s: float  # HBM bandwidth, TB/s
    nvlink_gb_s: float  # NVLink bandwidth per GPU and direction, GB/s
    network_gb_s: float  # inter-node (InfiniBand/RoCE) bandwidth per GPU and direction, GB/s
    nvlink_domain: int  # GPUs that share one NVLink domain (a node, or an NVL72 rack)
    description: str = ""
    compute_capability: Optional[tuple[int, int]] = None  # CUDA's (major, minor); None: unknown
    tdp_w: Optional[float] = None  # board power limit, W (data sheet); None: unknown
    sm_count: Optional[int] = None  # streaming multiprocessors (GEMM wave quantisation); None: unknown

    def __post_init__(self) -> None:
        problems = gpu_problems(self)
        if problems:
            raise InvalidInputError(problems, context=f"GPU {self.name!r}")

    @property
    def supports_fp8(self) -> bool:
        return self.fp8_tflops is not None

    @property
    def supports_mxfp8(self) -> bool:
        """MXFP8 (32-element blocks with a power-of-two E8M0 scale each) is a format of Blackwell's fifth-generation
        tensor cores (compute capability 10.x); Transformer Engine's MXFP8BlockScaling runs nowhere else."""
        return self.compute_capability is not None and self.compute_capability >= MXFP8_COMPUTE_CAPABILITY


def _positive_finite(value: object) -> bool:
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf
    except OverflowError:
        return False


def gpu_problems(gpu: GPU) -> list[Problem]:
    """A GPU described by the user: every figure positive and finite (the planner divides by them)."""
    problems = []
    if not isinstance(gpu.name, str) or not gpu.name.strip():
        problems.append(Problem("name", gpu.name, "must be a non-empty string.", "name the GPU, e.g. 'my-gpu'."))
    for field in ("memory_gib", "bf16_tflops", "hbm_tb_s", "nvlink_gb_s", "network_gb_s"):
        value = getattr(gpu, field)
        if not _positive_finite(value):
            problems.append(
                Problem(field, value, "must be a positive, finite number.", f"set {field} from the GPU's data sheet.")
            )
    if gpu.fp8_tflops is not None and not _positive_finite(gpu.fp8_tflops):
        problems.append(
            Problem(
                "fp8_tflops",
                gpu.fp8_tflops,
                "must be a positive, finite number or None.",
                "set fp8_tflops from the data sheet, or None where the GPU has no FP8.",
            )
        )
    if gpu.tdp_w is not None and not _positive_finite(gpu.tdp_w):
        problems.append(
            Problem(
                "tdp_w",
                gpu.tdp_w,
                "must be a positive, finite number of watts or None.",
                "set tdp_w from the data sheet (the GPU's maximum board power), or None where unknown.",
            )
        )
    sms = gpu.sm_count
    if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= 4096):
        problems.append(
            Problem(
                "sm_count",
                sms,
                "must be an integer from 1 to 4096 or None.",
                "set sm_count from the data sheet (streaming multiprocessors), or None where unknown.",
            )
        )
    domain = gpu.nvlink_domain
    if isinstance(domain, bool) or not isinstance(domain, int) or not 1 <= domain <= MAX_GPUS_PER_NODE:
        problems.append(
            Problem(
                "nvlink_domain",
                domain,
                f"must be an integer from 1 to {MAX_GPUS_PER_NODE}.",
                "set nvlink_domain to the GPUs sharing one NVLink domain (8 in a DGX).",
            )
        )
    return problems


GPUS: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in (
        # A100 SXM (400 W): 312 TFLOP/s BF16 dense, no FP8; NVLink 3 600 GB/s total (300 per direction); HDR 200 Gb/s
        # per GPU. SMs: A100 108, H100 SXM5 and H200 132 (NVIDIA A100 and H100 architecture whitepapers), B200 148
        # (two dies of 74).
        GPU(
            name="a100-40gb",
            memory_gib=40.0,
            bf16_tflops=312.0,
            fp8_tflops=None,
            hbm_tb_s=1.555,
            nvlink_gb_s=300.0,
            network_gb_s=25.0,
            nvlink_domain=8,
            description="NVIDIA A100 SXM 40 GB",
            compute_capability=(8, 0),
            tdp_w=400.0,
            sm_count=108,
        ),
        GPU(
            name="a100-80gb",
            memory_gib=80.0,
            bf16_tflops=312.0,
            fp8_tflops=None,
            hbm_tb_s=2.039,
            nvlink_gb_s=300.0,
            network_gb_s=25.0,
            nvlink_domain=8,
            description="NVIDIA A100 SXM 80 GB",
            compute_capability=(8, 0),
            tdp_w=400.0,
            sm_count=108,
        ),
        # H100 SXM (700 W): 989 BF16 / 1979 FP8 dense; NVLink 4 900 GB/s total; NDR 400 Gb/s per GPU (DGX H100).
        GPU(
            name="h100-80gb",
            memory_gib=79.6,
            bf16_tflops=989.0,
            fp8_tflops=1979.0,
            hbm_tb_s=3.35,
            nvlink_gb_s=450.0,
            network_gb_s=50.0,
            nvlink_domain=8,
            description="NVIDIA H100 SXM 80 GB",
            compute_capability=(9, 0),
            tdp_w=700.0,
            sm_count=132,
        ),
        # H200 SXM (700 W): the H100's compute with 141 GB HBM3e at 4.8 TB/s.
        GPU(
            name="h200",
            memory_gib=140.4,
            bf16_tflops=989.0,
            fp8_tflops=1979.0,
            hbm_tb_s=4.8,
            nvlink_gb_s=450.0,
            network_gb_s=50.0,
            nvlink_domain=8,
            description="NVIDIA H200 SXM 141 GB",
            compute_capability=(9, 0),
            tdp_w=700.0,
            sm_count=132,
        ),
        # B200 (HGX, 1000 W): 2250 BF16 / 4500 FP8 dense; NVLink 5 1.8 TB/s total; 400 Gb/s per GPU.
        GPU(
            name="b200",
            memory_gib=179.0,
            bf16_tflops=2250.0,
            fp8_tflops=4500.0,
            hbm_tb_s=8.0,
            nvlink_gb_s=900.0,
            network_gb_s=50.0,
            nvlink_domain=8,
            description="NVIDIA B200 (HGX) 180 GB",
            compute_capability=(10, 0),
            tdp_w=1000.0,
            sm_count=148,
        ),
        # B200 in GB200 NVL72 (1200 W): 2500 BF16 / 5000 FP8 dense; one NVLink domain of 72 GPUs.
        GPU(
            name="gb200",
            memory_gib=184.0,
            bf16_tflops=2500.0,
            fp8_tflops=5000.0,
            hbm_tb_s=8.0,
            nvlink_gb_s=900.0,
            network_gb_s=50.0,
            nvlink_domain=72,
            description="NVIDIA GB200 NVL72, per GPU",
            compute_capability=(10, 0),
            tdp_w=1200.0,
            sm_count=148,
        ),
        # Blackwell Ultra (B300), whose dense BF16 and FP8 peaks are the B200's
        # (glennklockwood.com/garden/processors/B300: "The HGX variant of B300 has similar performance to B200",
        # 2250 BF16 / 4500 FP8 dense; 288 GB HBM3e at 8 TB/s; NVLink 5 at 2 x 900 GB/s; "1400 W maximum"), with
        # one ConnectX-8 SuperNIC of 800 Gb/s per GPU (100 GB/s; the HGX B300 platform: "800 Gb/s class external
        # networking per GPU via ConnectX 8 SuperNICs").
        # memory_gib is the data sheet's 288 GB in GiB (no nvidia-smi figure at hand); compute capability 10.3
        # (sm_103, CUDA 12.9's Blackwell Ultra target).
        GPU(
            name="b300",
            memory_gib=268.2,
            bf16_tflops=2250.0,
            fp8_tflops=4500.0,
            hbm_tb_s=8.0,
            nvlink_gb_s=900.0,
            network_gb_s=100.0,
            nvlink_domain=8,
            description="NVIDIA B300 (HGX, Blackwell Ultra) 288 GB",
            compute_capability=(10, 3),
            tdp_w=1400.0,
        ),
        # B300 in GB300 NVL72 (1400 W): 360 PF dense FP8 over 72 GPUs = 5000 FP8 / 2500 BF16 per GPU, 20 TB of HBM3e
        # at 576 TB/s (288 GB at 8 TB/s each), 72 ConnectX-8 NICs (800 Gb/s per GPU), one NVLink domain of 72 GPUs
        # (glennklockwood.com/garden/processors/B300, "GB300 NVL72 is advertised to have").
        GPU(
            name="gb300",
            memory_gib=268.2,
            bf16_tflops=2500.0,
            fp8_tflops=5000.0,
            hbm_tb_s=8.0,
            nvlink_gb_s=900.0,
            network_gb_s=100.0,
            nvlink_domain=72,
            description="NVIDIA GB300 NVL72, per GPU",
            compute_capability=(10, 3),
            tdp_w=1400.0,
        ),
    )
}

ALIASES: dict[str, str] = {
    "a100": "a100-80gb",
    "a100-80g": "a100-80gb",
    "a100-40g": "a100-40gb",
    "h100": "h100-80gb",
    "h100-sxm": "h100-80gb",
    "h100-80g": "h100-80gb",
    "h200-141gb": "h200",
    "h200-141g": "h200",
    "b200-180gb": "b200",
    "gb200-nvl72": "gb200",
    "b300-288gb": "b300",
    "gb300-nvl72": "gb300",
}


def get_gpu(name: "str | GPU") -> GPU:
    """A known GPU by name or alias (case-insensitive); a GPU object is returned as it is."""
    if isinstance(name, GPU):
        return name
    key = str(name).strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    raise InvalidInputError(
        [
            Problem(
                "gpu",
                name,
                f"unknown GPU{did_you_mean(key, list(GPUS) + list(ALIASES))}.",
                f"use one of: {', '.join(GPUS)}; or describe your own with nemo_recipes.plan.GPU(...).",
            )
        ]
    )


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """nodes x GPUs per node x GPU type. `gpu=None` plans without hardware-specific checks (memory, FP8, NVLink)."""

    nodes: int
    gpus_per_node: int
    gpu: Optional[GPU] = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @classmethod
    def of(cls, nodes: int, gpus_per_node: int, gpu: "str | GPU | None" = None) -> "Cluster":
        problems = [
            Problem(field, value, f"must be an integer from 1 to {bound:,}.", f"set {field} to 1 or more.")
            for field, value, bound in (
                ("nodes", nodes, MAX_NODES),
                ("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE),
            )
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound
        ]
        try:
            resolved = None if gpu is None else get_gpu(gpu)
        except InvalidInputError as error:
            problems += error.problems
        if problems:
            raise InvalidInputError(problems, context="cluster")
        return cls(nodes=nodes, gpus_per_node=gpus_per_node, gpu=resolved)


def nvlink_domain_size(gpu: GPU, gpus_per_node: int) -> int:
    """GPUs that reach each other over NVLink: an HGX/DGX baseboard links 8 GPUs; a larger NVLink domain (GB200
    NVL72) is a rack that spans nodes, while a smaller node ends the domain at the node."""
    return gpu.nvlink_domain if gpu.nvlink_domain > 8 else min(gpu.nvlink_domain, gpus_per_node)


def group_bandwidth_gb_s(gpu: GPU, group: int, stride: int, gpus_per_node: int) -> float:
    """Bus bandwidth per GPU of a collective over `group` ranks spaced `stride` ranks apart.

    Inside one NVLink domain it is NVLink. Across nodes NCCL's rings leave every node once per ring, one ring per NIC
    that the group owns on the node: the group's k GPUs per node bring k NICs, so the bus bandwidth is k times a
    NIC's (capped by NVLink)."""
    domain = nvlink_domain_size(gpu, gpus_per_node)
    if group * stride <= domain:
        return gpu.nvlink_gb_s
    per_node = max(1, min(group, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return min(gpu.nvlink_gb_s, per_node * gpu.network_gb_s)
