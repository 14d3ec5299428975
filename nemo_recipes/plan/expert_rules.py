"""The rules Megatron-Core enforces for a Mixture of Experts, checked before launch (`rules.RULES` lists them with the
others, so every problem is reported at once): each `(spec, layout) -> list[Problem]`, reading the MoE block's facts
(`families.blocks.MoE`) and the layout; the MoE block's split needs (experts over EP, their widths over ETP, the
shared expert's over TP) are checked with every block's by `rules.split_problems`. A dense recipe passes each at
once. Standard library only.

Sources, Megatron-Core 0.15: `parallel_state.initialize_model_parallel` (the expert groups: ETP x EP x PP divides the
world), `transformer/moe/moe_layer.py` (experts divide over EP), `tensor_parallel/layers.py` (`divide`: a linear
layer's split width divides), `transformer_config.py` `__post_init__` (the router and capacity settings) and
`model_parallel_config.py` (sequence parallelism with TP under EP).
"""

from __future__ import annotations

from typing import Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.counts import divisors, listing
from nemo_recipes.errors import Problem
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.blocks import MoE
from nemo_recipes.plan.layout import Layout

#: Rows that start a Mixture of Experts, named in fixes (a dense family's layers cannot hold experts).
MOE_ROWS = "mixtral_moe_8x7b, qwen3_moe_30b_a3b"


def _moe(spec: RecipeSpec) -> Optional[MoE]:
    return Architecture.of(spec).moe if spec.num_moe_experts is not None else None


def experts_in_family_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """Expert fields where the family builds dense layers: Megatron-Core would build experts the plan never sees."""
    problems = []
    if spec.num_moe_experts is not None and _moe(spec) is None:
        problems.append(
            Problem(
                "num_moe_experts",
                spec.num_moe_experts,
                f"the {spec.family} family's layers are dense: experts on it would be a model the plan, the counts and "
                "the conversion do not describe.",
                f"unset num_moe_experts, or start from a Mixture-of-Experts row ({MOE_ROWS}).",
            )
        )
    if spec.expert_parallel > 1 and spec.num_moe_experts is None:
        problems.append(
            Problem(
                "expert_parallel",
                spec.expert_parallel,
                "expert parallelism splits experts, and the model has none (Megatron-Core: 'num_moe_experts must be "
                "non None to use expert-parallel').",
                f"set expert_parallel=1, or use a Mixture-of-Experts row ({MOE_ROWS}).",
            )
        )
    return problems


def expert_bias_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """Experts with biases split over ETP = 1 only. (Whole experts over EP and each expert's width over ETP are the
    MoE block's split needs, which `rules.split_problems` checks with every other block's.)"""
    moe = _moe(spec)
    if moe is None or not moe.bias or spec.expert_tensor_parallel_size == 1:
        return []
    return [
        Problem(
            "expert_tensor_parallel",
            spec.expert_tensor_parallel_size,
            "experts with biases need ETP = 1 (Megatron-Core: 'Bias in Moe is only supported when ETP==1').",
            "set expert_tensor_parallel=1, or add_bias_linear=False.",
        )
    ]


def expert_world_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """The expert groups, ETP x EP x PP, divide the world as TP x PP x CP does (`world_size_rule`)."""
    if spec.num_moe_experts is None:
        return []
    etp, ep, world = spec.expert_tensor_parallel_size, spec.expert_parallel, layout.world
    size = etp * ep * layout.pp
    if world % size == 0:
        return []
    return [
        Problem(
            "expert_parallel",
            ep,
            f"{world} GPUs are not divisible by ETP x EP x PP = {etp} x {ep} x {layout.pp} = {size}, so there is no "
            "whole number of expert-data-parallel replicas (Megatron-Core's initialize_model_parallel raises).",
            f"choose expert_parallel and expert_tensor_parallel whose product with PP divides {world} (EP x ETP in "
            f"{listing(d for d in divisors(world // layout.pp if world % layout.pp == 0 else 1))}), or use a "
            f"multiple of {size} GPUs.",
        )
    ]


def expert_sequence_parallel_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """Tokens reach the experts from sequence-parallel shards: under EP with TP > 1, SP must be on."""
    if spec.num_moe_experts is None or spec.expert_parallel == 1 or layout.tp == 1 or layout.sequence_parallel:
        return []
    return [
        Problem(
            "sequence_parallel",
            spec.sequence_parallel,
            f"expert parallelism (EP={spec.expert_parallel}) with tensor parallelism (TP={layout.tp}) needs "
            "sequence parallelism (Megatron-Core: 'When using expert parallelism and tensor parallelism for "
            "training, sequence parallelism must be used').",
            "set sequence_parallel to None (on whenever TP > 1) or True.",
        )
    ]


def router_rule(spec: RecipeSpec, layout: Layout) -> list[Problem]:
    """What Megatron-Core's TransformerConfig raises for the router and the capacity."""
    if spec.num_moe_experts is None:
        return []
    problems, topk, experts = [], spec.moe_router_topk, spec.num_moe_experts
    if topk > experts:
        problems.append(
            Problem(
                "moe_router_topk",
                topk,
                f"a token cannot be routed to {topk} of {experts} experts.",
                f"set moe_router_topk to at most {experts}.",
            )
        )
    if spec.moe_router_enable_expert_bias and spec.moe_router_score_function != "sigmoid":
        problems.append(
            Problem(
                "moe_router_enable_expert_bias",
                True,
                "the expert bias balances sigmoid scores only (Megatron-Core: 'Expert bias for aux-loss-free routing "
                "only supports sigmoid score function').",
                "set moe_router_score_function=sigmoid, or moe_router_enable_expert_bias=False.",
            )
        )
    single = topk == 1 and spec.moe_router_score_function == "softmax"
    if single and not spec.moe_router_pre_softmax and spec.moe_router_load_balancing_type != "sinkhorn":
        problems.append(
            Problem(
                "moe_router_pre_softmax",
                False,
                "a softmax over the one chosen expert is always 1, so the router would get no gradient (Megatron-"
                "Core: 'Please use --moe-router-pre-softmax when topk is 1').",
                "set moe_router_pre_softmax=True, or moe_router_topk of 2 or more.",
            )
        )
    if spec.moe_expert_capacity_factor is not None and spec.moe_router_load_balancing_type == "sinkhorn":
        problems.append(
            Problem(
                "moe_expert_capacity_factor",
                spec.moe_expert_capacity_factor,
                "a capacity works with aux_loss, seq_aux_loss or none balancing, not sinkhorn (Megatron-Core raises).",
                "unset moe_expert_capacity_factor (dropless), or use moe_router_load_balancing_type=aux_loss.",
            )
        )
    return problems


#: In report order, after the dense layout rules: all structural (Megatron-Core refuses a plan that breaks one).
EXPERT_RULES = (
    experts_in_family_rule,
    expert_bias_rule,
    expert_world_rule,
    expert_sequence_parallel_rule,
    router_rule,
)
