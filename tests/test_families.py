"""The family modules and their registry, on the fast path (no NeMo): an unknown family is refused with field,
value and fix; each family's rows count through the one architecture; the recipe factories' help names the family.
Megatron's own layers are compared with the architecture's tensors in tests/test_training_objects.py."""

from __future__ import annotations

import pytest

from nemo_recipes.catalog import RECIPES, source
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.families import REGISTRY, Architecture, family_of, get_family


@pytest.mark.parametrize("name, hint", [("mistral", ""), ("lama", "did you mean 'llama'?"), (7, "")])
def test_an_unknown_family_is_refused_with_field_value_and_fix(name, hint):
    with pytest.raises(InvalidRecipeError) as caught:
        get_family(name)
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("family", name)
    assert hint in problem.message
    assert problem.fix == "use one of: gpt, llama, qwen3."


def test_every_row_belongs_to_the_family_its_name_starts_with():
    for name, spec in RECIPES.items():
        assert get_family(spec.family) is REGISTRY[name.split("_")[0]]
    assert family_of("custom") == "gpt"  # a custom shape takes the catalog defaults, which are GPT-3's


def test_a_family_owns_the_sources_of_the_values_its_rows_change():
    assert source(RECIPES["llama_8b"], "rotary_base").startswith("500,000")
    assert source(RECIPES["gpt_7b"], "rotary_base").startswith("10000")


@pytest.mark.parametrize(
    "name, tensors, sharded_per_layer, replicated_per_layer",
    [
        # GPT-3 1.3B: QKV 3h x h and fc1 4h x h with their biases are column-parallel; proj and fc2 row-parallel;
        # their biases and two LayerNorms (weight and bias) replicated.
        ("gpt_1_3b", 12, 12 * 2048**2 + 3 * 2048 + 4 * 2048, 6 * 2048),
        # Llama 3 8B: GQA QKV (32 + 2 x 8 heads of 128) and SwiGLU fc1 (2 x 14336), no biases, two RMSNorm weights.
        ("llama_8b", 6, 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336, 2 * 4096),
    ],
)
def test_a_layer_splits_into_sharded_and_replicated_tensors(name, tensors, sharded_per_layer, replicated_per_layer):
    architecture = Architecture.of(RECIPES[name])
    assert len(architecture.layer_tensors()) == tensors
    params = architecture.layer_params()
    assert (params.sharded, params.replicated) == (sharded_per_layer, replicated_per_layer)


def test_the_parameter_count_adds_the_layers_the_embeddings_and_the_final_norm():
    spec = RECIPES["gpt_1_3b"]
    architecture = Architecture.of(spec)
    per_layer = architecture.layer_params()
    tied = spec.padded_vocab_size * spec.hidden_size
    positions = spec.seq_length * spec.hidden_size
    assert architecture.num_parameters == 24 * (per_layer.sharded + per_layer.replicated) + tied + positions + 2 * 2048
    assert spec.num_parameters == architecture.num_parameters == 1_315_819_520


def test_the_recipe_factories_help_names_the_family():
    # The factories need NeMo-Run. Their docstrings are what help(nemo_recipes.llama_8b) shows; NeMo-Run's factory
    # table in `nemo llm pretrain --help` shows names and import paths only (checked with NeMo-Run as pinned).
    pytest.importorskip("nemo_run")
    import nemo_recipes

    assert nemo_recipes.llama_8b.__doc__.startswith("Llama 8B pretraining recipe")
    assert "RoPE, RMSNorm, SwiGLU" in nemo_recipes.llama_8b.__doc__
    assert nemo_recipes.gpt_7b.__doc__.startswith("GPT 7B pretraining recipe")
