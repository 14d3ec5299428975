"""Tier (b): the Qwen3 rows against NeMo 2.7.3's own Qwen3 configs and factories, on the CPU (meta device for the
full-size models). The parameter counts are those of the models NeMo builds from its own Qwen3Config8B/32B; the
GPTConfig our builder makes equals NeMo's config in every field but the ones named here with their reason; and
NeMo's own `qwen3_8b` factory still resolves beside ours."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

import fiddle as fdl  # noqa: E402
from nemo.collections.llm.gpt.model.qwen3 import Qwen3Config8B, Qwen3Config32B  # noqa: E402
from test_catalog_nemo_counts import CPU, built_count  # noqa: E402
from test_training_objects import single_rank_megatron  # noqa: E402, F401  (the one-rank process group fixture)

from nemo_recipes.catalog import RECIPES  # noqa: E402
from nemo_recipes.smoke_training import cpu_compat  # noqa: E402
from nemo_recipes.training.model import model_config  # noqa: E402

pytestmark = pytest.mark.nemo
NEMO = {"qwen3_dense_8b": Qwen3Config8B, "qwen3_dense_32b": Qwen3Config32B}

#: The fields in which our config differs from NeMo's on purpose.
DIFFERENT = {
    # The catalog's one initialisation rule, sqrt(2 / 5h), for every row (NeMo's Qwen2Config: 0.02), and the
    # initialisers Megatron derives from it.
    "init_method_std", "init_method", "output_layer_init_method", "embedding_init_method",
    "embedding_init_method_std",
    # Fused bias-SwiGLU and bias-dropout-add, pure speed-ups the catalog turns on for every row (training/model.py).
    "bias_activation_fusion", "bias_dropout_fusion",
    # NeMo presets the vocabulary (151,936, never padded); ours comes from the tokenizer, padded to a multiple of
    # 1187 x TP, which 151,936 already is: the same rows (the counts below).
    "vocab_size", "make_vocab_size_divisible_by",
    # A Qwen3Config field GPTConfig lacks; GPTModel's RoPE reads seq_length instead.
    "max_position_embeddings",
    # 32B: NeMo's qwen3_32b recipe sets full/uniform/1 on the recipe; ours is full/block over the whole 32-layer
    # chunk, which recomputes the same layers.
    "recompute_granularity", "recompute_method", "recompute_num_layers",
}  # fmt: skip


@pytest.mark.usefixtures("single_rank_megatron")
@pytest.mark.parametrize("name", list(NEMO))
def test_qwen3_rows_count_what_nemo_builds_from_its_own_qwen3_configs(name):
    spec = RECIPES[name]
    # NeMo's own config with its preset, unpadded vocabulary; ours at the row's own TP (4 and 8).
    assert built_count(NEMO[name](**CPU), spec.vocab_size) == spec.num_parameters
    assert spec.num_parameters == {"qwen3_dense_8b": 8_190_735_360, "qwen3_dense_32b": 32_762_123_264}[name]


@pytest.mark.parametrize("name", list(NEMO))
def test_the_built_config_is_nemos_qwen3_config_in_every_field_that_decides_the_model(name):
    settings = {**cpu_compat.CPU_MODEL_SETTINGS}
    ours = fdl.build(cpu_compat.cpu_model_settings(model_config(RECIPES[name])))
    theirs = NEMO[name](**settings)
    differ = {
        f.name: (getattr(ours, f.name, "missing"), getattr(theirs, f.name))
        for f in dataclasses.fields(theirs)
        if getattr(ours, f.name, "missing") != getattr(theirs, f.name)
    }
    assert set(differ) <= DIFFERENT, {k: v for k, v in differ.items() if k not in DIFFERENT}
    assert (ours.qk_layernorm, ours.layernorm_epsilon, ours.kv_channels) == (True, 1e-6, 128)


def test_nemos_own_qwen3_factories_still_resolve_beside_ours():
    import nemo_run as run
    from nemo.collections import llm

    import nemo_recipes.training.register  # noqa: F401  (the entry point `nemo llm` loads)

    theirs, ours = (run.cli.resolve_factory(llm.pretrain, name) for name in ("qwen3_8b", "qwen3_dense_8b"))
    assert theirs.__module__ == "nemo.collections.llm.recipes.qwen3_8b"
    assert ours.__module__.startswith("nemo_recipes.")
