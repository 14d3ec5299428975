"""The blocks a transformer layer is made of, each a small frozen object that owns every fact about itself: its
tensors with their shapes and how tensor (and expert) parallelism splits them, its Megatron state-dict keys, its
parameter count, its FLOPs per token, the activation bytes it stores for the backward pass, the GEMMs the throughput
model times and the collectives it needs. A family says which blocks its layers hold (`Family.layer`); the
architecture (`families.architecture`) composes them; the Hugging Face names of each block's tensors are the
family's declared mapping (`families.hf_mapping`).

Blocks: `Attention` (multi-head and grouped-query; QKV bias and QK-norm as options), `DenseMLP` (GELU, SwiGLU, GeGLU),
`MoE` (router, routed experts split over EP, optional shared experts); multi-latent attention is `latent_attention`'s.
Standard library only: the planner and the catalog read it on the fast path."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional, Protocol

from nemo_recipes.counts import divisors, listing
from nemo_recipes.errors import WARNING, Problem
from nemo_recipes.families.shape import Shape  # noqa: F401  (re-exported: the blocks' protocol of a recipe)

#: How a tensor is stored over the GPUs: column-parallel (split along its output rows), row-parallel (split along its
#: input columns), a full copy on every TP rank, or split over expert parallelism by its leading expert axis.
Split = Literal["column", "row", "replicated", "expert"]

#: The norms' epsilon: Megatron-Core's default (TransformerConfig.layernorm_epsilon), which no recipe changes.
NORM_EPSILON = 1e-5


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor of a layer, named by its role (Megatron's state-dict keys differ between its local and
    Transformer Engine layer specs; the roles do not)."""

    role: str
    shape: tuple[int, ...]
    split: Split

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM per token: `k` inputs to `n` outputs, whole; `split` says which of them TP divides
    (column-parallel: n; row-parallel: k). The throughput model times it on the tokens of a micro-batch."""

    k: int
    n: int
    split: Split

    def on_rank(self, tp: int) -> tuple[float, float]:
        """(k, n) on one TP rank, as the throughput model times them."""
        return (self.k, self.n / tp) if self.split == "column" else (self.k / tp, self.n)


@dataclass(frozen=True)
class Collective:
    """A communication a block needs per token and pass: the group it runs over (`tp`, `cp`, `ep`), its kind and how
    many elements per token it moves (the throughput model turns them into seconds). Under sequence parallelism a
    TP all-reduce is an all-gather before the block and a reduce-scatter after it; a block whose gathered input is
    narrower than what it scatters (multi-latent attention gathers its latents, not the hidden state) says the two
    halves apart: each moves half an all-reduce's bytes."""

    group: Literal["tp", "cp", "ep"]
    kind: Literal["all-reduce", "all-gather", "reduce-scatter", "ring", "all-to-all"]
    elements_per_token: int


@dataclass(frozen=True)
class SplitNeed:
    """A size of a block that a parallel group must divide (Megatron-Core refuses the model otherwise)."""

    field: str  # the recipe field a user changes to fix it: num_attention_heads, num_query_groups, ffn_hidden_size, ...
    value: int  # the size that must be divisible
    group: Literal["tp", "ep", "etp", "cp"]  # which parallel size must divide it
    what: str  # prose: what is split, for the problem's message (e.g. "attention heads"; "the MLP": "{what} is split")

    def met_by(self, size: int) -> bool:
        return self.value % size == 0


class Block(Protocol):
    """What every block answers (the architecture and the planner ask these and nothing else)."""

    #: role -> Megatron's keys under `module.decoder.layers.`: Transformer Engine's layer spec first (its norms are
    #: fused into the next linear layer), then the local spec's.
    MEGATRON_KEYS: ClassVar[dict[str, tuple[str, ...]]]

    def tensors(self) -> list[Tensor]: ...
    def weight_macs_per_token(self) -> int: ...
    def attention_flops_per_token(self, seq: int) -> float: ...
    def gemms(self) -> list[Gemm]: ...
    def stored_activations_per_sbh(self) -> float: ...
    def collectives(self) -> list[Collective]: ...
    def split_needs(self) -> list[SplitNeed]:
        """The sizes each parallel group must divide (the rules refuse a layout that misses one; the plan search
        and the smoke shapes choose sizes that meet them all)."""
        ...

    def shape_problems(self) -> list[Problem]:
        """What is wrong with the block's own shape, whatever the layout (a head count that does not divide the
        hidden size; advice on a family's choice, as warnings)."""
        ...


