"""A decoder-only transformer as Megatron-Core builds it: the composition of a family's blocks (`families.blocks`)
with the tensors outside the layers (embeddings, positions, final norm, output layer), and the counts and FLOPs every
other part of the package reads. Read `Architecture.of(spec)`, never recount.

Standard library only (the planner and the catalog read it on the fast path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from nemo_recipes.errors import Problem
from nemo_recipes.families.blocks import (
    NORM_EPSILON,
    Attention,
    Block,
    Collective,
    DenseMLP,
    Gemm,
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

    def per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated


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
    """The model Megatron-Core's GPTModel builds for a recipe: its layers are its family's blocks (`Family.layer`)."""

    spec: Shape
    blocks: tuple[Block, ...]

    @classmethod
    def of(cls, spec: Shape) -> "Architecture":
        return cls(spec, get_family(spec.family).layer(spec))

    def block(self, kind: type) -> Optional[Any]:
        """The layer's block of class `kind`, or None."""
        return next((b for b in self.blocks if isinstance(b, kind)), None)

    @property
    def attention(self) -> Union[Attention, MultiLatentAttention]:
        """The layer's attention block, multi-head/grouped-query or multi-latent (both answer `heads`, `head_dim`)."""
        found = self.block(Attention) or self.block(MultiLatentAttention)
        if found is None:  # not user input: a family whose layer lacks attention is a bug of the package
            raise TypeError(f"the {self.spec.family} family's layer has no Attention block: {self.blocks}")
        return found

    @property
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
        """Every size of the layer's blocks that a parallel group must divide, each once, in the blocks' order."""
        return list(dict.fromkeys(need for block in self.blocks for need in block.split_needs()))

    def shape_problems(self) -> list[Problem]:
        """What the blocks say about their own shapes, whatever the layout."""
        return [p for block in self.blocks for p in block.shape_problems()]

    def layer_params(self) -> LayerParams:
        tensors = self.layer_tensors()
        return LayerParams(
            sharded=sum(t.numel for t in tensors if t.split != "replicated"),
            replicated=sum(t.numel for t in tensors if t.split == "replicated"),
        )

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
    def num_parameters(self) -> int:
        """Exact parameter count of the model NeMo builds (Narayanan et al. 2021, Eq. 2, is the GPT-3 case)."""
        per_layer = self.layer_params()
        layers = self.spec.num_layers * (per_layer.sharded + per_layer.replicated)
        return layers + self.embedding_params + self.position_params + self.norm_params

    def forward_flops_per_token(self) -> TokenFlops:
        """Forward FLOPs per token of the whole model (perf-model.md 2.2): 2 per weight of the layers' GEMMs, the
        attention's scores and attention over V, `2·h·V` for the logits."""
        s = self.spec
        dense = 2.0 * sum(block.weight_macs_per_token() for block in self.blocks)
        attention = sum(block.attention_flops_per_token(s.seq_length) for block in self.blocks)
        return TokenFlops(
            dense=s.num_layers * dense,
            attention=s.num_layers * attention,
            logits=2.0 * s.hidden_size * s.padded_vocab_size,
        )


__all__ = ["NORM_EPSILON", "Architecture", "LayerParams", "Shape", "Split", "SplitNeed", "Tensor", "TokenFlops"]
