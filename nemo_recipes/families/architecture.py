"""A decoder-only transformer as Megatron-Core builds it: the composition of a family's blocks (`families.blocks`)
with the tensors outside the layers (embeddings, positions, final norm, output layer), and the counts and FLOPs every
other part of the package reads. Read `Architecture.of(spec)`, never recount.

Standard library only (the planner and the catalog read it on the fast path).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional, Union

from nemo_recipes.errors import Problem
from nemo_recipes.families.blocks import (
    NORM_EPSILON,
    Attention,
    Block,
    Collective,
    DenseMLP,
    Gemm,
    LayerGroup,
    MoE,
    Shape,
    Split,
    SplitNeed,
    Tensor,
    norm,
)
from nemo_recipes.families.latent_attention import MultiLatentAttention
from nemo_recipes.families.registry import get_family


@dataclass(frozen=True)
class LayerParams:
    """One transformer layer's parameters, split by how TP stores them."""

    sharded: int  # column/row-parallel weights and column-parallel biases: divided by TP
    replicated: int  # row-parallel biases and norms: a full copy on every TP rank
    expert: int = 0  # routed experts' tensors: divided by EP (whole experts) x ETP (each expert's matrices)

    def per_rank(self, tp: int, expert_split: int = 1) -> float:
        """On one GPU at TP `tp`, with the routed experts over `expert_split` = EP x ETP GPUs."""
        return self.sharded / tp + self.replicated + self.expert / expert_split

    @property
    def total(self) -> int:
        return self.sharded + self.replicated + self.expert


@dataclass(frozen=True)
class TokenFlops:
    """Forward FLOPs per token, split by kind of work (the backward pass costs twice each)."""

    dense: float  # the weight GEMMs of every layer, summed over layers
    attention: float  # scores and attention-over-V, summed over layers, full s x s (no causal discount)
    logits: float  # the output layer

    @property
    def forward(self) -> float:
        return self.dense + self.attention + self.logits

    @property
    def model(self) -> float:
        """Training FLOPs per token without recomputation: 3 x forward."""
        return 3.0 * self.forward