def channels_per_head(hidden: int, heads: int, kv_channels: Optional[int] = None) -> int:
    """Channels per attention head: kv_channels, or hidden / heads as Megatron-Core derives it when unset."""
    return kv_channels or hidden // heads


def norm(role: str, hidden: int, normalization: str) -> list[Tensor]:
    """LayerNorm has a weight and a bias, RMSNorm a weight only; every TP rank holds a norm whole."""
    tensors = [Tensor(f"{role}.weight", (hidden,), "replicated")]
    if normalization == "LayerNorm":
        tensors.append(Tensor(f"{role}.bias", (hidden,), "replicated"))
    return tensors


@dataclass(frozen=True)
class Attention:
    """Self-attention with its pre-norm: the fused QKV projection (queries heads x head_dim wide, keys and values
    query groups x head_dim each, grouped per query group as Megatron stores them) is column-parallel, the output
    projection row-parallel; with `bias` every linear layer has one, with `qkv_bias` the QKV projection alone (as
    Qwen 2); `qk_norm` normalises each head's queries and keys (Megatron-Core's qk_layernorm, the recipes'
    `qk_layernorm`: one head_dim-wide norm for the queries and one for the keys, as Qwen 3)."""

    hidden: int
    heads: int
    groups: int
    head_dim: int
    normalization: str
    bias: bool
    qkv_bias: bool = False
    qk_norm: bool = False
    #: Whether the recipe sets the head dimension (kv_channels); unset, Megatron-Core derives it as hidden / heads.
    head_dim_given: bool = True
    #: RoPE's share of each head's channels; None without RoPE (learned or no positions).
    rotary_percent: Optional[float] = None

    MEGATRON_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "input_norm.weight": ("self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"),
        "input_norm.bias": ("self_attention.linear_qkv.layer_norm_bias", "input_layernorm.bias"),
        "qkv.weight": ("self_attention.linear_qkv.weight",),
        "qkv.bias": ("self_attention.linear_qkv.bias",),
        "q_norm.weight": ("self_attention.q_layernorm.weight",),  # QK-norm: the same key in both layer specs
        "q_norm.bias": ("self_attention.q_layernorm.bias",),
        "k_norm.weight": ("self_attention.k_layernorm.weight",),
        "k_norm.bias": ("self_attention.k_layernorm.bias",),
        "proj.weight": ("self_attention.linear_proj.weight",),
        "proj.bias": ("self_attention.linear_proj.bias",),
    }

    @classmethod
    def of(cls, spec: Any) -> "Attention":
        return cls(
            hidden=spec.hidden_size,
            heads=spec.num_attention_heads,
            groups=spec.kv_groups,
            head_dim=spec.head_dim,
            normalization=spec.normalization,
            bias=spec.add_bias_linear,
            qkv_bias=getattr(spec, "qkv_bias", False),
            qk_norm=spec.qk_layernorm,
            head_dim_given=spec.kv_channels is not None,
            rotary_percent=spec.rotary_percent if spec.position_embedding_type == "rope" else None,
        )

    @property
    def query_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.groups * self.head_dim

    @property
    def qkv_width(self) -> int:
        return self.query_width + 2 * self.kv_width

    def tensors(self) -> list[Tensor]:
        h = self.hidden
        tensors = [*norm("input_norm", h, self.normalization), Tensor("qkv.weight", (self.qkv_width, h), "column")]
        if self.qk_norm:  # one norm of head_dim channels shared by every query head, one by every key head
            tensors += [*norm("q_norm", self.head_dim, self.normalization)]
            tensors += [*norm("k_norm", self.head_dim, self.normalization)]
        tensors.append(Tensor("proj.weight", (h, self.query_width), "row"))
        if self.bias or self.qkv_bias:
            tensors.append(Tensor("qkv.bias", (self.qkv_width,), "column"))
        if self.bias:
            tensors.append(Tensor("proj.bias", (h,), "replicated"))
        return tensors

    def weight_macs_per_token(self) -> int:
        return self.hidden * self.qkv_width + self.query_width * self.hidden

    def attention_flops_per_token(self, seq: int) -> float:
        """Scores and attention over V, the full s x s (no causal discount): `4·s·q` (perf-model.md 2.2)."""
        return 4.0 * seq * self.query_width

    def gemms(self) -> list[Gemm]:
        return [Gemm(self.hidden, self.qkv_width, "column"), Gemm(self.query_width, self.hidden, "row")]

    def stored_activations_per_sbh(self) -> float:
        """Bytes per s·b·h this block stores beyond the replicated norms and dropouts, before TP divides them
        (Korthikanti et al. 2022, Table 2, generalised to GQA): Q, K, V and the projection's input."""
        h = self.hidden
        return 4.0 * self.heads * self.head_dim / h + 4.0 * self.groups * self.head_dim / h

    def collectives(self) -> list[Collective]:
        """The output projection's all-reduce over TP; with CP, K and V go round the ring."""
        return [Collective("tp", "all-reduce", self.hidden), Collective("cp", "ring", 2 * self.kv_width)]

    def split_needs(self) -> list[SplitNeed]:
        """Megatron-Core splits whole heads and whole query groups over TP (TransformerConfig:
        `num_attention_heads % tensor_model_parallel_size`, `num_query_groups % tensor_model_parallel_size`)."""
        return [
            SplitNeed("num_attention_heads", self.heads, "tp", "attention heads"),
            SplitNeed("num_query_groups", self.groups, "tp", "query groups"),
        ]

    def shape_problems(self) -> list[Problem]:
        """Heads of a whole size, query groups that split the heads evenly, RoPE over an even channel count."""
        return [*self.head_problems(), *self.rotary_problems()]

    def head_problems(self) -> list[Problem]:
        h, heads, groups = self.hidden, self.heads, self.groups
        problems = []
        if not self.head_dim_given and h % heads:
            problems.append(
                Problem(
                    "num_attention_heads",
                    heads,
                    f"hidden_size={h} is not divisible by {heads} heads, so heads have no whole size.",
                    f"use a head count that divides {h} (for example "
                    f"{listing(d for d in divisors(h) if 8 <= d <= 256)}), or set kv_channels (the head dimension) "
                    "explicitly.",
                )
            )
        if heads % groups:
            problems.append(
                Problem(
                    "num_query_groups",
                    groups,
                    f"{heads} attention heads cannot be split into {groups} query groups.",
                    f"use num_query_groups in {listing(divisors(heads))}.",
                )
            )
        return problems

    def rotary_problems(self) -> list[Problem]:
        """RoPE rotates channel pairs: Megatron-Core's RotaryEmbedding takes int(kv_channels x rotary_percent)
        channels and builds one frequency per pair, so an odd or zero count cannot be applied to the heads."""
        if self.rotary_percent is None:
            return []
        rotary_dim = int(self.head_dim * self.rotary_percent)
        if rotary_dim >= 2 and rotary_dim % 2 == 0:
            return []
        return [
            Problem(
                "rotary_percent",
                self.rotary_percent,
                f"RoPE rotates int(head_dim x rotary_percent) = {rotary_dim} channels of each head "
                f"(head_dim={self.head_dim}); it rotates channel pairs, so that must be a positive even number.",
                "choose rotary_percent (or kv_channels) so that head_dim x rotary_percent is even, e.g. 1.0.",
            )
        ]

    def split_qkv(self, qkv: Any) -> tuple[Any, Any, Any]:
        """Megatron's fused QKV rows as (queries, keys, values), each in head order. Megatron groups them by query
        group: the group's query heads, then its key head, then its value head. A weight [rows, in] or a bias
        [rows]; tensor methods only, so that this module imports no torch."""
        rest = tuple(qkv.shape[1:])
        per_group = self.heads // self.groups
        grouped = qkv.reshape(self.groups, per_group + 2, self.head_dim, *rest)
        return (
            grouped[:, :per_group].reshape(self.query_width, *rest),
            grouped[:, per_group].reshape(self.kv_width, *rest),
            grouped[:, per_group + 1].reshape(self.kv_width, *rest),
        )

    def merge_qkv(self, q: Any, k: Any, v: Any) -> Any:
        """The inverse of `split_qkv`: queries, keys and values in head order as Megatron's fused, grouped rows."""
        rest = tuple(q.shape[1:])
        per_group = self.heads // self.groups
        grouped = q.new_empty((self.groups, per_group + 2, self.head_dim, *rest))
        grouped[:, :per_group] = q.reshape(self.groups, per_group, self.head_dim, *rest)
        grouped[:, per_group] = k.reshape(self.groups, self.head_dim, *rest)
        grouped[:, per_group + 1] = v.reshape(self.groups, self.head_dim, *rest)
        return grouped.reshape(-1, *rest)

    @property
    def widths(self) -> list[int]:
        """The rows of queries, keys and values, in the order `split_qkv` returns them."""
        return [self.query_width, self.kv_width, self.kv_width]


