"""DeepSeek-V3 and its multi-latent attention on the fast path (no NeMo): the row holds NeMo 2.7.3's DeepSeekV3Config
and its deepseek_v3 recipe's layout, typed in again here; the counts are those of the models NeMo builds from its own
config (tests/test_deepseek_nemo.py builds them); `ls`, `show` and `plan` take the row, and the smoke run refuses it
on a CPU with the reason."""

from __future__ import annotations

import json

import pytest
from _cli import cli

from nemo_recipes import catalog
from nemo_recipes.catalog import RECIPES
from nemo_recipes.families import Architecture
from nemo_recipes.families.blocks import DenseMLP, MoE
from nemo_recipes.families.latent_attention import MultiLatentAttention
from nemo_recipes.families.megatron_names import LAYER_KEYS
from nemo_recipes.plan import Cluster, estimate_memory, validate
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.memory import LayoutActivations
from nemo_recipes.plan.throughput import estimate_throughput
from nemo_recipes.smoke_training import cpu_compat

NAME = "deepseek_v3_671b"
#: NeMo 2.7.3's DeepSeekV3Config (shape, MLA, experts, routing) and its deepseek_v3 pretrain_recipe (layout, MTP).
VALUES = dict(
    num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432, vocab_size=129_280,
    q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
    num_moe_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
    moe_first_dense_layers=3, moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
    moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-4, moe_router_num_groups=8,
    moe_router_group_topk=4, moe_router_topk_scaling_factor=2.5, mtp_num_layers=1, mtp_loss_scaling_factor=0.1,
    tensor_parallel=2, pipeline_parallel=16, expert_parallel=64, expert_tensor_parallel=1, context_parallel=1,
    virtual_pipeline=None, pipeline_first_stage_layers=3, pipeline_last_stage_layers=2, micro_batch_size=1,
    global_batch_size=4096, seq_length=4096, num_nodes=128, num_gpus_per_node=8,
)  # fmt: skip
#: Counts of the models NeMo 2.7.3 builds from DeepSeekV3Config on the meta device (the issue's 671,026,404,352;
#: moe-cpu.md's active 37,552,282,624; with the recipe's MTP layer, 682,636,472,320 built, 38,240,382,976 active).
WITHOUT_MTP, ACTIVE_WITHOUT_MTP = 671_026_404_352, 37_552_282_624
WITH_MTP, ACTIVE_WITH_MTP = 682_636_472_320, 38_240_382_976


def test_the_row_holds_nemos_config_and_recipe_each_value_with_its_source():
    spec = RECIPES[NAME]
    assert {k: getattr(spec, k) for k in VALUES} == VALUES
    assert spec.family == "deepseek" and catalog.config_class_name(spec) == "DeepSeekV3Config671B"
    for field in VALUES:
        if field != "num_gpus_per_node" and field != "virtual_pipeline":
            assert catalog.source(spec, field) != catalog.SOURCES.get(field), field


def test_counts_equal_what_nemo_builds_with_and_without_the_mtp_layer():
    spec = RECIPES[NAME]
    assert (spec.num_parameters, spec.active_parameters) == (WITH_MTP, ACTIVE_WITH_MTP)
    no_mtp = spec.replace(mtp_num_layers=None, mtp_loss_scaling_factor=None)
    assert (no_mtp.num_parameters, no_mtp.active_parameters) == (WITHOUT_MTP, ACTIVE_WITHOUT_MTP)
    # The vocabulary is never padded at the recipe's TP, nor at any power of two up to 256.
    assert {spec.replace(tensor_parallel=t).padded_vocab_size for t in (1, 2, 8, 64, 256)} == {129_280}
    groups = Architecture.of(spec).groups
    assert [(g.count, [type(b) for b in g.blocks]) for g in groups] == [
        (3, [MultiLatentAttention, DenseMLP]),
        (58, [MultiLatentAttention, MoE]),
    ]


def test_multi_latent_attention_counts_as_megatron_builds_it():
    mla = MultiLatentAttention.of(RECIPES[NAME])
    shapes = {t.role: (t.shape, t.split) for t in mla.tensors()}
    # multi_latent_attention.py: q down to the q LoRA rank, its norm, q up to heads x (128 + 64); kv down to the kv
    # rank and one 64-channel rotary key, its norm, kv up to heads x (128 + 128); the output from heads x 128.
    assert shapes == {
        "mla_input_norm.weight": ((7168,), "replicated"),
        "q_down.weight": ((1536, 7168), "replicated"),
        "q_latent_norm.weight": ((1536,), "replicated"),
        "q_up.weight": ((128 * 192, 1536), "column"),
        "kv_down.weight": ((512 + 64, 7168), "replicated"),
        "kv_latent_norm.weight": ((512,), "replicated"),
        "kv_up.weight": ((128 * 256, 512), "column"),
        "proj.weight": ((7168, 128 * 128), "row"),
    }
    assert sum(t.numel for t in mla.tensors()) == 187_114_496  # NeMo's per-layer attention parameters
    assert all(role in LAYER_KEYS for role in shapes)
    assert LAYER_KEYS["q_latent_norm.weight"] == (
        "self_attention.linear_q_up_proj.layer_norm_weight",  # Transformer Engine's fused norm
        "self_attention.q_layernorm.weight",  # the local spec's
    )
    weights = sum(t.numel for t in mla.tensors() if len(t.shape) == 2)
    assert mla.weight_macs_per_token() == weights == sum(g.k * g.n for g in mla.gemms())
    assert mla.attention_flops_per_token(4096) == 2 * 4096 * 128 * (192 + 128)
    # The latents (query 1536, key/value 512) are what it stores when its up projections are recomputed.
    assert mla.stored_latents_per_sbh() == 4 * (1536 + 512) / 7168
    assert {c.kind for c in mla.collectives() if c.group == "tp"} == {"all-gather", "reduce-scatter"}
    assert [n.field for n in mla.split_needs()] == ["num_attention_heads"]
    assert not mla.shape_problems() and mla.__class__(**{**mla.__dict__, "rope_dim": 63}).shape_problems()