@dataclass(frozen=True)
class Architecture:
    """The model Megatron-Core's GPTModel builds for a recipe: its layers are its family's blocks, in groups of alike
    layers (`Family.pattern`: one group where every layer is the same). The counts and FLOPs of the whole model sum
    over the groups exactly; the per-layer answers (`layer_tensors`, `layer_params`, `layer_gemms`, ...) are those
    of `blocks`, the most numerous group's layer, which is every layer where the family has one kind; `alone(group)`
    answers them for another group's layers, and `layers_in` says which groups a range of layers (a pipeline stage's)
    holds."""

    spec: Shape
    groups: tuple[LayerGroup, ...]

    @classmethod
    def of(cls, spec: Shape) -> "Architecture":
        groups = get_family(spec.family).pattern(spec)
        if sum(group.count for group in groups) != spec.num_layers:  # a family's pattern is the package's, not input
            raise ValueError(f"the {spec.family} family's layer groups {groups} do not add up to {spec.num_layers}")
        return cls(spec, groups)

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The blocks of the most numerous group's layers (the first such group on a tie)."""
        return max(self.groups, key=lambda group: group.count).blocks

    @property
    def uniform(self) -> bool:
        """Whether every layer is made of the same blocks."""
        return len({group.blocks for group in self.groups}) == 1

    @property
    def moe(self) -> Optional[MoE]:
        """The Mixture-of-Experts block of the model's expert layers, or None for a dense model."""
        return next((b for group in self.groups for b in group.blocks if isinstance(b, MoE)), None)

    def block(self, kind: type) -> Optional[Any]:
        """The layer's block of class `kind`, or None."""
        return next((b for b in self.blocks if isinstance(b, kind)), None)

    @cached_property  # the rules read it on every layout a plan search tries
    def attention(self) -> Union[Attention, MultiLatentAttention]:
        """The layer's attention block, multi-head/grouped-query or multi-latent (both answer `heads`, `head_dim`)."""
        found = self.block(Attention) or self.block(MultiLatentAttention)
        if found is None:  # not user input: a family whose layer lacks attention is a bug of the package
            raise TypeError(f"the {self.spec.family} family's layer has no Attention block: {self.blocks}")
        return found

    @cached_property
    def mlp(self) -> Optional[DenseMLP]:
        """The dense MLP, where the layer has one (a Mixture-of-Experts layer has none)."""
        return self.block(DenseMLP)

    def layer_tensors(self) -> list[Tensor]:
        """One transformer layer: each block's tensors, in the layer's order."""
        return [t for block in self.blocks for t in block.tensors()]

    def global_tensors(self) -> list[Tensor]:
        """The tensors outside the layers: word embeddings (the padded vocabulary), a learned position table, the
        final norm, and an output layer unless it is tied to the embeddings."""
        s, h = self.spec, self.spec.hidden_size
        tensors = [Tensor("embedding.weight", (s.padded_vocab_size, h), "column")]
        if s.position_embedding_type == "learned_absolute":
            tensors.append(Tensor("position.weight", (s.seq_length, h), "replicated"))
        tensors += norm("final_norm", h, s.normalization)
        if not s.share_embeddings:
            tensors.append(Tensor("output.weight", (s.padded_vocab_size, h), "column"))
        return tensors

    def layer_gemms(self) -> list[Gemm]:
        """The weight GEMMs of one layer, in the order its blocks run them."""
        return [g for block in self.blocks for g in block.gemms()]

    def layer_collectives(self) -> list[Collective]:
        return [c for block in self.blocks for c in block.collectives()]

    def stored_activations_per_sbh(self) -> float:
        """What one layer's blocks store for the backward pass per s·b·h, before TP divides it (the replicated
        norms' and dropouts' are the memory model's)."""
        total = 0.0
        for block in self.blocks:
            total += block.stored_activations_per_sbh()
        return total

    def split_needs(self) -> list[SplitNeed]:
        """Every size of the layers' blocks (every group's) that a parallel group must divide, each once, in the
        blocks' order."""
        return list(self._split_needs)

    @cached_property
    def _split_needs(self) -> tuple[SplitNeed, ...]:  # the rules ask on every layout a plan search tries
        return tuple(dict.fromkeys(need for g in self.groups for block in g.blocks for need in block.split_needs()))

    def shape_problems(self) -> list[Problem]:
        """What the blocks say about their own shapes, whatever the layout."""
        return list(dict.fromkeys(p for g in self.groups for block in g.blocks for p in block.shape_problems()))

    def alone(self, group: LayerGroup) -> "Architecture":
        """The per-layer answers (`blocks`, `layer_gemms`, `stored_activations_per_sbh`, `moe`, ...) of `group`'s
        layers: an Architecture of that group only, whose whole-model counts are not the model's."""
        return self if self.groups == (group,) else Architecture(self.spec, (group,))

    def layers_in(self, start: int, end: int) -> list[tuple[int, LayerGroup]]:
        """How many of the decoder layers [start, end) each group holds, first layers first (a pipeline stage's:
        DeepSeek-V3's first stages hold its dense layers); groups holding none left out."""
        return [
            (n, g) for n, g in zip(overlaps([g.count for g in self.groups], start, end), self.groups, strict=True) if n
        ]

    def group_params(self) -> list[tuple[int, LayerParams]]:
        """Each group's layer count and one of its layers' parameters, first layers first."""
        return [(g.count, _params([t for b in g.blocks for t in b.tensors()])) for g in self.groups]

    def mtp_params(self) -> LayerParams:
        """Every multi-token prediction layer's parameters (Megatron-Core builds them on the last pipeline stage)."""
        one = _params(self.mtp_tensors()) if self.mtp_layers else LayerParams(0, 0)
        n = self.mtp_layers
        return LayerParams(n * one.sharded, n * one.replicated, n * one.expert)

    def layer_params(self) -> LayerParams:
        return _params([t for block in self.blocks for t in block.tensors()])

    @property
    def norm_params(self) -> int:
        return sum(t.numel for t in norm("final_norm", self.spec.hidden_size, self.spec.normalization))

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
    def mtp_layers(self) -> int:
        """Multi-token prediction layers (`mtp_num_layers`; none unless set)."""
        return getattr(self.spec, "mtp_num_layers", None) or 0

    def mtp_tensors(self) -> list[Tensor]:
        """One multi-token prediction layer's tensors (Megatron-Core's MultiTokenPredictionLayer; DeepSeek-V3,
        arXiv:2412.19437, Sec. 2.2): norms of the hidden state and of the next token's embedding, their
        concatenation projected back to hidden (`eh_proj`, column-parallel), a decoder layer built as the last one
        (get_gpt_mtp_block_spec takes the decoder's last layer spec), and its own final norm; the embedding and
        the output layer are the model's, shared."""
        h, n = self.spec.hidden_size, self.spec.normalization
        own = [*norm("mtp.enorm", h, n), *norm("mtp.hnorm", h, n), Tensor("mtp.eh_proj.weight", (h, 2 * h), "column")]
        return [*own, *norm("mtp.final_norm", h, n), *(t for b in self.groups[-1].blocks for t in b.tensors())]

    @property
    def num_parameters(self) -> int:
        """Exact parameter count of the model NeMo builds (Narayanan et al. 2021, Eq. 2, is the GPT-3 case): every
        group's layers, the multi-token prediction layers, the embeddings, the positions, the final norm."""
        layers = sum(g.count * _params([t for b in g.blocks for t in b.tensors()]).total for g in self.groups)
        layers += self.mtp_layers * sum(t.numel for t in self.mtp_tensors())
        return layers + self.embedding_params + self.position_params + self.norm_params

    @property
    def active_parameters(self) -> int:
        """The parameters one token's forward pass uses: all of them less, in every expert layer (a multi-token
        prediction layer's too), the experts the router does not send it to (`MoE.idle_params_per_token`). A dense
        model's is its total."""
        groups = (*self.groups, LayerGroup(self.mtp_layers, self.groups[-1].blocks))
        idle = sum(g.count * b.idle_params_per_token for g in groups for b in g.blocks if isinstance(b, MoE))
        return self.num_parameters - idle

    def forward_flops_per_token(self) -> TokenFlops:
        """Forward FLOPs per token of the whole model (perf-model.md 2.2): 2 per weight of the layers' GEMMs (a
        Mixture of Experts': the active ones, `MoE.weight_macs_per_token`), the attention's scores and attention
        over V, `2·h·V` for the logits; each multi-token prediction layer adds its projection, a last layer's work
        and the logits once more."""
        s, mtp = self.spec, self.mtp_layers
        groups = (*self.groups, LayerGroup(mtp, self.groups[-1].blocks))
        dense = sum(g.count * 2.0 * sum(b.weight_macs_per_token() for b in g.blocks) for g in groups)
        dense += mtp * 2.0 * 2 * s.hidden_size * s.hidden_size  # eh_proj: 2h -> h
        attention = sum(g.count * sum(b.attention_flops_per_token(s.seq_length) for b in g.blocks) for g in groups)
        logits = (1 + mtp) * 2.0 * s.hidden_size * s.padded_vocab_size
        return TokenFlops(dense=dense, attention=attention, logits=logits)


def overlaps(counts: list[int], start: int, end: int) -> list[int]:
    """How many of the layers [start, end) fall in each of consecutive groups of `counts` layers."""
    found, at = [], 0
    for count in counts:
        found.append(max(0, min(end, at + count) - max(start, at)))
        at += count
    return found


def _params(tensors: list[Tensor]) -> LayerParams:
    """Tensors' parameters by how they are split: over TP, whole on every TP rank, or over EP x ETP."""
    return LayerParams(
        sharded=sum(t.numel for t in tensors if t.split in ("column", "row")),
        replicated=sum(t.numel for t in tensors if t.split == "replicated"),
        expert=sum(t.numel for t in tensors if t.split == "expert"),
    )


__all__ = [
    "NORM_EPSILON",
    "Architecture",
    "LayerGroup",
    "LayerParams",
    "Shape",
    "Split",
    "SplitNeed",
    "Tensor",
    "TokenFlops",
]
