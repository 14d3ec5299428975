"""The Mixture-of-Experts families on the fast path (no NeMo): the MoE block's facts, the rows' counts (total and
active, equal to NeMo 2.7.3's configs; tests/test_moe_nemo.py builds those models), an architecture of layer groups,
the expert fields that only MoE recipes show, Megatron-Core's MoE rules (every problem at once), the memory of
experts over EP, and the MoE rows planning valid on NeMo's own layouts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nemo_recipes.catalog import RECIPES, fields_of
from nemo_recipes.errors import ERROR
from nemo_recipes.families import Architecture, get_family
from nemo_recipes.families.blocks import MEGATRON_KEYS, Attention, DenseMLP, LayerGroup, MoE
from nemo_recipes.families.registry import REGISTRY
from nemo_recipes.plan import Cluster, validate
from nemo_recipes.plan.layout import Layout

#: Total parameters of the models NeMo 2.7.3 builds from its own MixtralConfig8x7B/8x22B, Qwen3Config30B_A3B and
#: Qwen3Config235B_A22B (tests/test_moe_nemo.py), and the active ones per token (8x7B: "13B active", Jiang et al.
#: 2024; the Qwen3 names say 3B and 22B).
COUNTS = {
    "mixtral_moe_8x7b": (46_702_792_704, 12_879_925_248),
    "mixtral_moe_8x22b": (140_620_634_112, 39_152_031_744),
    "qwen3_moe_30b_a3b": (30_532_122_624, 3_353_032_704),
    "qwen3_moe_235b_a22b": (235_093_634_560, 22_190_763_520),
}


@pytest.mark.parametrize("name", COUNTS)
def test_moe_rows_count_nemos_models_total_and_active(name):
    spec = RECIPES[name]
    assert (spec.num_parameters, spec.active_parameters) == COUNTS[name]
    # Active by hand: all but the experts a token skips, (E - k) x 3 x h x F in each of the L layers (SwiGLU).
    skipped = (spec.num_moe_experts - spec.moe_router_topk) * 3 * spec.hidden_size * spec.moe_ffn_hidden_size
    assert spec.active_parameters == spec.num_parameters - spec.num_layers * skipped


def test_the_moe_block_holds_a_router_experts_over_ep_and_a_shared_expert():
    moe = MoE(hidden=256, experts=8, top_k=2, expert_ffn=512, gated=True, normalization="RMSNorm", shared_ffn=1024)
    tensors = {t.role: t for t in moe.tensors()}
    assert tensors["router.weight"].shape == (8, 256) and tensors["router.weight"].split == "replicated"
    assert tensors["experts.fc1.weight"].shape == (8, 1024, 256) and tensors["experts.fc2.weight"].split == "expert"
    assert tensors["shared.fc1.weight"].split == "column" and set(tensors) <= set(MEGATRON_KEYS)
    assert moe.params_per_expert == 3 * 256 * 512 and moe.idle_params_per_token == 6 * 3 * 256 * 512
    # Megatron's keys: one distributed-checkpoint key for both layer specs, two module names for expert i.
    assert MoE.MEGATRON_KEYS["experts.fc1.weight"] == ("mlp.experts.experts.linear_fc1.weight",)
    assert MoE.EXPERT_MODULE_KEYS["experts.fc2.weight"] == (
        "mlp.experts.linear_fc2.weight{i}",
        "mlp.experts.local_experts.{i}.linear_fc2.weight",
    )
    assert [(n.field, n.group) for n in moe.split_needs()] == [
        ("num_moe_experts", "ep"),
        ("moe_ffn_hidden_size", "etp"),
        ("moe_shared_expert_intermediate_size", "tp"),
    ]
    # A token's FLOPs: the router, its top-2 experts and the shared one, never the six it skips.
    expert, shared = DenseMLP(256, 512, True, "", False), DenseMLP(256, 1024, True, "", False)
    assert moe.weight_macs_per_token() == 256 * 8 + 2 * expert.weight_macs_per_token() + shared.weight_macs_per_token()
    biased = {t.role for t in replace(moe, bias=True).tensors()}
    assert {"experts.fc1.bias", "experts.fc2.bias", "shared.fc1.bias", "shared.fc2.bias"} <= biased


def test_an_architecture_of_layer_groups_counts_each_group():
    """DeepSeek-V3's shape of model (first layers dense, then experts) through `Family.layers`."""
    spec = RECIPES["mixtral_moe_8x7b"].replace(num_layers=4)
    dense, moe = (Attention.of(spec), DenseMLP.of(spec)), (Attention.of(spec), MoE.of(spec))
    family = replace(get_family("mixtral"), layers=lambda s: (LayerGroup(1, dense), LayerGroup(s.num_layers - 1, moe)))
    mixed = Architecture(spec, family.pattern(spec))
    uniform = Architecture.of(spec)
    per_layer = {blocks: sum(t.numel for b in blocks for t in b.tensors()) for blocks in (dense, moe)}
    assert uniform.num_parameters - mixed.num_parameters == per_layer[moe] - per_layer[dense]
    assert mixed.active_parameters == uniform.active_parameters - (
        per_layer[moe] - per_layer[dense] - MoE.of(spec).idle_params_per_token
    )
    assert mixed.blocks == moe and not mixed.uniform and uniform.uniform and mixed.moe == MoE.of(spec)
    assert {n.field for n in mixed.split_needs()} >= {"ffn_hidden_size", "num_moe_experts"}  # every group's needs
    flops = mixed.forward_flops_per_token().dense
    assert flops == 2.0 * (
        sum(b.weight_macs_per_token() for b in dense) + 3 * sum(b.weight_macs_per_token() for b in moe)
    )


