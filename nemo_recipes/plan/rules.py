"""The rules a plan must follow, each a small function `(spec, layout) -> list[Problem]` that reads the one `Layout`
(DP, micro-batches, layers per stage and chunk): the parallel layout, the batch, precision and data. `RULES` lists
them in report order; `STRUCTURAL_RULES` are the ones without which the job cannot be laid out or run at all: the
throughput model refuses exactly those, so validation and estimates agree. Standard library only.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from nemo_recipes.catalog import RecipeSpec, data_problems
from nemo_recipes.counts import divisors, listing
from nemo_recipes.errors import ERROR, WARNING, InvalidInputError, Problem
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.plan.expert_rules import EXPERT_RULES
from nemo_recipes.plan.hardware import GPUS, Cluster
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.stack import Program

# Warn when the pipeline bubble (p-1)/(v m) (Narayanan et al. 2021, Sec. 2.2) costs half of the ideal step time or more.
BUBBLE_WARNING = 0.5

Rule = Callable[[RecipeSpec, Layout], list[Problem]]


# ---- parallel layout ----


def world_size_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    cluster, world, mp = layout.cluster, layout.world, layout.model_parallel
    if layout.world_divides:
        return []
    step = mp // math.gcd(mp, cluster.gpus_per_node)
    nodes = max(step, math.ceil(cluster.nodes / step) * step)
    layouts = [d for d in divisors(world) if d <= mp][-4:]
    return [
        Problem(
            "world_size",
            world,
            f"{world} GPUs ({cluster.nodes} node(s) x {cluster.gpus_per_node}) are not divisible by TP x PP x CP = "
            f"{spec.tensor_parallel} x {spec.pipeline_parallel} x {spec.context_parallel} = {mp}, so there is no whole "
            "number of data-parallel replicas.",
            f"use a multiple of {mp} GPUs (for example {nodes} nodes of {cluster.gpus_per_node}), or choose "
            f"tensor_parallel, pipeline_parallel and context_parallel whose product divides {world} "
            f"(a product in {listing(layouts)}).",
        )
    ]


def tensor_parallel_domain_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """TP all-reduces run every layer, so TP stays on NVLink: within a node, or an NVL72 domain."""
    t, per_node, gpu = layout.tp, layout.gpus_per_node, layout.cluster.gpu
    if t <= per_node and per_node % t == 0:
        return []
    needs = [need for need in layout.architecture.split_needs() if need.group == "tp"]
    within_node = [d for d in divisors(per_node) if all(need.met_by(d) for need in needs)]
    fix = (
        f"use tensor_parallel in {listing(within_node)} (divides the {per_node} GPUs of a node) and raise "
        "pipeline_parallel instead."
    )
    if t <= per_node:
        return [
            Problem(
                "tensor_parallel",
                t,
                f"TP={t} does not divide the {per_node} GPUs of a node, so some TP groups straddle two "
                "nodes and their every-layer all-reduces cross the inter-node network.",
                fix,
            )
        ]
    if gpu is None:
        return [
            Problem(
                "tensor_parallel",
                t,
                f"TP={t} is larger than a node ({per_node} GPUs); without a GPU type the planner cannot "
                "tell whether the NVLink domain spans nodes.",
                fix,
                WARNING,
            )
        ]
    if t <= gpu.nvlink_domain:
        return [
            Problem(
                "tensor_parallel",
                t,
                f"TP={t} spans {math.ceil(t / per_node)} nodes; {gpu.name}'s NVLink domain of "
                f"{gpu.nvlink_domain} GPUs can cover it, but only if each TP group's nodes share one domain.",
                f"keep the job inside one NVLink domain, or {fix}",
                WARNING,
            )
        ]
    return [
        Problem(
            "tensor_parallel",
            t,
            f"TP={t} is larger than the {per_node} GPUs of a node and {gpu.name}'s NVLink domain of "
            f"{gpu.nvlink_domain} GPUs; its every-layer all-reduces would cross the inter-node network.",
            fix,
        )
    ]


#: The recipe field that sets the size of each parallel group a block's `SplitNeed` names.
GROUP_FIELDS = {
    "tp": "tensor_parallel",
    "cp": "context_parallel",
    "ep": "expert_parallel",
    "etp": "expert_tensor_parallel",
}
#: How each group splits a block, for the message of a need it misses.
_SPLIT_HOW = {"tp": "column-wise over TP", "cp": "over CP", "ep": "over EP", "etp": "column-wise over expert TP"}


def _article(field: str) -> str:
    """'an' before a vowel sound: a field's first word read as a word, or letter by letter when it has no vowel
    (an ffn_hidden_size, a num_query_groups, an expert_parallel)."""
    word = field.split("_")[0]
    spelled = not any(c in "aeiouy" for c in word)
    return "an" if word[:1] in ("fhlmnrsx" if spelled else "aeiou") else "a"


def attention_heads_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """The attention's own shape (`Attention.head_problems`), then every block's split needs (`SplitNeed`: heads
    and query groups over TP, TransformerConfig's `num_query_groups % tensor_model_parallel_size`; the MLP
    column-wise)."""
    architecture = layout.architecture
    return [*architecture.attention.head_problems(), *split_problems(architecture, layout)]


def split_problems(architecture: Architecture, layout: Layout) -> list[Problem]:
    """A problem for each split need `layout` misses. The attention's needs are the model's shape, so their fix is
    another parallel size (one problem per group: a size that meets the first meets the rest, listed); any other
    block's (an FFN width) is the user's to round, so its problem names its field."""
    unmet = [need for need in architecture.split_needs() if need.value % layout.group_size(need.group)]
    if not unmet:
        return []
    attention = architecture.attention.split_needs()
    problems, reported = [], set()
    for need in unmet:
        size, field = layout.group_size(need.group), GROUP_FIELDS[need.group]
        if need not in attention:
            problems.append(
                Problem(
                    need.field,
                    need.value,
                    f"{need.field}={need.value} is not divisible by {field}={size} ({need.what} is split "
                    f"{_SPLIT_HOW[need.group]}).",
                    f"use {_article(need.field)} {need.field} that is a multiple of {size}, or {_article(field)} "
                    f"{field} that divides it.",
                )
            )
        elif need.group not in reported:
            reported.add(need.group)
            same = [n for n in attention if n.group == need.group]
            ok = [d for d in divisors(layout.gpus_per_node) if all(n.met_by(d) for n in same)]
            # The first is the head count, which sets the model's width: not a fix to offer.
            offer = f", or {need.field} a multiple of {size}" if need != same[0] else ""
            problems.append(
                Problem(
                    field,
                    size,
                    f"{need.field}={need.value} is not divisible by {field}={size}.",
                    f"use {field} in {listing(ok)}{offer}.",
                )
            )
    return problems


def _uneven_stage_problems(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """The first or last stage's layers set: Megatron-Core's rules for them (TransformerConfig.__post_init__,
    'Uneven PP'): a pipeline to split, no embedding and loss slots beside them, the rest even over the other stages
    and every stage's layers divisible by VP."""
    p, first, last = layout.pp, spec.pipeline_first_stage_layers, spec.pipeline_last_stage_layers
    field, value = ("pipeline_first_stage_layers", first) if first is not None else ("pipeline_last_stage_layers", last)
    if p == 1:
        why, fix = "ignored: there is no pipeline to split (PP = 1).", f"unset {field}, or use pipeline_parallel > 1."
        return [Problem(field, value, why, fix, WARNING)]
    if spec.pipeline_counts_embedding_and_loss:
        return [
            Problem(
                field,
                value,
                "cannot be set with pipeline_counts_embedding_and_loss (Megatron-Core refuses both).",
                f"unset {field}, or set pipeline_counts_embedding_and_loss=False.",
            )
        ]
    if layout.layers_divide:
        return []
    middle = p - (first is not None) - (last is not None)
    rest = spec.num_layers - (first or 0) - (last or 0)
    return [
        Problem(
            field,
            value,
            f"leaves {rest} of num_layers={spec.num_layers} layers for the {middle} other stage(s) of "
            f"pipeline_parallel={p}, which must share them evenly"
            + (f", each stage's share divisible by virtual_pipeline={layout.vp}" if layout.vp > 1 else "")
            + ".",
            "choose the first and last stages' layers so that the rest divides by the other stages "
            "(DeepSeek-V3: 61 layers over PP 16 as 3 + 14 x 4 + 2).",
        )
    ]


