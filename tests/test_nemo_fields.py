"""Tier (b): the field table's NeMo side with real NeMo-Run objects: each field lands on the paths the table names,
each conversion writes only there, and spec -> NeMo configuration -> introspect -> spec gives the spec back for
every catalog recipe and for overridden values."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from nemo_recipes.catalog import RECIPES  # noqa: E402
from nemo_recipes.recipe_fields import RECIPE_FIELDS  # noqa: E402
from nemo_recipes.training.factories import build_recipe  # noqa: E402
from nemo_recipes.training.introspect import spec_from_partial  # noqa: E402
from nemo_recipes.training.nemo_fields import CONVERSIONS, MISSING, lookup  # noqa: E402
from nemo_recipes.training.serialization import dumps  # noqa: E402

pytestmark = pytest.mark.nemo

#: Overrides that reach every conversion in a non-default direction; each reads back as itself.
OVERRIDES = [
    ("gpt_7b", dict(activation="swiglu", add_bias_linear=False, precision="fp8", recompute="none")),
    ("gpt_7b", dict(activation="geglu", precision="fp16", recompute="full", recompute_num_layers=2)),
    # NeMo's current-scaling, blockwise and MXFP8 presets (fp8_recipe), the published MoE tables' precisions.
    ("llama_8b", dict(precision="fp8_tensorwise")),
    ("llama_8b", dict(precision="fp8_blockwise")),
    ("llama_8b", dict(precision="mxfp8")),
    ("gpt_13b", dict(sequence_parallel=False, distributed_optimizer=False, overlap_param_gather=False)),
    ("gpt_13b", dict(tp_comm_overlap=False, overlap_grad_reduce=False, checkpoint_async=False)),
    (
        "gpt_1_3b",
        dict(data_paths=("/d/web", "/d/code"), data_weights=(0.3, 0.7), tokenizer_path="/t/tokenizer.model"),
    ),
    ("gpt_1_3b", dict(data_paths=("/d/web", "/d/code"), data_epochs=(1.0, 2.0), tokenizer_path="/t/hf_dir")),
    (
        "gpt_1_3b",
        dict(
            restore_from="/ck/imported",
            checkpoint_every_steps=None,
            checkpoint_every_minutes=30.0,
            max_lr=3e-4,
            min_lr_ratio=0.05,
            adam_beta1=0.8,
            adam_beta2=0.99,
            adam_eps=1e-6,
            weight_decay=0.05,
            clip_grad=0.5,
        ),
    ),
    (
        "gpt_1_3b",
        dict(
            position_embedding_type="rope",
            rotary_base=20000,
            rotary_percent=0.5,
            normalization="RMSNorm",
            share_embeddings=False,
            num_query_groups=8,
            kv_channels=64,
            vocab_size=32000,
            make_vocab_size_divisible_by=64,
            hidden_dropout=0.0,
            attention_dropout=0.05,
            checkpoint_every_minutes=None,
        ),
    ),
    ("llama_70b", dict(num_nodes=16, virtual_pipeline=None, context_parallel=1, micro_batch_size=2)),
    (
        "qwen3_moe_30b_a3b",  # every expert field away from the row's value (ETP unset: TP 4; 4 x 2 x PP 2 = 16)
        dict(
            num_nodes=2,
            expert_parallel=2,
            expert_tensor_parallel=None,
            moe_router_topk=4,
            moe_ffn_hidden_size=512,
            moe_shared_expert_intermediate_size=1536,
            moe_router_score_function="sigmoid",
            moe_router_enable_expert_bias=True,
            moe_router_pre_softmax=True,
            moe_router_load_balancing_type="seq_aux_loss",
            moe_aux_loss_coeff=1e-4,
            moe_expert_capacity_factor=1.25,
            moe_token_dispatcher_type="allgather",
            moe_grouped_gemm=False,
            moe_permute_fusion=False,
        ),
    ),
    (
        "deepseek_v3_671b",  # every multi-latent attention, MTP, routing and stage field away from the row's value
        dict(
            q_lora_rank=None,
            kv_lora_rank=256,
            qk_head_dim=64,
            qk_pos_emb_head_dim=32,
            v_head_dim=96,
            mtp_num_layers=2,
            mtp_loss_scaling_factor=0.3,
            moe_router_num_groups=4,
            moe_router_group_topk=2,
            moe_router_topk_scaling_factor=1.5,
            moe_router_bias_update_rate=1e-4,
            moe_first_dense_layers=1,
            pipeline_first_stage_layers=4,
            pipeline_last_stage_layers=1,
        ),
    ),
    ("deepseek_v3_671b", dict(mtp_num_layers=None, mtp_loss_scaling_factor=None, moe_first_dense_layers=0)),
]
#: Overrides NeMo's configuration holds in another form (tokens as weights, a tokenizer.json as its directory): read
#: back as a different spec that builds the same configuration.
SAME_CONFIGURATION = [
    ("gpt_1_3b", dict(data_paths=("/d/web",), data_tokens=(300_000_000_000,))),
    ("gpt_1_3b", dict(data_paths=("/d/web",), tokenizer_path="/t/hf_dir/tokenizer.json")),
]


def test_the_conversions_are_the_ones_the_table_names():
    assert {f.conversion for f in RECIPE_FIELDS if f.conversion} == set(CONVERSIONS)


def _check_paths(spec, partial) -> None:
    """Each field lands on its paths: a copied value as it is, a converted one only on the paths the table gives."""
    for entry in RECIPE_FIELDS:
        if entry.nemo and entry.conversion is None and entry.applies(spec):
            for path in entry.nemo:
                held = lookup(partial, path)
                wanted = getattr(spec, entry.name)
                assert held == wanted or (held is None and not wanted), (entry.name, path, held)
    for name, conversion in CONVERSIONS.items():
        declared = {path for f in RECIPE_FIELDS if f.conversion == name for path in f.nemo}
        written = conversion.write(spec)
        assert set(written) <= declared, name
        for path in written:
            assert lookup(partial, path) is not MISSING, (name, path)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_lands_on_its_paths_and_reads_back_as_itself(name):
    spec = RECIPES[name]
    partial = build_recipe(spec)
    _check_paths(spec, partial)
    assert spec_from_partial(partial) == spec


@pytest.mark.parametrize("name,overrides", OVERRIDES, ids=lambda x: x if isinstance(x, str) else ",".join(x))
def test_overridden_values_read_back_as_themselves(name, overrides):
    spec = RECIPES[name].replace(**overrides)
    partial = build_recipe(spec)
    _check_paths(spec, partial)
    back = spec_from_partial(partial)
    assert {k: v for k, v in back.to_dict().items() if v != getattr(spec, k)} == {}


@pytest.mark.parametrize("name,overrides", SAME_CONFIGURATION, ids=lambda x: x if isinstance(x, str) else ",".join(x))
def test_values_held_in_another_form_build_the_same_configuration(name, overrides):
    spec = RECIPES[name].replace(**overrides)
    partial = build_recipe(spec)
    assert dumps(build_recipe(spec_from_partial(partial)), "yaml") == dumps(partial, "yaml")
