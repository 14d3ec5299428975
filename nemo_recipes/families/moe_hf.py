"""What the Mixture-of-Experts Hugging Face classes (MixtralForCausalLM, Qwen3MoeForCausalLM) share, declared once
for the families that convert to them (`families/mixtral.py`, `families/qwen3_moe.py`): the rules of a MoE layer's
second half (its pre-norm, the router, the routed experts) and the router settings the classes compute.

Both classes route as Megatron-Core's softmax router with `moe_router_pre_softmax` off: softmax over the experts'
logits, the top-k kept and renormalised to sum to one (Mixtral always; Qwen3-MoE with `norm_topk_prob=True`), which is
Megatron's softmax over the top-k logits (moe/moe_utils.py `topk_softmax_with_capacity`). Standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nemo_recipes.errors import Problem

if TYPE_CHECKING:
    from nemo_recipes.families.hf_mapping import Rule

#: The router and expert settings both classes hold (field -> (the only value, why)).
HELD: dict[str, tuple[Any, str]] = {
    "moe_router_score_function": ("softmax", "its router scores the experts with a softmax"),
    "moe_router_pre_softmax": (False, "it renormalises the top-k probabilities to sum to one"),
    "moe_router_enable_expert_bias": (False, "its router has no expert bias (aux-loss-free balancing)"),
    "moe_shared_expert_intermediate_size": (None, "it has no shared expert"),
}


def layer_rules(prefix: str, gate: str, up: str, down: str) -> tuple[Rule, ...]:
    """The MoE half of a layer: the norm before it (`post_attention_layernorm` in both classes), the router
    (`{prefix}gate.weight`) and every expert's `{prefix}experts.{expert}.{gate|up|down}.weight`."""
    from nemo_recipes.families.hf_mapping import Experts, Same

    experts = f"{prefix}experts.{{expert}}."
    return (
        Same("pre_moe_norm.weight", "post_attention_layernorm.weight"),
        Same("router.weight", f"{prefix}gate.weight"),
        Experts(f"{experts}{gate}.weight", f"{experts}{up}.weight", f"{experts}{down}.weight"),
    )


def no_experts(spec: Any, architecture: str) -> list[Problem]:
    """The problem that a recipe without experts cannot become `architecture`."""
    if spec.num_moe_experts:
        return []
    return [
        Problem(
            "num_moe_experts",
            spec.num_moe_experts,
            f"{architecture} is a Mixture-of-Experts model; this recipe has no experts.",
            "set num_moe_experts (and moe_router_topk), or export with a dense family's recipe.",
        )
    ]


def router_config(spec: Any) -> dict[str, Any]:
    """The config keys of the router both classes read (their names are the same in both)."""
    return {
        "num_experts_per_tok": spec.moe_router_topk,
        # The coefficient the recipe trained with, as NeMo 2.7.3's HFQwen3Exporter writes it; the two libraries scale
        # the loss apart (transformers' load_balancing_loss_func sums over the k choices and averages over the
        # layers; Megatron's switch loss divides by k and adds every layer's), so it weighs differently there.
        "router_aux_loss_coef": spec.moe_aux_loss_coeff,
        "output_router_logits": False,
    }
