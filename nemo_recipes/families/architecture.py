"""A decoder-only transformer's architecture as Megatron-Core builds it: the tensors of one layer with their shapes
and how tensor parallelism stores them, and the counts and FLOPs every other part of the package reads.

Standard library only (the planner and the catalog read it on the fast path). Both families share this arithmetic:
what differs between GPT and Llama (gating, biases, norms, positions, tied output layer) are recipe values that the
shapes below take as they are, so one formula cannot drift from another.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from nemo_recipes.frozen_dataclass import frozen_dataclass

#: How tensor parallelism stores a tensor: column-parallel (split along its output rows), row-parallel (split along
#: its input columns), or a full copy on every TP rank.
Split = Literal["column", "row", "replicated"]

#: The norms' epsilon: Megatron-Core's default (TransformerConfig.layernorm_epsilon), the recipes' `norm_epsilon` unless
#: a family sets another; the only one `hf import` accepts for a GPT-2 or Llama model.
NORM_EPSILON = 1e-5


class Shape(Protocol):
    """The recipe values the architecture reads (a `catalog.RecipeSpec` has them all): a protocol rather than the
    class, so that this module stays below the catalog, which reads it."""

    @property
    def num_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def ffn_hidden_size(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def kv_groups(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def seq_length(self) -> int: ...
    @property
    def padded_vocab_size(self) -> int: ...
    @property
    def normalization(self) -> str: ...
    @property
    def gated_linear_unit(self) -> bool: ...
    @property
    def add_bias_linear(self) -> bool: ...
    @property
    def share_embeddings(self) -> bool: ...
    @property
    def position_embedding_type(self) -> str: ...
    @property
    def qk_layernorm(self) -> bool: ...


@frozen_dataclass
class Tensor:
    """One parameter tensor of a transformer layer, named by its role (Megatron's state-dict keys differ between its
    local and Transformer Engine layer specs; the roles do not)."""

    role: str
    shape: tuple[int, ...]
    split: Split

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


@frozen_dataclass
class LayerParams:
    """One transformer layer's parameters, split by how TP stores them."""

    sharded: int  # column/row-parallel weights and column-parallel biases: divided by TP
    replicated: int  # row-parallel biases and norms: a full copy on every TP rank

    def per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated


@frozen_dataclass
class TokenFlops:
    """Forward FLOPs per token, split by kind of work (the backward pass costs twice each)."""

    dense: float  # the four linear layers of every transformer layer, summed over layers
    attention: float  # scores and attention-over-V, summed over layers, full s x s (no causal discount)
    logits: float  # the output layer

    @property
    def forward(self) -> float:
        return self.dense + self.attention + self.logits

    @property
    def model(self) -> float:
        """Training FLOPs per token without recomputation: 3 x forward."""
        return 3.0 * self.forward


