"""The parallel layout of a recipe on a cluster: every derived size, computed once and read everywhere.

Standard library only. Validation, memory, throughput, fit, the derived values `show` prints (`derived_values`)
and the NeMo training objects all read `Layout.of(spec, cluster)` (DESIGN.md: "one truth per number"), so
data-parallel size, micro-batches per step, layers per pipeline stage and per model chunk, and parameters per GPU
have one formula each.

`Layout.of` never raises: when the world size or the batch does not divide, the sizes round (DP and micro-batches
down, at least 1; layers per stage and chunk up) and `world_divides`, `batch_divides` and `layers_divide` say so; the
validator's rules turn those flags into problems with a field and a fix.

Pipeline split (Megatron-Core `TransformerConfig`): the layers divide evenly over PP stages and, interleaved, over
VP chunks per stage. With `pipeline_counts_embedding_and_loss` the input embedding and the loss count as one layer
each (`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split`): `l + 2` slots divide over
the stages, and the first and last stages hold one transformer layer fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple, Optional

from nemo_recipes.catalog import DERIVED_SOURCES, RecipeSpec
from nemo_recipes.counts import divisors
from nemo_recipes.families.architecture import Architecture, LayerParams, Shape, overlaps
from nemo_recipes.families.latent_attention import LatentShape
from nemo_recipes.plan.hardware import Cluster

# The values `Architecture` reads (its `Shape`): a plan search lays out one shape hundreds of times, changing only
# parallelism and batch, so the parameter counts of a shape are counted once per process (`_shaped`).
_SHAPE_FIELDS = tuple(n for p in (Shape, LatentShape) for n, value in vars(p).items() if isinstance(value, property))
_SHAPE_KEY = attrgetter(*_SHAPE_FIELDS)  # the tuple of their values, read in C: a plan search reads it per layout


class _Shaped(NamedTuple):
    """What a shape's parameter counts need, counted once per shape: its architecture, one layer's parameters (the
    most numerous group's), the final norm's and the position table's, each group's count and parameters, and the
    multi-token prediction layers'."""

    architecture: Architecture
    layer: LayerParams
    norms: int
    positions: int
    groups: list[tuple[int, LayerParams]]
    mtp: LayerParams


_SHAPED: dict[tuple, _Shaped] = {}


def _shaped(spec: RecipeSpec) -> _Shaped:
    key = _SHAPE_KEY(spec)  # once per layout: a plan search lays out hundreds
    shaped = _SHAPED.get(key)
    if shaped is None:
        a = Architecture.of(spec)
        shaped = _SHAPED[key] = _Shaped(
            a, a.layer_params(), a.norm_params, a.position_params, a.group_params(), a.mtp_params()
        )
    return shaped


def shape_architecture(spec: RecipeSpec) -> Architecture:
    """`Architecture.of(spec)`, built once per shape: the rules ask its blocks for their split needs and shape
    problems on every layout a plan search tries. Read its blocks, not its `spec` (the first of that shape's)."""
    return _shaped(spec).architecture


def layer_params(spec: RecipeSpec) -> LayerParams:
    """One transformer layer split into TP-sharded and replicated parts: the family architecture's tensors
    (`families.architecture.Architecture.layer_tensors`), the model `catalog.parameter_count` counts."""
    return Architecture.of(spec).layer_params()


def norm_params(spec: RecipeSpec) -> int:
    return Architecture.of(spec).norm_params


@dataclass(frozen=True)
class Layout:
    """Sizes of `spec` laid out on `cluster`. Read it; never recompute one of these numbers elsewhere."""

    cluster: Cluster
    tp: int
    pp: int
    cp: int
    vp: int  # model chunks per pipeline rank: 1 without an interleaved schedule
    dp: int  # data-parallel replicas, world / (TP x PP x CP); exact only when world_divides
    world_divides: bool
    micro_batch: int
    global_batch: int
    microbatches: int  # per pipeline and step, B / (b x DP); exact only when batch_divides
    batch_divides: bool
    sequence_parallel: bool
    tokens_per_rank: float  # tokens of one micro-batch on one GPU of a CP group: b x s / CP
    pipeline_slots: int  # layers the pipeline split divides (embedding and loss included when counted)
    layers_divide: bool  # the slots divide over PP stages and VP chunks (Megatron-Core's rule)
    layers_first_stage: int  # transformer layers on the first stage (the one holding the most activations)
    layers_per_stage: int  # transformer layers on the most loaded stage
    layers_last_stage: int  # transformer layers on the last stage (which also runs the output layer)
    layers_per_chunk: int  # per model chunk; recompute_num_layers counts in these
    params_per_rank: float  # parameters held by one GPU of the most loaded stage
    #: The blocks of the spec's shape (`shape_architecture`), which the rules read: not a size, so not compared.
    architecture: Architecture = field(compare=False, repr=False)
    expert_params_per_rank: float = 0.0  # of which routed experts' (split over EP x ETP, sharded over expert DP)
    expert_data_parallel: int = 1  # expert-data-parallel size, world / (ETP x EP x PP): the experts' replicas
    ep: int = 1  # expert parallelism: GPUs the routed experts are split over
    etp: int = 1  # expert tensor parallelism: GPUs each expert's matrices are split over (TP where unset)

    @classmethod
    def of(cls, spec: RecipeSpec, cluster: Optional[Cluster] = None) -> "Layout":
        """The layout of `spec` on `cluster`; without one, on the recipe's own nodes x GPUs per node."""
        if cluster is None:
            cluster = Cluster(nodes=spec.num_nodes, gpus_per_node=spec.num_gpus_per_node)
        t, p, c = spec.tensor_parallel, spec.pipeline_parallel, spec.context_parallel
        v = spec.virtual_pipeline if spec.virtual_pipeline and spec.virtual_pipeline > 1 and p > 1 else 1
        world, model_parallel = cluster.world_size, t * p * c
        dp = max(1, world // model_parallel)
        counted = spec.pipeline_counts_embedding_and_loss and p > 1
        slots = spec.num_layers + (2 if counted else 0)
        stage_slots = math.ceil(slots / p)
        end_layers = stage_slots - (1 if counted else 0)  # the first and last stages give a slot to embedding/loss
        most = stage_slots if (p > 2 or not counted) else end_layers
        first_layers = last_layers = end_layers if p > 1 else spec.num_layers
        uneven = _uneven_stages(spec, p, v)
        if uneven is not None:
            first_layers, most, last_layers, _ = uneven
        divide, chunk = _chunks(spec, p, v, slots, most)
        shaped = _shaped(spec)
        layout = cls(
            cluster=cluster,
            tp=t,
            pp=p,
            cp=c,
            vp=v,
            dp=dp,
            world_divides=world % model_parallel == 0,
            sequence_parallel=spec.sequence_parallel_enabled and t > 1,
            pipeline_slots=slots,
            layers_divide=divide,
            layers_first_stage=first_layers,
            layers_per_stage=most,
            layers_last_stage=last_layers,
            layers_per_chunk=chunk,
            params_per_rank=0.0,
            architecture=shaped.architecture,
            **_batch_sizes(spec, dp, c),
        )
        object.__setattr__(layout, "params_per_rank", _params_per_rank(spec, layout, shaped))
        if spec.num_moe_experts is not None:
            experts = _expert_params_per_rank(spec, layout, shaped)
            object.__setattr__(layout, "expert_params_per_rank", experts)
            expert_model = spec.expert_tensor_parallel_size * spec.expert_parallel * p
            object.__setattr__(layout, "expert_data_parallel", max(1, world // expert_model))
            object.__setattr__(layout, "ep", spec.expert_parallel)
            object.__setattr__(layout, "etp", spec.expert_tensor_parallel_size)
        return layout

    def batched(self, spec: RecipeSpec) -> "Layout":
        """`Layout.of` of `spec` where this is the layout on the same cluster of a spec that differs from `spec` only
        in the micro batch and the global batch: they change the micro-batches and a micro-batch's tokens, not the
        stages or the parameters (a plan search tries several micro batches on each layout)."""
        layout = object.__new__(Layout)  # the fields copied, as in `interleaved_by`
        layout.__dict__.update(self.__dict__, **_batch_sizes(spec, self.dp, self.cp))
        return layout

    def interleaved_by(self, spec: RecipeSpec, v: int) -> "Layout":
        """`Layout.of` of `spec` with `v` > 1 model chunks per pipeline rank, where this is `spec`'s layout without
        interleaving on the same cluster (PP > 1): the chunks change whether the layers divide and the layers of a
        chunk, not the stages' layers, so the parameters are not counted again (a plan search lays out each of its
        layouts with several VPs)."""
        divide, chunk = _chunks(spec, self.pp, v, self.pipeline_slots, self.layers_per_stage)
        # The fields copied with three changed: `dataclasses.replace` would pass all of them through `__init__`
        # (5 us against under 1, for each of the hundreds of interleaved plans a search lays out).
        layout = object.__new__(Layout)
        layout.__dict__.update(self.__dict__, vp=v, layers_divide=divide, layers_per_chunk=chunk)
        return layout

    @property
    def world(self) -> int:
        return self.cluster.world_size

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def interleaved(self) -> bool:
        return self.vp > 1

    @property
    def optimizer_shards(self) -> int:
        """Ranks that share the distributed optimizer's state: Megatron-Core builds its shards on the data-parallel
        group that includes the CP ranks."""
        return self.dp * self.cp

    @property
    def dense_params_per_rank(self) -> float:
        """The parameters of the most loaded stage that are not routed experts' (reduced over DP x CP)."""
        return self.params_per_rank - self.expert_params_per_rank

    def group_size(self, group: str) -> int:
        """The size of a parallel group a block's `SplitNeed` names."""
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.etp}[group]

    def recomputed_fraction(self, spec: RecipeSpec) -> float:
        """Fraction of each model chunk's layers that full recompute covers: the first `recompute_num_layers`
        layers of every chunk (Megatron's 'block' method, as the training objects build it), all of them when unset."""
        if spec.recompute != "full":
            return 0.0
        n = spec.recompute_num_layers or self.layers_per_chunk
        return min(n, self.layers_per_chunk) / self.layers_per_chunk


def _batch_sizes(spec: RecipeSpec, dp: int, cp: int) -> dict[str, Any]:
    """The fields of `Layout` that the micro batch and the global batch decide."""
    b, gbs = spec.micro_batch_size, spec.global_batch_size
    return {
        "micro_batch": b,
        "global_batch": gbs,
        "microbatches": max(1, gbs // (b * dp)),
        "batch_divides": gbs % (b * dp) == 0,
        "tokens_per_rank": b * spec.seq_length / cp,
    }


def _chunks(spec: RecipeSpec, p: int, v: int, slots: int, most: int) -> tuple[bool, int]:
    """Whether Megatron-Core accepts the split of `slots` over `p` stages of `v` chunks each, and the layers of a
    chunk; `most`: the layers of the most loaded stage."""
    uneven = _uneven_stages(spec, p, v)
    if uneven is not None:
        return uneven[3], max(1, math.ceil(most / v))
    return slots % p == 0 and (slots // p) % v == 0, max(1, math.ceil(slots / (p * v)))


def _uneven_stages(spec: RecipeSpec, p: int, v: int) -> Optional[tuple[int, int, int, bool]]:
    """With the first or the last stage's layers set (`pipeline_first_stage_layers`, `pipeline_last_stage_layers`):
    (first stage's layers, the most loaded stage's, the last stage's, whether Megatron-Core accepts the split), the
    stages not set sharing the rest evenly (TransformerConfig.__post_init__, 'Uneven PP': each set stage and each
    middle stage's share divisible by VP). None when neither is set or there is no pipeline."""
    first, last = spec.pipeline_first_stage_layers, spec.pipeline_last_stage_layers
    if p == 1 or (first is None and last is None):
        return None
    rest, middle = spec.num_layers - (first or 0) - (last or 0), p - (first is not None) - (last is not None)
    share = math.ceil(rest / middle) if middle > 0 else 0
    divide = rest >= 0 and (rest % middle == 0 and share % v == 0 if middle > 0 else rest == 0)
    divide = divide and all(n is None or n % v == 0 for n in (first, last))
    first_layers = share if first is None else first
    last_layers = share if last is None else last
    return first_layers, max(first_layers, share, last_layers), last_layers, divide


def pipeline_sizes(spec: RecipeSpec) -> list[int]:
    """The pipeline sizes whose stages split the layers evenly: the divisors of `num_layers`, and with
    `pipeline_counts_embedding_and_loss` also those (above 1) of the `num_layers + 2` slots it splits."""
    layers = spec.num_layers
    sizes = set(divisors(layers))
    if spec.pipeline_counts_embedding_and_loss:
        sizes |= set(divisors(layers + 2)[1:])
    return sorted(sizes)


def _params_per_rank(spec: RecipeSpec, layout: Layout, shaped: _Shaped) -> float:
    """Parameters on one GPU of the most loaded stage (perf-model.md 2.1: `(transformer/p + embedding) / t` plus
    replicated norms and biases). The first stage holds the word embeddings (and learned positions, replicated over
    TP); the last holds the final norm and the output layer, which with tied embeddings and PP > 1 is a second copy
    of the word embeddings (Megatron keeps one on the last stage and all-reduces their gradients). CP does not split
    parameters."""
    t, split = layout.tp, spec.expert_parallel * spec.expert_tensor_parallel_size
    norms, positions, architecture, mtp_params = shaped.norms, shaped.positions, shaped.groups, shaped.mtp
    vocab = spec.padded_vocab_size * spec.hidden_size / t
    mtp = mtp_params.per_rank(t, split)  # on the last stage
    if layout.pp == 1:
        layers = _layers_params(architecture, 0, spec.num_layers, t, split)
        return layers + vocab * (1 if spec.share_embeddings else 2) + positions + norms + mtp
    first = _layers_params(architecture, 0, layout.layers_first_stage, t, split) + vocab + positions
    last_start = spec.num_layers - layout.layers_last_stage
    last = _layers_params(architecture, last_start, spec.num_layers, t, split) + vocab + norms + mtp
    starts = range(layout.layers_first_stage, last_start, max(1, layout.layers_per_stage))
    middle = max((_layers_params(architecture, a, a + layout.layers_per_stage, t, split) for a in starts), default=0.0)
    return max(first, last, middle if layout.pp > 2 else 0.0)


def _layers_params(groups: list[tuple[int, LayerParams]], start: int, end: int, tp: int, split: int) -> float:
    """Parameters on one GPU of the decoder layers [start, end), each counted as its group's (first layers first)."""
    total = 0.0
    for held, (_, params) in zip(overlaps([count for count, _ in groups], start, end), groups, strict=True):
        total += held * params.per_rank(tp, split)
    return total


def _expert_params_per_rank(spec: RecipeSpec, layout: Layout, shaped: _Shaped) -> float:
    """The routed experts' share of `_params_per_rank`: the most loaded stage's layers' experts over EP x ETP, each
    layer its group's (DeepSeek-V3's dense first layers have none) and, at PP 1, the multi-token prediction layers'."""
    layer = shaped.layer
    layers = spec.num_layers if layout.pp == 1 else max(layout.layers_first_stage, layout.layers_per_stage)
    split = spec.expert_parallel * spec.expert_tensor_parallel_size
    groups, mtp = shaped.groups, shaped.mtp
    if len(groups) == 1 and not mtp.expert:
        return layers * layer.expert / split
    if layout.pp > 1 and layout.layers_first_stage < layout.layers_per_stage:  # a later stage: the last group's
        return layers * groups[-1][1].expert / split
    held = overlaps([count for count, _ in groups], 0, layers)
    return (
        sum(n * params.expert for n, (_, params) in zip(held, groups, strict=True)) + mtp.expert * (layout.pp == 1)
    ) / split


def derived_values(spec: RecipeSpec) -> dict[str, Any]:
    """The recipe's derived values, by name in the order of `catalog.DERIVED_SOURCES` (what `show` and `diff`
    print): DP and gradient accumulation from the layout on the recipe's own cluster (exact only where they divide,
    which validation checks), the others from the spec's own properties."""
    layout = Layout.of(spec)
    from_layout = {"data_parallel_size": layout.dp, "grad_accumulation_steps": layout.microbatches}
    return {name: from_layout[name] if name in from_layout else getattr(spec, name) for name in DERIVED_SOURCES}