@dataclass(frozen=True)
class DenseMLP:
    """The MLP with its pre-norm: fc1 column-parallel (gated: the gate rows, then the up rows, 2 x FFN wide, as
    Megatron-Core's linear_fc1 holds them), fc2 row-parallel; biases on both with `bias`."""

    hidden: int
    ffn: int
    gated: bool
    normalization: str
    bias: bool
    #: The recipe's activation (gelu, swiglu, geglu), for the block's advice; `gated` is what the maths read.
    activation: str = ""

    MEGATRON_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "pre_mlp_norm.weight": ("mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"),
        "pre_mlp_norm.bias": ("mlp.linear_fc1.layer_norm_bias", "pre_mlp_layernorm.bias"),
        "fc1.weight": ("mlp.linear_fc1.weight",),
        "fc1.bias": ("mlp.linear_fc1.bias",),
        "fc2.weight": ("mlp.linear_fc2.weight",),
        "fc2.bias": ("mlp.linear_fc2.bias",),
    }

    @classmethod
    def of(cls, spec: Any) -> "DenseMLP":
        return cls(spec.hidden_size, spec.ffn_hidden_size, spec.gated_linear_unit, spec.normalization,
                   spec.add_bias_linear, spec.activation)  # fmt: skip

    @property
    def fc1_width(self) -> int:
        return (2 if self.gated else 1) * self.ffn

    def tensors(self) -> list[Tensor]:
        h = self.hidden
        tensors = [
            *norm("pre_mlp_norm", h, self.normalization),
            Tensor("fc1.weight", (self.fc1_width, h), "column"),
            Tensor("fc2.weight", (h, self.ffn), "row"),
        ]
        if self.bias:
            tensors += [Tensor("fc1.bias", (self.fc1_width,), "column"), Tensor("fc2.bias", (h,), "replicated")]
        return tensors

    def weight_macs_per_token(self) -> int:
        return self.hidden * self.fc1_width + self.ffn * self.hidden

    def attention_flops_per_token(self, seq: int) -> float:
        return 0.0

    def gemms(self) -> list[Gemm]:
        return [Gemm(self.hidden, self.fc1_width, "column"), Gemm(self.ffn, self.hidden, "row")]

    def stored_activations_per_sbh(self) -> float:
        """fc1's input and output, the activation's output (gated: the gate and up halves too), fc2's input."""
        return (8.0 if self.gated else 4.0) * self.ffn / self.hidden

    def collectives(self) -> list[Collective]:
        """fc2's all-reduce over TP."""
        return [Collective("tp", "all-reduce", self.hidden)]

    def split_needs(self) -> list[SplitNeed]:
        """fc1 is column-parallel, fc2 row-parallel: TP splits the FFN's width."""
        return [SplitNeed("ffn_hidden_size", self.ffn, "tp", "the MLP")]

    def shape_problems(self) -> list[Problem]:
        """A gated MLP has three FFN-wide matrices where GELU has two: at GPT-3's 4 x hidden it is 1.5 times the MLP.
        The Llama papers keep the MLP's size with about 8/3 x hidden, rounded up (Llama 2 7B: 11008 for 4096)."""
        h = self.hidden
        if not self.gated or self.ffn != 4 * h:
            return []
        same_size = math.ceil(8 * h / 3 / 256) * 256
        return [
            Problem(
                "ffn_hidden_size",
                self.ffn,
                f"activation={self.activation} at 4 x hidden gives the MLP three {self.ffn}-wide matrices: "
                "1.5 times the parameters and FLOPs of a GELU MLP of the same width.",
                f"for a gated MLP of a GELU MLP's size set ffn_hidden_size to about 8/3 x hidden, e.g. {same_size}; "
                "or keep 4 x hidden on purpose.",
                WARNING,
            )
        ]


