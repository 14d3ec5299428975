"""Tier (b): the MoE rows against NeMo 2.7.3's own Mixtral and Qwen3-MoE configs, on the CPU (meta device). A
model's count is affine in its layers, so NeMo's config built at 1 and 2 layers gives the full model's exactly
(built whole, 235B-A22B's 12,032 expert modules take minutes); the local spec's module names and the distributed
checkpoint's keys of the experts are Megatron's; NeMo's own factories stay reachable beside ours."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from nemo.collections.common.tokenizers.null_tokenizer import NullTokenizer  # noqa: E402
from nemo.collections.llm.gpt.model.mixtral import MixtralConfig8x7B, MixtralConfig8x22B  # noqa: E402
from nemo.collections.llm.gpt.model.qwen3 import Qwen3Config30B_A3B, Qwen3Config235B_A22B  # noqa: E402
from test_catalog_nemo_counts import CPU  # noqa: E402
from test_moe import COUNTS  # noqa: E402
from test_training_objects import single_rank_megatron  # noqa: E402, F401  (the one-rank process group fixture)

from nemo_recipes.catalog import RECIPES  # noqa: E402
from nemo_recipes.families.blocks import MoE  # noqa: E402

pytestmark = [pytest.mark.nemo, pytest.mark.usefixtures("single_rank_megatron")]
NEMO = {
    "mixtral_moe_8x7b": MixtralConfig8x7B,
    "mixtral_moe_8x22b": MixtralConfig8x22B,
    "qwen3_moe_30b_a3b": Qwen3Config30B_A3B,
    "qwen3_moe_235b_a22b": Qwen3Config235B_A22B,
}
#: What the CPU lacks (Transformer Engine's grouped GEMM and fused permutation, the all-to-all dispatcher's CUDA
#: stream: moe-cpu.md); none holds a parameter.
CPU_MOE = dict(CPU, moe_grouped_gemm=False, moe_permute_fusion=False, moe_token_dispatcher_type="allgather")


def _built(name: str, layers: int):
    config = NEMO[name](num_layers=layers, **CPU_MOE)
    config.init_model_with_meta_device = True
    config.use_cpu_initialization = True
    config.perform_initialization = False
    tokenizer = NullTokenizer(vocab_size=RECIPES[name].vocab_size - 1)  # NullTokenizer adds an end-of-document id
    return config.configure_model(tokenizer, pre_process=True, post_process=True)


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(NEMO))
def test_moe_rows_count_what_nemo_builds_from_its_own_configs(name):
    spec = RECIPES[name]
    one, two = _built(name, 1), _built(name, 2)
    per_layer = _count(two) - _count(one)
    total = _count(one) + (spec.num_layers - 1) * per_layer
    # Active: the experts a token skips, counted on Megatron's own first expert module.
    expert = sum(p.numel() for p in one.decoder.layers[0].mlp.experts.local_experts[0].parameters())
    idle = (spec.num_moe_experts - spec.moe_router_topk) * expert
    assert (total, total - spec.num_layers * idle) == COUNTS[name] == (spec.num_parameters, spec.active_parameters)


def test_the_experts_keys_are_megatrons_in_memory_and_in_the_checkpoint():
    model = _built("mixtral_moe_8x7b", 1)
    names = set(model.state_dict())
    for role, (_, local) in MoE.EXPERT_MODULE_KEYS.items():
        if role.endswith("weight"):  # Mixtral's experts have no biases
            assert "decoder.layers.0." + local.format(i=7) in names
    sharded = {value.key for value in model.sharded_state_dict().values() if hasattr(value, "key")}
    for role in ("experts.fc1.weight", "experts.fc2.weight", "router.weight", "pre_moe_norm.weight"):
        keys = MoE.MEGATRON_KEYS[role]  # Transformer Engine's spec's, then the local spec's (built here)
        assert "decoder.layers." + keys[-1] in sharded, role


def test_nemos_own_moe_factories_still_resolve_beside_ours():
    import nemo_run as run
    from nemo.collections import llm

    import nemo_recipes.training.register  # noqa: F401  (the entry point `nemo llm` loads)

    for theirs, ours in (("mixtral_8x7b", "mixtral_moe_8x7b"), ("qwen3_30b_a3b", "qwen3_moe_30b_a3b")):
        found = run.cli.resolve_factory(llm.pretrain, theirs)
        assert found.__module__ == f"nemo.collections.llm.recipes.{theirs}"
        assert run.cli.resolve_factory(llm.pretrain, ours).__module__.startswith("nemo_recipes.")


#: Where our built config differs from NeMo's on purpose (the rest, experts and router included, is NeMo's).
DIFFERENT = {
    # The catalog's one initialisation rule, sqrt(2 / 5h), for every row (NeMo's configs: 0.02), and what Megatron
    # derives from it; fused bias-SwiGLU and bias-dropout-add, speed-ups the catalog turns on for every row.
    "init_method_std", "init_method", "output_layer_init_method", "embedding_init_method",
    "embedding_init_method_std", "bias_activation_fusion", "bias_dropout_fusion",
    # NeMo's Qwen3 presets the vocabulary and its padding multiple (ours: the tokenizer's, the same rows), and
    # holds max_position_embeddings, which GPTConfig lacks (its RoPE reads seq_length).
    "vocab_size", "make_vocab_size_divisible_by", "max_position_embeddings",
    # 30B-A3B: NeMo's recipe recomputes full/uniform/1 on the recipe; ours full/block over the chunk (the same layers).
    "recompute_granularity", "recompute_method", "recompute_num_layers",
    # Apex's persistent LayerNorm kernel, which the catalog asks for on every row (a no-op with RMSNorm).
    "persist_layer_norm",
    # Mixtral: NeMo's MixtralConfig presets bf16 on the model config; ours come from the trainer's
    # MegatronMixedPrecision plugin (precision=bf16), which writes them into the config at setup.
    "bf16", "params_dtype", "autocast_dtype",
    # Mixtral: the catalog overlaps pipeline send/receive with compute on an interleaved schedule
    # (training/overlap.pipeline_comm_values), which NeMo's Mixtral recipes leave at Megatron-Core's defaults.
    "overlap_p2p_comm", "batch_p2p_comm",
}  # fmt: skip


@pytest.mark.parametrize("name", list(NEMO))
def test_the_built_config_is_nemos_in_every_field_that_decides_the_model(name):
    import dataclasses

    import fiddle as fdl

    from nemo_recipes.smoke_training import cpu_compat
    from nemo_recipes.training.model import model_config

    # The CPU layer's settings on both sides (grouped GEMM and permute fusion, which Megatron-Core refuses without
    # Transformer Engine, among them).
    ours = fdl.build(cpu_compat.cpu_model_settings(model_config(RECIPES[name])))
    theirs = NEMO[name](**cpu_compat.CPU_MODEL_SETTINGS, **cpu_compat.CPU_MOE_SETTINGS)
    differ = {
        f.name: (getattr(ours, f.name, "missing"), getattr(theirs, f.name))
        for f in dataclasses.fields(theirs)
        if getattr(ours, f.name, "missing") != getattr(theirs, f.name)
    }
    assert set(differ) <= DIFFERENT, {k: v for k, v in differ.items() if k not in DIFFERENT}
