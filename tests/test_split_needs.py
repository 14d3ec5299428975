"""The blocks' split needs (`families.blocks.SplitNeed`) are what Megatron-Core enforces, and the planner, the plan
search and the smoke shapes read them (no NeMo: the planner's answers, from the catalog alone)."""

from __future__ import annotations

import pytest

from nemo_recipes.catalog import RECIPES
from nemo_recipes.families import REGISTRY, Architecture
from nemo_recipes.families.blocks import MoE
from nemo_recipes.plan import Cluster, validate
from nemo_recipes.plan.rules import GROUP_FIELDS
from nemo_recipes.plan.search import Space, layouts
from nemo_recipes.recipe_fields import FIELDS
from nemo_recipes.smoke_training.shape import smoke_shape

#: One row of every family (the needs are the blocks', the same for every row of a family).
FAMILY_ROWS = [next(name for name in RECIPES if name in family.rows) for family in REGISTRY.values()]


@pytest.mark.parametrize("name", FAMILY_ROWS)
def test_every_need_names_a_recipe_field_and_its_value(name):
    spec = RECIPES[name]
    needs = Architecture.of(spec).split_needs()
    assert needs, "a dense layer splits its heads and its MLP over TP"
    for need in needs:
        assert need.field in FIELDS, f"{need} names no recipe field: the problem's fix would name nothing to change"
        assert need.group in GROUP_FIELDS
        assert need.value == (getattr(spec, need.field) or spec.kv_groups)  # num_query_groups unset: one per head
        assert need.what
    assert len(needs) == len(set(needs))
    # The MoE block states its needs in the same shape: whole experts over EP, each expert's width over ETP.
    assert [(n.field, n.group) for n in MoE(64, 8, 2, 128, True, "RMSNorm").split_needs()] == [
        ("num_moe_experts", "ep"),
        ("moe_ffn_hidden_size", "etp"),
    ]


#: What Megatron-Core's TransformerConfig refuses (`num_attention_heads % tensor_model_parallel_size`,
#: `num_query_groups % tensor_model_parallel_size`) and its column-parallel fc1 cannot split: each case misses one
#: need, and the plan refuses it with the need's field named, in the words the planner gave before the blocks stated
#: them (issue 44: nothing a user sees changed).
MISSED = [
    (
        "num_attention_heads",
        "gpt_7b",
        dict(num_attention_heads=30, kv_channels=128, tensor_parallel=4),
        "error: tensor_parallel=4: num_attention_heads=30 is not divisible by tensor_parallel=4. "
        "Fix: use tensor_parallel in 1, 2.",
    ),
    (
        "num_query_groups",
        "llama_8b",
        dict(num_query_groups=2, tensor_parallel=4),
        "error: tensor_parallel=4: num_query_groups=2 is not divisible by tensor_parallel=4. "
        "Fix: use tensor_parallel in 1, 2, or num_query_groups a multiple of 4.",
    ),
    (
        "ffn_hidden_size",
        "llama_8b",
        dict(ffn_hidden_size=14338, tensor_parallel=4),
        "error: ffn_hidden_size=14338: ffn_hidden_size=14338 is not divisible by tensor_parallel=4 (the MLP is split "
        "column-wise over TP). Fix: use an ffn_hidden_size that is a multiple of 4, or a tensor_parallel that "
        "divides it.",
    ),
]


@pytest.mark.parametrize("field, name, overrides, expected", MISSED, ids=[case[0] for case in MISSED])
def test_a_layout_that_misses_a_need_is_refused_naming_its_field(field, name, overrides, expected):
    spec = RECIPES[name].replace(**overrides)
    errors = validate(spec, Cluster.of(1, 8, gpu="h100")).errors
    assert [str(p) for p in errors] == [expected]
    # The layouts a plan search tries meet every need: none at this TP.
    tps = {s.tensor_parallel for s in layouts(spec, Cluster.of(1, 8, gpu="h100"), space=Space.FIT)}
    assert tps and overrides["tensor_parallel"] not in tps and max(tps) == 2


#: The MoE block's needs, each missed on its row's own cluster (where the expert groups' rule may fire too).
EXPERT_MISSED = [
    (
        "num_moe_experts",
        "mixtral_moe_8x7b",
        dict(expert_parallel=3),
        "error: num_moe_experts=8: num_moe_experts=8 is not divisible by expert_parallel=3 (each expert layer is "
        "split over EP). Fix: use a num_moe_experts that is a multiple of 3, or an expert_parallel that divides it.",
    ),
    (
        "moe_ffn_hidden_size",
        "qwen3_moe_30b_a3b",
        dict(expert_tensor_parallel=5),
        "error: moe_ffn_hidden_size=768: moe_ffn_hidden_size=768 is not divisible by expert_tensor_parallel=5 (each "
        "expert's MLP is split column-wise over expert TP). Fix: use a moe_ffn_hidden_size that is a multiple of 5, "
        "or an expert_tensor_parallel that divides it.",
    ),
]


@pytest.mark.parametrize("field, name, overrides, expected", EXPERT_MISSED, ids=[c[0] for c in EXPERT_MISSED])
def test_a_layout_that_misses_an_expert_need_is_refused_naming_its_field(field, name, overrides, expected):
    spec = RECIPES[name].replace(**overrides)
    assert expected in [str(p) for p in validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node)).errors]


def test_every_need_of_the_catalog_has_a_case():
    """A block's new need gets its case above (and a need a block drops fails its case)."""
    needs = {need.field for spec in RECIPES.values() for need in Architecture.of(spec).split_needs()}
    assert needs == {case[0] for case in MISSED + EXPERT_MISSED}


@pytest.mark.parametrize("name", FAMILY_ROWS)
def test_tp3_is_refused_for_every_family_with_the_heads_named(name):
    errors = validate(RECIPES[name].replace(tensor_parallel=3), Cluster.of(1, 3, gpu="h100")).errors
    fields = {(p.field, p.message.split("=")[0]) for p in errors}
    assert ("tensor_parallel", "num_attention_heads") in fields


@pytest.mark.parametrize("name", FAMILY_ROWS)
@pytest.mark.parametrize("tp", [2, 3, 4, 8])
def test_smoke_shapes_meet_the_needs_of_their_layout(name, tp):
    spec = RECIPES[name]
    if spec.kv_groups != spec.num_attention_heads and tp == 3:
        pytest.skip("a grouped-query smoke model is GQA_HIDDEN = 128 channels wide: 3 x 2 groups do not divide it")
    small = smoke_shape(spec, processes=tp, overrides={"tensor_parallel": tp}).spec  # validated: refused otherwise
    for need in Architecture.of(small).split_needs():
        assert need.value % {"tp": tp}.get(need.group, 1) == 0, need