@dataclass(frozen=True)
class MoE:
    """A Mixture-of-Experts MLP with its pre-norm (Megatron-Core's MoELayer): a router (hidden -> experts, no bias,
    whole on every rank: `TopKRouter.weight`), `experts` routed experts of which each token visits `top_k`, each a
    `DenseMLP` of `expert_ffn` (moe_ffn_hidden_size), and optionally a shared expert of `shared_ffn`
    (moe_shared_expert_intermediate_size) every token visits. The routed experts split over EP (whole experts:
    MoELayer's num_local_experts) and each expert's matrices over ETP (fc1 column-, fc2 row-wise); the shared expert
    splits over TP like a dense MLP. A sigmoid router's expert bias is a buffer, not a parameter: it counts nowhere."""

    hidden: int
    experts: int
    top_k: int
    expert_ffn: int
    gated: bool
    normalization: str
    shared_ffn: int = 0
    bias: bool = False  # Megatron-Core allows biases in experts only with ETP = 1 (transformer_config.py)

    #: Keys in Megatron's distributed checkpoint (what `nemo-recipes hf export` and the restore check read): the
    #: local spec's SequentialMLP and Transformer Engine's TEGroupedMLP both save each layer's experts as one
    #: tensor with a leading global-expert axis under `mlp.experts.experts.` (experts.py, `sharded_state_dict`:
    #: "interchangeable with SequentialMLP's"). Their in-memory module names differ: `EXPERT_MODULE_KEYS`.
    MEGATRON_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        # TE's spec keeps the norm apart (the router reads it); the local spec's keys map renames it as a dense
        # layer's even with experts (gpt_layer_specs.py: "pre_mlp_layernorm." -> "mlp.linear_fc1.layer_norm_").
        "pre_moe_norm.weight": ("pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight"),
        "pre_moe_norm.bias": ("pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias"),
        "router.weight": ("mlp.router.weight",),
        "experts.fc1.weight": ("mlp.experts.experts.linear_fc1.weight",),
        "experts.fc1.bias": ("mlp.experts.experts.linear_fc1.bias",),
        "experts.fc2.weight": ("mlp.experts.experts.linear_fc2.weight",),
        "experts.fc2.bias": ("mlp.experts.experts.linear_fc2.bias",),
        "shared.fc1.weight": ("mlp.shared_experts.linear_fc1.weight",),
        "shared.fc1.bias": ("mlp.shared_experts.linear_fc1.bias",),
        "shared.fc2.weight": ("mlp.shared_experts.linear_fc2.weight",),
        "shared.fc2.bias": ("mlp.shared_experts.linear_fc2.bias",),
    }
    #: Role -> the `state_dict()` key of local expert `{i}` (from 0 on each EP rank): (Transformer Engine's
    #: TEGroupedMLP, weight0, weight1, ...; the local spec's SequentialMLP, a module per expert) (experts.py).
    EXPERT_MODULE_KEYS: ClassVar[dict[str, tuple[str, str]]] = {
        "experts.fc1.weight": ("mlp.experts.linear_fc1.weight{i}", "mlp.experts.local_experts.{i}.linear_fc1.weight"),
        "experts.fc1.bias": ("mlp.experts.linear_fc1.bias{i}", "mlp.experts.local_experts.{i}.linear_fc1.bias"),
        "experts.fc2.weight": ("mlp.experts.linear_fc2.weight{i}", "mlp.experts.local_experts.{i}.linear_fc2.weight"),
        "experts.fc2.bias": ("mlp.experts.linear_fc2.bias{i}", "mlp.experts.local_experts.{i}.linear_fc2.bias"),
    }

    @classmethod
    def of(cls, spec: Any) -> "MoE":
        """The MoE block of a recipe with experts: moe_ffn_hidden_size unset is ffn_hidden_size, as Megatron-Core
        sets it (transformer_config.py)."""
        return cls(
            hidden=spec.hidden_size,
            experts=spec.num_moe_experts,
            top_k=spec.moe_router_topk,
            expert_ffn=spec.moe_ffn_hidden_size or spec.ffn_hidden_size,
            gated=spec.gated_linear_unit,
            normalization=spec.normalization,
            shared_ffn=spec.moe_shared_expert_intermediate_size or 0,
            bias=spec.add_bias_linear,
        )

    def _expert(self, ffn: int) -> DenseMLP:
        return DenseMLP(self.hidden, ffn, self.gated, self.normalization, self.bias)

    def expert_tensors(self) -> list[Tensor]:
        """The routed experts' tensors, each stacked on a leading axis of `experts`: what EP and ETP split."""
        e, h, expert = self.experts, self.hidden, self._expert(self.expert_ffn)
        tensors = [
            Tensor("experts.fc1.weight", (e, expert.fc1_width, h), "expert"),
            Tensor("experts.fc2.weight", (e, h, self.expert_ffn), "expert"),
        ]
        if self.bias:
            tensors += [Tensor("experts.fc1.bias", (e, expert.fc1_width), "expert")]
            tensors += [Tensor("experts.fc2.bias", (e, h), "expert")]
        return tensors

    def tensors(self) -> list[Tensor]:
        h = self.hidden
        tensors = [
            *norm("pre_moe_norm", h, self.normalization),  # not fused into fc1, as a dense MLP's: the router reads it
            Tensor("router.weight", (self.experts, h), "replicated"),
            *self.expert_tensors(),
        ]
        if self.shared_ffn:
            shared = self._expert(self.shared_ffn)
            tensors += [Tensor("shared.fc1.weight", (shared.fc1_width, h), "column")]
            tensors += [Tensor("shared.fc2.weight", (h, self.shared_ffn), "row")]
            if self.bias:
                tensors += [Tensor("shared.fc1.bias", (shared.fc1_width,), "column")]
                tensors += [Tensor("shared.fc2.bias", (h,), "replicated")]
        return tensors

    @property
    def params_per_expert(self) -> int:
        """One routed expert's parameters (its fc1 and fc2, with their biases if any)."""
        return sum(t.numel for t in self.expert_tensors()) // self.experts

    @property
    def idle_params_per_token(self) -> int:  # the experts a token does not visit: total less active, per layer
        return (self.experts - self.top_k) * self.params_per_expert

    def weight_macs_per_token(self) -> int:
        """The router's, the top-k experts' a token visits and the shared expert's: the active weights, once each
        (a token's FLOPs are 2 per active weight; a dropless router computes exactly top_k experts per token)."""
        shared = self._expert(self.shared_ffn).weight_macs_per_token() if self.shared_ffn else 0
        routed = self.top_k * self._expert(self.expert_ffn).weight_macs_per_token()
        return self.hidden * self.experts + routed + shared

    def attention_flops_per_token(self, seq: int) -> float:
        return 0.0

    def gemms(self) -> list[Gemm]:
        """A token's: the router's, top_k routed experts' one after the other, the shared expert's (its FLOPs)."""
        router, *shared = self.dense_gemms()
        return [router, *self.expert_gemms() * self.top_k, *shared]

    def expert_gemms(self) -> list[Gemm]:
        """One routed expert's, whole (ETP splits it as TP a dense MLP's): the grouped GEMM's, per local expert."""
        return self._expert(self.expert_ffn).gemms()

    def dense_gemms(self) -> list[Gemm]:
        """The GEMMs every token runs once: the router's and the shared expert's."""
        return [
            Gemm(self.hidden, self.experts, "replicated"),
            *(self._expert(self.shared_ffn).gemms() if self.shared_ffn else []),
        ]

    def routed_activations_per_sbh(self) -> float:
        """Stored bytes per s·b·h before TP: each routed copy's expert tensors, plus 2 + 2 bytes a channel of the
        permuted input and of the output the combine weighs (Megatron-Core moe_utils.permute/unpermute)."""
        return self.top_k * (self._expert(self.expert_ffn).stored_activations_per_sbh() + 4.0)

    def stored_activations_per_sbh(self) -> float:
        """The routed copies', the router's fp32 logits and probabilities (4 + 4 bytes an expert), the shared's."""
        router = 8.0 * self.experts / self.hidden
        shared = self._expert(self.shared_ffn).stored_activations_per_sbh() if self.shared_ffn else 0.0
        return self.routed_activations_per_sbh() + router + shared

    def collectives(self) -> list[Collective]:
        """The dispatch and the combine: each token's hidden state to its top_k experts and back, over EP."""
        sent = self.top_k * self.hidden
        return [Collective("ep", "all-to-all", sent), Collective("ep", "all-to-all", sent)]

    def split_needs(self) -> list[SplitNeed]:
        """Whole experts on each EP rank (Megatron-Core's MoELayer asserts num_moe_experts % EP == 0); each expert's
        width over expert TP (its fc1 column-, fc2 row-parallel); the shared expert's over TP, as a dense MLP's."""
        needs = [
            SplitNeed("num_moe_experts", self.experts, "ep", "each expert layer"),
            SplitNeed("moe_ffn_hidden_size", self.expert_ffn, "etp", "each expert's MLP"),
        ]
        if self.shared_ffn:
            needs.append(SplitNeed("moe_shared_expert_intermediate_size", self.shared_ffn, "tp", "the shared expert"))
        return needs

    def shape_problems(self) -> list[Problem]:  # its sizes' rules are the layout's: `plan/expert_rules.py`
        return []


