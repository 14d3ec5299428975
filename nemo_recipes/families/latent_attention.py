"""Multi-latent attention, the attention block of DeepSeek-V2 and V3: the same questions as `blocks.Attention`
(tensors with their TP split, Megatron keys, MACs, attention FLOPs, stored activations, GEMMs, collectives, split
needs), answered for queries and keys/values compressed to low-rank latents. Standard library only: the planner and
the catalog read it on the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from nemo_recipes.errors import Problem
from nemo_recipes.families.blocks import Collective, Gemm, SplitNeed, Tensor, norm


@dataclass(frozen=True)
class MultiLatentAttention:
    """Multi-latent attention with its pre-norm (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1; DeepSeek-V3,
    arXiv:2412.19437, Sec. 2.1.1), as Megatron-Core's MLASelfAttention builds it
    (megatron/core/transformer/multi_latent_attention.py): queries are compressed to a `q_lora_rank` latent
    (`q_down`), normalised and expanded to every head's `qk_head_dim` channels without position plus
    `rope_dim` rotary ones (`q_up`); keys and values share one `kv_lora_rank` latent, projected down together with
    one rotary key of `rope_dim` channels shared by all heads (`kv_down`), normalised and expanded to each head's
    key (`qk_head_dim`) and value (`v_head_dim`) channels (`kv_up`); the output projection reads heads x v_head_dim.
    Without `q_lora_rank` (DeepSeek-V2-Lite) the queries come straight from the hidden state (`q_proj`).

    Tensor parallelism, as Transformer Engine's layer spec (the one NeMo builds on GPUs) splits it: both down
    projections are TE `Linear(parallel_mode="duplicated")`, a full copy on every TP rank (under sequence parallelism
    each runs on its own tokens); the up projections are column-parallel by heads, the output projection
    row-parallel. Megatron's local spec makes the down projections column-parallel and gathers their outputs; the
    global shapes are the same."""

    hidden: int
    heads: int
    q_lora_rank: Optional[int]
    kv_lora_rank: int
    qk_head_dim: int
    rope_dim: int
    v_head_dim: int
    normalization: str

    #: Keys under `module.decoder.layers.`: Transformer Engine's spec first (its query and key/value latent norms are
    #: fused into the up projections; the input norm stays apart, `input_layernorm`, in both specs), then the local
    #: spec's (megatron/core/models/gpt/gpt_layer_specs.py, multi_latent_attention=True).
    MEGATRON_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "mla_input_norm.weight": ("input_layernorm.weight",),
        "mla_input_norm.bias": ("input_layernorm.bias",),
        "q_proj.weight": ("self_attention.linear_q_proj.weight",),
        "q_down.weight": ("self_attention.linear_q_down_proj.weight",),
        "q_latent_norm.weight": (
            "self_attention.linear_q_up_proj.layer_norm_weight",
            "self_attention.q_layernorm.weight",
        ),
        "q_latent_norm.bias": ("self_attention.linear_q_up_proj.layer_norm_bias", "self_attention.q_layernorm.bias"),
        "q_up.weight": ("self_attention.linear_q_up_proj.weight",),
        "kv_down.weight": ("self_attention.linear_kv_down_proj.weight",),
        "kv_latent_norm.weight": (
            "self_attention.linear_kv_up_proj.layer_norm_weight",
            "self_attention.kv_layernorm.weight",
        ),
        "kv_latent_norm.bias": ("self_attention.linear_kv_up_proj.layer_norm_bias", "self_attention.kv_layernorm.bias"),
        "kv_up.weight": ("self_attention.linear_kv_up_proj.weight",),
        "proj.weight": ("self_attention.linear_proj.weight",),
    }

    @classmethod
    def of(cls, spec: Any) -> "MultiLatentAttention":
        return cls(
            hidden=spec.hidden_size,
            heads=spec.num_attention_heads,
            q_lora_rank=spec.q_lora_rank,
            kv_lora_rank=spec.kv_lora_rank,
            qk_head_dim=spec.qk_head_dim,
            rope_dim=spec.qk_pos_emb_head_dim,
            v_head_dim=spec.v_head_dim,
            normalization=spec.normalization,
        )

    @property
    def q_head_dim(self) -> int:
        """A query's (and a key's) channels: the unrotated ones and the rotary ones."""
        return self.qk_head_dim + self.rope_dim

    @property
    def head_dim(self) -> int:
        """The attention kernel's head dimension (that of queries and keys; values are v_head_dim)."""
        return self.q_head_dim

    @property
    def query_width(self) -> int:
        return self.heads * self.q_head_dim

    @property
    def kv_up_width(self) -> int:
        return self.heads * (self.qk_head_dim + self.v_head_dim)

    @property
    def value_width(self) -> int:
        """The output projection's input: every head's value channels."""
        return self.heads * self.v_head_dim

    def tensors(self) -> list[Tensor]:
        h = self.hidden
        tensors = [*norm("mla_input_norm", h, self.normalization)]
        if self.q_lora_rank:
            tensors += [
                Tensor("q_down.weight", (self.q_lora_rank, h), "replicated"),
                *norm("q_latent_norm", self.q_lora_rank, self.normalization),
                Tensor("q_up.weight", (self.query_width, self.q_lora_rank), "column"),
            ]
        else:
            tensors.append(Tensor("q_proj.weight", (self.query_width, h), "column"))
        return [
            *tensors,
            Tensor("kv_down.weight", (self.kv_lora_rank + self.rope_dim, h), "replicated"),
            *norm("kv_latent_norm", self.kv_lora_rank, self.normalization),
            Tensor("kv_up.weight", (self.kv_up_width, self.kv_lora_rank), "column"),
            Tensor("proj.weight", (h, self.value_width), "row"),
        ]

    def weight_macs_per_token(self) -> int:
        return sum(g.k * g.n for g in self.gemms())

    def attention_flops_per_token(self, seq: int) -> float:
        """Scores over queries and keys of q_head_dim channels, attention over values of v_head_dim, the full s x s
        (no causal discount): `2·s·heads·(q_head_dim + v_head_dim)`, `4·s·q` when both widths are equal."""
        return 2.0 * seq * self.heads * (self.q_head_dim + self.v_head_dim)

    def gemms(self) -> list[Gemm]:
        h = self.hidden
        queries = (
            [Gemm(h, self.q_lora_rank, "replicated"), Gemm(self.q_lora_rank, self.query_width, "column")]
            if self.q_lora_rank
            else [Gemm(h, self.query_width, "column")]
        )
        return [
            *queries,
            Gemm(h, self.kv_lora_rank + self.rope_dim, "replicated"),
            Gemm(self.kv_lora_rank, self.kv_up_width, "column"),
            Gemm(self.value_width, h, "row"),
        ]

    def stored_latents_per_sbh(self) -> float:
        """Bytes per s·b·h of the compressed latents (BF16): the query latent and the key/value latent, each kept
        as its norm's input and as its up projection's input. What the layer keeps of its attention when the up
        projections are recomputed (Megatron-Core's `recompute_modules=["mla_up_proj"]`, which NeMo 2.7.3's
        deepseek_v3 recipe sets: MLASelfAttention checkpoints them with CheckpointWithoutOutput and recomputes
        queries, keys and values in the backward; DeepSeek-V3 report, Sec. 3.2.3, 'Recomputation of RMSNorm and
        MLA Up-Projection')."""
        return 4.0 * ((self.q_lora_rank or 0) + self.kv_lora_rank) / self.hidden

    def stored_activations_per_sbh(self) -> float:
        """Bytes per s·b·h this block stores beyond the replicated norms and dropouts, before TP divides them (the
        same counting as `Attention`'s, Korthikanti et al. 2022, Table 2): the latents (`stored_latents_per_sbh`),
        then queries and keys of q_head_dim channels a head, values and the projection's input of v_head_dim."""
        up = 4.0 * self.heads * (self.q_head_dim + self.v_head_dim) / self.hidden
        return self.stored_latents_per_sbh() + up

    def collectives(self) -> list[Collective]:
        """Under sequence parallelism the up projections gather the latents (and the shared rotary key) over TP, not
        the hidden state, and the output projection reduce-scatters the hidden state; with CP, every head's keys and
        values go round the ring (Megatron-Core expands them before its attention core)."""
        gathered = (self.q_lora_rank or self.hidden) + self.kv_lora_rank + self.rope_dim
        return [
            Collective("tp", "all-gather", gathered),
            Collective("tp", "reduce-scatter", self.hidden),
            Collective("cp", "ring", self.heads * (self.q_head_dim + self.v_head_dim)),
        ]

    def split_needs(self) -> list[SplitNeed]:
        """The up projections split whole heads over TP (TransformerConfig: `num_attention_heads %
        tensor_model_parallel_size`); the down projections are whole on every rank."""
        return [SplitNeed("num_attention_heads", self.heads, "tp", "attention heads")]

    def shape_problems(self) -> list[Problem]:
        return [*self.head_problems(), *self.rotary_problems()]

    def head_problems(self) -> list[Problem]:
        """None: every width of a head is given (qk_head_dim, qk_pos_emb_head_dim, v_head_dim), not derived from
        the hidden size, and there are no query groups to split the heads into."""
        return []

    def rotary_problems(self) -> list[Problem]:
        """The rotary channels of queries and the shared key are rotated in pairs (Megatron-Core's RotaryEmbedding
        and YarnRotaryEmbedding build one frequency per pair of qk_pos_emb_head_dim)."""
        if self.rope_dim >= 2 and self.rope_dim % 2 == 0:
            return []
        return [
            Problem(
                "qk_pos_emb_head_dim",
                self.rope_dim,
                "RoPE rotates channel pairs: the rotary channels of each query and key must be a positive even number.",
                "set qk_pos_emb_head_dim to an even number, e.g. 64 (DeepSeek-V2 and V3).",
            )
        ]