@frozen_dataclass
class Architecture:
    """The model Megatron-Core's GPTModel builds for a recipe: read `Architecture.of(spec)`, never recount."""

    spec: Shape

    @classmethod
    def of(cls, spec: Shape) -> "Architecture":
        return cls(spec)

    @property
    def query_width(self) -> int:
        return self.spec.num_attention_heads * self.spec.head_dim

    @property
    def kv_width(self) -> int:
        return self.spec.kv_groups * self.spec.head_dim

    @property
    def fc1_width(self) -> int:
        """Gated MLPs keep the gate and the up projection in one fc1, 2 x FFN wide (Megatron-Core's linear_fc1)."""
        return (2 if self.spec.gated_linear_unit else 1) * self.spec.ffn_hidden_size

    def norm(self, role: str, width: int = 0) -> list[Tensor]:
        """LayerNorm has a weight and a bias, RMSNorm a weight only; `width` channels (hidden_size unless given)."""
        h = width or self.spec.hidden_size
        tensors = [Tensor(f"{role}.weight", (h,), "replicated")]
        if self.spec.normalization == "LayerNorm":
            tensors.append(Tensor(f"{role}.bias", (h,), "replicated"))
        return tensors

    def layer_tensors(self) -> list[Tensor]:
        """One transformer layer: the fused QKV projection (queries heads x head_dim wide, keys and values query
        groups x head_dim each) and FC1 are column-parallel, the output projection and FC2 row-parallel, whose
        biases every TP rank holds whole; no biases with add_bias_linear off; two norms. With qk_layernorm, a norm of
        head_dim channels shared by every query head and one by every key head (Megatron-Core's q_layernorm and
        k_layernorm), which every TP rank holds whole."""
        s, h, ffn = self.spec, self.spec.hidden_size, self.spec.ffn_hidden_size
        qkv = self.query_width + 2 * self.kv_width
        qk_norms = [*self.norm("q_norm", s.head_dim), *self.norm("k_norm", s.head_dim)] if s.qk_layernorm else []
        tensors = [
            *self.norm("input_norm"),
            Tensor("qkv.weight", (qkv, h), "column"),
            *qk_norms,
            Tensor("proj.weight", (h, self.query_width), "row"),
            *self.norm("pre_mlp_norm"),
            Tensor("fc1.weight", (self.fc1_width, h), "column"),
            Tensor("fc2.weight", (h, ffn), "row"),
        ]
        if s.add_bias_linear:
            tensors += [
                Tensor("qkv.bias", (qkv,), "column"),
                Tensor("proj.bias", (h,), "replicated"),
                Tensor("fc1.bias", (self.fc1_width,), "column"),
                Tensor("fc2.bias", (h,), "replicated"),
            ]
        return tensors

    def global_tensors(self) -> list[Tensor]:
        """The tensors outside the layers: word embeddings (the padded vocabulary), a learned position table, the
        final norm, and an output layer unless it is tied to the embeddings."""
        s, h = self.spec, self.spec.hidden_size
        tensors = [Tensor("embedding.weight", (s.padded_vocab_size, h), "column")]
        if s.position_embedding_type == "learned_absolute":
            tensors.append(Tensor("position.weight", (s.seq_length, h), "replicated"))
        tensors += self.norm("final_norm")
        if not s.share_embeddings:
            tensors.append(Tensor("output.weight", (s.padded_vocab_size, h), "column"))
        return tensors

    def split_qkv(self, qkv: Any) -> tuple[Any, Any, Any]:
        """Megatron's fused QKV rows as (queries, keys, values), each in head order. Megatron groups them by query
        group: the group's query heads, then its key head, then its value head. A weight [rows, in] or a bias
        [rows]; tensor methods only, so that this module imports no torch."""
        s, rest = self.spec, tuple(qkv.shape[1:])
        per_group = s.num_attention_heads // s.kv_groups
        grouped = qkv.reshape(s.kv_groups, per_group + 2, s.head_dim, *rest)
        return (
            grouped[:, :per_group].reshape(self.query_width, *rest),
            grouped[:, per_group].reshape(self.kv_width, *rest),
            grouped[:, per_group + 1].reshape(self.kv_width, *rest),
        )

    @staticmethod
    def concat_rows(*tensors: Any) -> Any:
        """The tensors one after the other along their first axis (torch.cat without importing torch)."""
        total = sum(t.shape[0] for t in tensors)
        out = tensors[0].new_empty((total, *tensors[0].shape[1:]))
        start = 0
        for t in tensors:
            out[start : start + t.shape[0]] = t
            start += t.shape[0]
        return out

    def merge_qkv(self, q: Any, k: Any, v: Any) -> Any:
        """The inverse of `split_qkv`: queries, keys and values in head order as Megatron's fused, grouped rows."""
        s, rest = self.spec, tuple(q.shape[1:])
        per_group = s.num_attention_heads // s.kv_groups
        grouped = q.new_empty((s.kv_groups, per_group + 2, s.head_dim, *rest))
        grouped[:, :per_group] = q.reshape(s.kv_groups, per_group, s.head_dim, *rest)
        grouped[:, per_group] = k.reshape(s.kv_groups, s.head_dim, *rest)
        grouped[:, per_group + 1] = v.reshape(s.kv_groups, s.head_dim, *rest)
        return grouped.reshape(-1, *rest)

    def layer_params(self) -> LayerParams:
        tensors = self.layer_tensors()
        return LayerParams(
            sharded=sum(t.numel for t in tensors if t.split != "replicated"),
            replicated=sum(t.numel for t in tensors if t.split == "replicated"),
        )

    @property
    def norm_params(self) -> int:
        return sum(t.numel for t in self.norm("final_norm"))

    @property
    def embedding_params(self) -> int:
        """Word embeddings (the padded vocabulary), an output layer unless tied."""
        return self.spec.padded_vocab_size * self.spec.hidden_size * (1 if self.spec.share_embeddings else 2)

    @property
    def position_params(self) -> int:
        """A learned position table; RoPE has no parameters."""
        learned = self.spec.position_embedding_type == "learned_absolute"
        return self.spec.seq_length * self.spec.hidden_size if learned else 0

    @property
    def num_parameters(self) -> int:
        """Exact parameter count of the model NeMo builds (Narayanan et al. 2021, Eq. 2, is the GPT-3 case)."""
        per_layer = self.layer_params()
        layers = self.spec.num_layers * (per_layer.sharded + per_layer.replicated)
        return layers + self.embedding_params + self.position_params + self.norm_params

    def forward_flops_per_token(self) -> TokenFlops:
        """Forward FLOPs per token of the whole model (perf-model.md 2.2): 2 per weight of the four linear layers,
        `4·s·q` for the attention scores and attention over V, `2·h·V` for the logits."""
        s = self.spec
        q, kv, h = self.query_width, self.kv_width, s.hidden_size
        dense = 2.0 * (h * (q + 2 * kv) + q * h + h * self.fc1_width + s.ffn_hidden_size * h)
        attention = 4.0 * s.seq_length * q
        return TokenFlops(
            dense=s.num_layers * dense, attention=s.num_layers * attention, logits=2.0 * h * s.padded_vocab_size
        )