@dataclass(frozen=True)
class LayerGroup:
    """`count` consecutive decoder layers made of the same `blocks`. A family whose layers differ gives its pattern
    as groups in order (`Family.layers`: DeepSeek-V3's first 3 layers dense, then 58 of experts); a family whose
    layers are all alike gives one block tuple (`Family.layer`), one group of every layer."""

    count: int
    blocks: tuple[Block, ...]


def dense_layer(spec: Any) -> tuple[Attention, DenseMLP]:
    """The blocks of a dense decoder layer: attention, then the MLP."""
    return (Attention.of(spec), DenseMLP.of(spec))


def moe_layer(spec: Any) -> tuple[Attention, Block]:
    """The blocks of a Mixture-of-Experts decoder layer: attention, then the experts in place of the MLP; a dense MLP
    where the spec has no experts (num_moe_experts unset), which is what Megatron-Core then builds."""
    return (Attention.of(spec), MoE.of(spec) if spec.num_moe_experts is not None else DenseMLP.of(spec))


#: Every block's Megatron keys, by role (the exporter, the importer and the planner's check of `restore_from` read
#: them through `families.megatron_names`).
MEGATRON_KEYS: dict[str, tuple[str, ...]] = {**Attention.MEGATRON_KEYS, **DenseMLP.MEGATRON_KEYS, **MoE.MEGATRON_KEYS}
