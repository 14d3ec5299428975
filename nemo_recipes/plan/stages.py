"""A pipeline stage's time per layer for the throughput model: each layer timed as its own group's (DeepSeek-V3's
dense first layers apart from its expert layers), a stage's layers as their mean layer. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.families.architecture import LayerGroup
from nemo_recipes.plan.experts import NONE as NO_EXPERTS
from nemo_recipes.plan.experts import ExpertTimes
from nemo_recipes.plan.layout import Layout


@dataclass(frozen=True)
class LayerTimes:
    """One transformer layer and one micro-batch on one GPU: forward and backward seconds by kind of work."""

    dense_f: float
    dense_b: float
    attention_f: float
    attention_b: float
    memory_f: float
    memory_b: float
    tp_f: float
    tp_b: float
    cp_f: float
    cp_b: float
    recompute: float
    experts: ExpertTimes = NO_EXPERTS  # a Mixture of Experts' routed experts (`experts.expert_times`)

    @property
    def forward(self) -> float:
        e = self.experts
        return self.dense_f + self.attention_f + self.memory_f + self.tp_f + self.cp_f + e.forward

    @property
    def backward(self) -> float:
        e = self.experts
        return self.dense_b + self.attention_b + self.memory_b + self.tp_b + self.cp_b + self.recompute + e.backward


#: A pipeline stage: its count of layers and their mean layer (`mean_layer`).
Stage = tuple[int, LayerTimes]


def mean_layer(held: list[tuple[int, LayerTimes]]) -> LayerTimes:
    """The layer whose times are the mean of the `held` counts of layers: a stage of them takes their sum."""
    if len(held) == 1:
        return held[0][1]
    total = sum(n for n, _ in held)

    def mean(parts: list[tuple[int, Any]], kind: type) -> dict[str, Any]:
        names = [f.name for f in fields(kind) if f.name != "experts"]
        return {x: sum(n * getattr(part, x) for n, part in parts) / total for x in names}

    experts = ExpertTimes(**mean([(n, layer.experts) for n, layer in held], ExpertTimes))
    return LayerTimes(**mean(held, LayerTimes), experts=experts)


def stages(spec: RecipeSpec, layout: Layout, layers: dict[LayerGroup, LayerTimes]) -> tuple[Stage, Stage, Stage]:
    """The first stage, the slowest middle one (the first's layers where there is none) and the last with the
    multi-token prediction layers (their `eh_proj` GEMM left out): each's count of layers and their mean layer, each
    layer its group's (DeepSeek-V3's dense first layers on the first)."""
    arch, n, g = layout.architecture, spec.num_layers, layout.architecture.groups[-1]
    last_start, mtp = n - layout.layers_last_stage, arch.mtp_layers
    if len(arch.groups) == 1 and not mtp:  # every stage's layers are the one layer: its own mean, on every stage
        one = layers[g]
        return (layout.layers_first_stage, one), (layout.layers_per_stage, one), (layout.layers_last_stage, one)

    def stage(start: int, end: int) -> LayerTimes:  # a stage of no layers (the embedding's or the loss's): any layer
        return mean_layer([(held, layers[g]) for held, g in arch.layers_in(start, end)] or [(0, layers[g])])

    first = (layout.layers_first_stage, stage(0, layout.layers_first_stage))
    starts = range(layout.layers_first_stage, last_start, max(1, layout.layers_per_stage))
    middles = [stage(a, min(a + layout.layers_per_stage, last_start)) for a in starts] if layout.pp > 2 else []
    middle = max(middles, key=lambda x: x.forward + x.backward, default=first[1])
    last = [(held, layers[group]) for held, group in arch.layers_in(last_start, n)]
    last += [(mtp, layers[g])] if mtp else []  # its decoder layer is built as the last one (`Architecture.mtp_tensors`)
    last_layer = mean_layer(last) if last else layers[g]
    return first, (layout.layers_per_stage, middle), (layout.layers_last_stage + mtp, last_layer)