def pipeline_layers_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """Megatron-Core divides the layers evenly over the stages and, interleaved, over each stage's chunks
    (TransformerConfig); with pipeline_counts_embedding_and_loss the embedding and the loss take a slot each."""
    l, p, vp = spec.num_layers, layout.pp, spec.virtual_pipeline
    slots, counted = layout.pipeline_slots, layout.pipeline_slots != l
    what = f"num_layers={l}" + (" + embedding + loss" if counted else "")
    if spec.pipeline_first_stage_layers is not None or spec.pipeline_last_stage_layers is not None:
        return _uneven_stage_problems(spec, layout)
    problems = []
    if slots % p:
        problems.append(
            Problem(
                "pipeline_parallel",
                p,
                f"{what} = {slots} is not divisible by pipeline_parallel={p}.",
                f"use pipeline_parallel in {listing(d for d in divisors(slots))}.",
            )
        )
    if vp is not None and vp > 1:
        if p == 1:
            problems.append(
                Problem(
                    "virtual_pipeline",
                    vp,
                    "an interleaved schedule (virtual_pipeline) needs pipeline_parallel > 1.",
                    "unset virtual_pipeline, or use pipeline_parallel > 1.",
                )
            )
        elif slots % (p * vp):
            good = [v for v in divisors(slots // p) if v > 1] if slots % p == 0 else []
            problems.append(
                Problem(
                    "virtual_pipeline",
                    vp,
                    f"{what} = {slots} is not divisible by pipeline_parallel x virtual_pipeline = {p} x {vp} = "
                    f"{p * vp}."
                    if counted
                    else f"num_layers={l} is not divisible by pipeline_parallel x virtual_pipeline = "
                    f"{p} x {vp} = {p * vp}.",
                    f"use virtual_pipeline in {listing(good)} or unset it." if good else "unset virtual_pipeline.",
                )
            )
    if spec.pipeline_counts_embedding_and_loss and p == 1:
        problems.append(
            Problem(
                "pipeline_counts_embedding_and_loss",
                True,
                "ignored: there is no pipeline to split (PP = 1).",
                "set pipeline_counts_embedding_and_loss=False, or use pipeline_parallel > 1.",
                WARNING,
            )
        )
    return problems


def interleaved_microbatches_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """Megatron-Core's interleaved schedule groups micro-batches by PP and raises unless m is a multiple of p."""
    vp, p, m = spec.virtual_pipeline, layout.pp, layout.microbatches
    if not layout.interleaved or not layout.world_divides:
        return []
    if m >= p and m % p == 0:
        return []
    step = layout.micro_batch * layout.dp * p
    return [
        Problem(
            "virtual_pipeline",
            vp,
            f"the interleaved schedule needs the micro-batches per step (m = {m}) to be a multiple of "
            f"pipeline_parallel={p}; Megatron-Core raises at the first step otherwise.",
            f"set global_batch_size to a multiple of micro batch x DP x PP = {step}, or unset virtual_pipeline.",
        )
    ]


def gated_ffn_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """The MLP's advice on its own shape (`DenseMLP.shape_problems`: a gated MLP at 4 x hidden)."""
    mlp = layout.architecture.mlp
    return mlp.shape_problems() if mlp is not None else []


def rotary_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """RoPE over an even channel count of each head (`Attention.rotary_problems`)."""
    return layout.architecture.attention.rotary_problems()


def context_parallel_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """Megatron-Core splits each sequence into 2c chunks and gives rank r chunks r and 2c-1-r (causal balance). With
    RoPE it cuts the rotary table the same way (`get_pos_emb_on_this_cp_rank`), so RoPE needs nothing more than the
    split itself; learned positions follow the split position ids."""
    c, s = layout.cp, spec.seq_length
    if c == 1 or s % (2 * c) == 0:
        return []
    good = [d for d in divisors(s) if d > 1 and s % (2 * d) == 0 and d <= 64]
    return [
        Problem(
            "context_parallel",
            c,
            f"seq_length={s} is not divisible by 2 x context_parallel = {2 * c} (CP splits each sequence into 2c "
            "chunks to balance the causal mask).",
            f"use context_parallel in {listing([1] + good)}, or a seq_length that is a multiple of {2 * c}.",
        )
    ]


def sequence_parallel_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    t, c, s = layout.tp, layout.cp, spec.seq_length
    if spec.sequence_parallel is True and t == 1:
        return [
            Problem(
                "sequence_parallel",
                True,
                "sequence parallelism splits activations over TP ranks and needs "
                "tensor_parallel > 1 (tensor_parallel is 1).",
                "set sequence_parallel to None (automatic: on when TP > 1) or False, or use tensor_parallel > 1.",
            )
        ]
    if layout.sequence_parallel and s % c == 0 and (s // c) % t:
        return [
            Problem(
                "seq_length",
                s,
                f"sequence parallelism scatters each rank's {s // c} tokens (seq_length / CP) over tensor_parallel={t} "
                "ranks, which needs them to divide.",
                f"use a seq_length that is a multiple of {t * c} (TP x CP), or sequence_parallel=False.",
            )
        ]
    return []


def tp_comm_overlap_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    if spec.tp_comm_overlap is not True or spec.tp_comm_overlap_enabled:
        return []
    why = "TP is 1" if layout.tp == 1 else "sequence parallelism is off"
    return [
        Problem(
            "tp_comm_overlap",
            True,
            f"ignored: {why}, and Transformer Engine overlaps TP communication only under sequence "
            "parallelism with TP > 1.",
            "set tp_comm_overlap to None (automatic) or False, or use TP > 1 with sequence parallelism.",
            WARNING,
        )
    ]


# ---- batch ----


def global_batch_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    if not layout.world_divides or layout.batch_divides:
        return []
    dp, b, gbs = layout.dp, layout.micro_batch, layout.global_batch
    step = b * dp
    lower, upper = (gbs // step) * step, (gbs // step + 1) * step
    near = " or ".join(str(v) for v in (lower, upper) if v > 0)
    mbs = [d for d in divisors(b) if gbs % (d * dp) == 0]
    alt = f"; or micro_batch_size in {listing(mbs)}" if mbs else ""
    return [
        Problem(
            "global_batch_size",
            gbs,
            f"global_batch_size={gbs} is not divisible by micro batch x DP = {b} x {dp} = {step} "
            f"(DP = {layout.world} GPUs / TP x PP x CP {layout.model_parallel}).",
            f"use global_batch_size {near}{alt}; or fit(..., scale_global_batch=True) to scale it with DP.",
        )
    ]


def pipeline_bubble_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    p, v, m = layout.pp, layout.vp, layout.microbatches
    if p == 1 or not layout.world_divides:
        return []
    bubble = (p - 1) / (v * m)
    if bubble < BUBBLE_WARNING:
        return []
    return [
        Problem(
            "global_batch_size",
            spec.global_batch_size,
            f"only {m} micro-batch(es) per step (gradient accumulation {m}) for {p} pipeline stages: the pipeline "
            f"bubble (p-1)/(v m) = {bubble:.0%} of the ideal step time.",
            "raise global_batch_size, lower micro_batch_size or pipeline_parallel, or set virtual_pipeline.",
            WARNING,
        )
    ]


def distributed_optimizer_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    if not spec.distributed_optimizer or not layout.world_divides or layout.optimizer_shards > 1:
        return []
    return [
        Problem(
            "distributed_optimizer",
            True,
            "DP x CP = 1: the distributed optimizer has a single shard and saves no memory.",
            "add data-parallel replicas (more nodes) to shard the optimizer state, or set distributed_optimizer=False.",
            WARNING,
        )
    ]


def recompute_layers_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    n = spec.recompute_num_layers
    if n is None:
        return []
    if spec.recompute != "full":
        return [
            Problem(
                "recompute_num_layers",
                n,
                f"ignored: recompute is {spec.recompute!r}, not 'full'.",
                "set recompute='full', or unset recompute_num_layers.",
                WARNING,
            )
        ]
    chunk = layout.layers_per_chunk
    if n > chunk:
        return [
            Problem(
                "recompute_num_layers",
                n,
                f"larger than the {chunk} layers of a model chunk; all of them are recomputed.",
                f"use recompute_num_layers <= {chunk}, or unset it to recompute every layer.",
                WARNING,
            )
        ]
    return []


# ---- precision and data ----


def fp8_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    gpu = layout.cluster.gpu
    if not spec.fp8 or gpu is None:
        return []
    if not gpu.supports_fp8:
        with_fp8 = [name for name, g in GPUS.items() if g.supports_fp8]
        return [
            Problem(
                "precision",
                spec.precision,
                f"{gpu.name} has no FP8 tensor cores.",
                f"use precision='bf16' on {gpu.name}, or a GPU with FP8 ({', '.join(with_fp8)}).",
            )
        ]
    if spec.precision == "mxfp8" and not gpu.supports_mxfp8:
        blackwell = [name for name, g in GPUS.items() if g.supports_mxfp8]
        return [
            Problem(
                "precision",
                "mxfp8",
                f"{gpu.name} has no MXFP8 tensor cores: MXFP8 (32-element blocks, each with a power-of-two scale) is a "
                "format of Blackwell's fifth-generation tensor cores, which Transformer Engine's MXFP8BlockScaling "
                "needs.",
                f"use precision='fp8_tensorwise' or 'fp8_blockwise' on {gpu.name}, or a Blackwell GPU "
                f"({', '.join(blackwell)}).",
            )
        ]
    return []


def data_blend_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """The blend's shape (the catalog's `data_problems`, which every command line also checks); what the files say
    is `plan.data`'s."""
    return data_problems(spec)


RULES: tuple[Rule, ...] = (
    world_size_rule,
    tensor_parallel_domain_rule,
    attention_heads_rule,
    rotary_rule,
    gated_ffn_rule,
    pipeline_layers_rule,
    interleaved_microbatches_rule,
    context_parallel_rule,
    sequence_parallel_rule,
    global_batch_rule,
    fp8_rule,
    data_blend_rule,
    recompute_layers_rule,
    tp_comm_overlap_rule,
    pipeline_bubble_rule,
    distributed_optimizer_rule,
    *EXPERT_RULES,
)
# Rules about policy or advice rather than feasibility: a job that breaks them still runs (TP across nodes is slow,
# a data blend is checked when data loads). Every other rule is structural: without it the job cannot be laid out or
# run at all (Megatron-Core raises), and the throughput model refuses the same plans, so a plan that validates always
# has an estimate.
POLICY_RULES = frozenset(
    {
        tensor_parallel_domain_rule,
        gated_ffn_rule,
        data_blend_rule,
        recompute_layers_rule,
        tp_comm_overlap_rule,
        pipeline_bubble_rule,
        distributed_optimizer_rule,
    }
)
STRUCTURAL_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule not in POLICY_RULES)
# The only rules that read `recompute` or `recompute_num_layers`: a search trying recompute modes on one layout runs
# the others once for all of them (`search.recompute_options`; tests/test_plan_search_speed.py holds this true).
RECOMPUTE_RULES: tuple[Rule, ...] = (recompute_layers_rule,)
LAYOUT_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule not in RECOMPUTE_RULES)


def layout_problems(spec: RecipeSpec, cluster: Cluster, layout: Optional[Layout] = None) -> list[Problem]:
    """Every problem except memory and the software stack."""
    layout = layout or Layout.of(spec, cluster)
    problems: list[Problem] = []
    for rule in RULES:
        problems += rule(spec, layout)
    return problems


def structural_errors(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """The errors of `STRUCTURAL_RULES`: what makes a layout impossible to run."""
    return [p for rule in STRUCTURAL_RULES for p in rule(spec, layout) if p.severity == ERROR]


def raise_if_unstructured(spec: RecipeSpec, layout: Layout, context: str) -> None:
    errors = structural_errors(spec, layout)
    if errors:
        raise InvalidInputError(errors, context=context)


def program_problems(spec: RecipeSpec, program: Program) -> list[Problem]:
    """What the software stack cannot run: FP8 needs Transformer Engine."""
    if spec.fp8 and not program.stack.transformer_engine:
        return [
            Problem(
                "precision",
                spec.precision,
                f"FP8 needs Transformer Engine, which the '{program.stack.name}' stack does not have.",
                "plan for the NeMo container (--stack transformer-engine), or set precision='bf16'.",
            )
        ]
    return []