def test_plan_validates_the_row_on_its_default_cluster():
    spec = RECIPES[NAME]
    report = validate(spec, Cluster.of(128, 8, "h100"))
    assert report.valid, report.errors
    memory = estimate_memory(spec, Cluster.of(128, 8, "h100"))
    assert memory.fits and memory.total > 0
    # A TP that does not divide the heads is refused.
    errors = validate(spec.replace(tensor_parallel=3, num_nodes=384), Cluster.of(384, 8, "h100")).errors
    assert any("num_attention_heads=128 is not divisible" in p.message for p in errors)


def test_ls_and_show_print_total_and_active_counts_and_the_mla_fields():
    listed = [line for line in cli("ls").stdout.splitlines() if line.startswith(NAME)]
    assert len(listed) == 1 and "683B" in listed[0] and "38.2B" in listed[0] and "EP 64" in listed[0]
    shown = json.loads(cli("show", NAME, "--json").stdout)
    assert shown["fields"]["kv_lora_rank"]["value"] == 512 and shown["fields"]["mtp_num_layers"]["value"] == 1
    assert shown["derived"]["num_parameters"]["value"] == WITH_MTP
    # A dense row shows none of them.
    assert "kv_lora_rank" not in json.loads(cli("show", "llama_8b", "--json").stdout)["fields"]


def test_the_cpu_smoke_run_refuses_multi_latent_attention_with_the_reason():
    (problem,) = cpu_compat.model_problems(RECIPES[NAME])
    assert (problem.field, problem.value) == ("kv_lora_rank", 512)
    assert "k_channels" in problem.message and "torch.cuda.current_device()" in problem.message
    assert "GPU" in problem.fix
    assert not cpu_compat.model_problems(RECIPES["llama_8b"])
    result = cli("smoke", NAME)
    assert result.returncode == 2 and result.stdout == "", result
    assert "kv_lora_rank=512" in result.stderr and "Transformer Engine" in result.stderr


def test_the_plan_counts_each_layer_as_its_own_group_dense_first_layers_and_expert_layers():
    """At PP 1 the one stage holds the 3 dense layers and the 58 expert layers: its activations are their sum, each
    from its own blocks (by hand here), and its routed experts' step time is 58 layers' and the MTP layer's (built as
    the last layer), not 61 + 1: the most numerous group's for every layer."""
    spec = RECIPES[NAME].replace(
        pipeline_parallel=1, pipeline_first_stage_layers=None, pipeline_last_stage_layers=None, tensor_parallel=8
    )
    cluster = Cluster.of(128, 8, "h100")
    layout = Layout.of(spec, cluster)
    t, sbh = layout.tp, float(spec.seq_length) * spec.micro_batch_size * spec.hidden_size
    assert layout.sequence_parallel and spec.moe_imbalance == 1.0

    def stored(blocks: tuple) -> float:  # Korthikanti's 10 replicated (sharded by SP), the blocks' over TP
        return sbh * (10.0 / t + sum(b.stored_activations_per_sbh() for b in blocks) / t)

    dense, experts = Architecture.of(spec).groups
    by_hand = dense.count * stored(dense.blocks) + experts.count * stored(experts.blocks)
    terms = LayoutActivations.of(spec, layout)
    assert terms.layer_without_core * spec.num_layers == pytest.approx(by_hand, rel=1e-12)
    assert stored(dense.blocks) < stored(experts.blocks)  # so counting 61 expert layers overstates it

    # The routed experts a GPU holds: the 58 expert layers' and the MTP layer's, none in the dense layers.
    routed = sum(t.numel for b in experts.blocks for t in b.tensors() if t.split == "expert")
    assert layout.expert_params_per_rank == (58 + 1) * routed / spec.expert_parallel

    all_experts = spec.replace(moe_first_dense_layers=0)
    ratio = (
        estimate_throughput(spec, cluster).breakdown_s["expert_matmul"]
        / estimate_throughput(all_experts, cluster).breakdown_s["expert_matmul"]
    )
    assert ratio == pytest.approx((58 + 1) / (61 + 1), rel=1e-9)