def test_expert_fields_belong_to_recipes_with_experts_only():
    dense, moe = fields_of(RECIPES["llama_8b"]), fields_of(RECIPES["mixtral_moe_8x7b"])
    expert = set(moe) - set(dense)
    assert {"num_moe_experts", "moe_router_topk", "expert_parallel", "expert_tensor_parallel"} <= expert
    assert all(name.startswith(("moe_", "num_moe_", "expert_")) for name in expert)


def test_moe_families_are_registered_and_refuse_conversion_by_name():
    from nemo_recipes.errors import InvalidInputError
    from nemo_recipes.families import mapping_of

    assert {"mixtral", "qwen3_moe"} <= set(REGISTRY)
    with pytest.raises(InvalidInputError) as caught:
        mapping_of("mixtral")
    assert caught.value.problems[0].field == "family"


@pytest.mark.parametrize("name", COUNTS)
def test_moe_rows_plan_valid_on_nemos_layouts_with_experts_over_ep(name):
    spec = RECIPES[name]
    report = validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node))
    assert not [p for p in report.problems if p.severity == ERROR], report.problems
    layout = Layout.of(spec)
    # The experts' share of one GPU's parameters: the stage's layers' experts over EP x ETP.
    experts = sum(t.numel for t in MoE.of(spec).expert_tensors())
    split = spec.expert_parallel * spec.expert_tensor_parallel_size
    assert layout.expert_params_per_rank == pytest.approx(layout.layers_per_stage * experts / split)
    assert layout.expert_data_parallel == spec.world_size // (split * spec.pipeline_parallel)


def _errors(name: str, **overrides) -> dict[str, str]:
    spec = RECIPES[name].replace(**overrides)
    problems = validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node)).problems
    return {p.field: p.message for p in problems if p.severity == ERROR}


def test_every_moe_rule_megatron_core_enforces_is_reported_at_once():
    found = _errors(
        "mixtral_moe_8x22b",
        expert_parallel=3,
        expert_tensor_parallel=5,
        sequence_parallel=False,
        moe_router_topk=1,
        moe_router_enable_expert_bias=True,
    )
    assert "expert_parallel=3" in found["num_moe_experts"]  # whole experts over EP
    assert "expert_tensor_parallel=5" in found["moe_ffn_hidden_size"]  # each expert's width over ETP
    assert "ETP x EP x PP = 5 x 3 x 4 = 60" in found["expert_parallel"]  # the expert groups divide the world
    assert "sequence parallelism" in found["sequence_parallel"]
    assert "sigmoid" in found["moe_router_enable_expert_bias"]
    assert "topk is 1" in found["moe_router_pre_softmax"]
    assert "sinkhorn" in _errors("qwen3_moe_30b_a3b", moe_router_load_balancing_type="sinkhorn",
                                 moe_expert_capacity_factor=1.0)["moe_expert_capacity_factor"]  # fmt: skip
    assert "200 of 128 experts" in _errors("qwen3_moe_30b_a3b", moe_router_topk=200)["moe_router_topk"]
    assert "ETP==1" in _errors("mixtral_moe_8x22b", add_bias_linear=True)["expert_tensor_parallel"]
    assert "dense" in _errors("llama_8b", num_moe_experts=8)["num_moe_experts"]
    assert "has none" in _errors("llama_8b", expert_parallel=2)["expert_parallel"]
    assert _errors("llama_8b") == {}  # a dense row meets every MoE rule
