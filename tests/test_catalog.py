"""Tier (a): the table of truth, without NeMo."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from nemo_recipes import catalog
from nemo_recipes.catalog import RECIPES, SOURCES, RecipeSpec, closest_recipe, get_recipe
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan.layout import Layout

# The seed's "Common Model Configurations", typed in again on purpose: a change on either side fails here.
SEED_ROWS = {
    #           layers hidden heads TP PP MBS  GBS   seq
    "gpt_1_3b": (24, 2048, 16, 1, 1, 4, 256, 2048),
    "gpt_7b": (32, 4096, 32, 1, 1, 2, 512, 4096),
    "gpt_13b": (40, 5120, 40, 2, 1, 1, 512, 4096),
    "gpt_70b": (80, 8192, 64, 8, 4, 1, 1024, 4096),
    "gpt_175b": (96, 12288, 96, 8, 8, 1, 1536, 2048),
}


GPT_ROWS = [name for name in RECIPES if name.startswith("gpt_")]


def test_table_equals_the_seed():
    assert GPT_ROWS == list(SEED_ROWS)
    for name, row in SEED_ROWS.items():
        spec = RECIPES[name]
        assert tuple(getattr(spec, column) for column in catalog.SEED_COLUMNS) == row, name


def test_seed_columns_are_read_from_the_seed_file(data_dir):
    seed = (data_dir / "seed" / "megatron-recipes.txt").read_text()
    lines = [line.split("\t") for line in seed.splitlines() if line[:1].isdigit() and "\t" in line]
    labels = {RECIPES[name].size_label: RECIPES[name] for name in GPT_ROWS}
    assert len(lines) == 5
    for cells in lines:
        spec = labels[cells[0]]
        assert tuple(int(c) for c in cells[1:]) == tuple(getattr(spec, c) for c in catalog.SEED_COLUMNS)


def test_gpt3_choices_and_their_sources():
    lrs = {name: RECIPES[name].max_lr for name in GPT_ROWS}
    assert lrs == {"gpt_1_3b": 2.0e-4, "gpt_7b": 1.2e-4, "gpt_13b": 1.0e-4, "gpt_70b": 0.8e-4, "gpt_175b": 0.6e-4}
    for spec in map(RECIPES.get, GPT_ROWS):
        assert spec.ffn_hidden_size == 4 * spec.hidden_size
        assert (spec.adam_beta1, spec.adam_beta2, spec.weight_decay, spec.clip_grad) == (0.9, 0.95, 0.1, 1.0)
        assert spec.min_lr == pytest.approx(0.1 * spec.max_lr)
        assert spec.precision == "bf16" and spec.distributed_optimizer
        assert spec.sequence_parallel_enabled == (spec.tensor_parallel > 1)
    # Every value a recipe states has a source.
    assert set(SOURCES) >= {f for f in catalog.field_names() if f not in ("name", "size_label")}


def test_derived_values():
    spec = RECIPES["gpt_70b"]
    assert (spec.num_nodes, spec.num_gpus_per_node, spec.world_size) == (4, 8, 32)
    assert (Layout.of(spec).dp, Layout.of(spec).microbatches) == (1, 1024)
    assert RECIPES["gpt_175b"].world_size == 64
    assert (Layout.of(RECIPES["gpt_13b"]).dp, Layout.of(RECIPES["gpt_13b"]).microbatches) == (4, 128)
    # Megatron pads the 50257-token GPT-2 vocabulary to a multiple of 128 x TP.
    assert [RECIPES[n].padded_vocab_size for n in GPT_ROWS] == [50304, 50304, 50432, 51200, 51200]
    # Steps from tokens: GPT-3's 375M warmup tokens and 300B training tokens at 256 x 2048 tokens per step.
    small = RECIPES["gpt_1_3b"]
    assert small.warmup_steps == math.ceil(375e6 / (256 * 2048)) == 716
    assert small.train_steps == math.ceil(300e9 / (256 * 2048))


def _narayanan(spec: RecipeSpec) -> float:
    """Narayanan et al. 2021, Eq. 2: 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), for GPT with biases and tied
    embeddings; it leaves out the final LayerNorm (2h)."""
    l, h, v, s = spec.num_layers, spec.hidden_size, spec.padded_vocab_size, spec.seq_length
    return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))


@pytest.mark.parametrize("name", list(SEED_ROWS))
def test_parameter_count_matches_the_analytical_formula(name):
    spec = RECIPES[name]
    assert spec.num_parameters == round(_narayanan(spec)) + 2 * spec.hidden_size


def test_the_70b_row_has_about_65b_parameters():
    assert 64.8e9 < RECIPES["gpt_70b"].num_parameters < 65.0e9


def test_replace_reports_every_problem_at_once():
    with pytest.raises(InvalidRecipeError) as error:
        RECIPES["gpt_7b"].replace(tensor_paralel=2, micro_batch_size="4", precision="fp9")
    fields = [p.field for p in error.value.problems]
    assert fields == ["tensor_paralel", "micro_batch_size", "precision"]
    text = str(error.value)
    assert "did you mean 'tensor_parallel'?" in text
    assert "micro_batch_size='4': must be an integer" in text
    assert "one of 'bf16', 'fp16', 'fp8'" in text


def test_replace_accepts_lists_and_keeps_the_row_unchanged():
    spec = RECIPES["gpt_7b"].replace(data_paths=["/d/a", "/d/b"], data_weights=[0.3, 0.7], num_layers=16)
    assert spec.data_paths == ("/d/a", "/d/b") and spec.num_layers == 16
    assert RECIPES["gpt_7b"].num_layers == 32


@pytest.mark.parametrize(
    "field,value",
    [("num_layers", 0), ("max_lr", -1.0), ("adam_beta2", 1.5), ("virtual_pipeline", 0), ("sequence_parallel", "yes")],
)
def test_out_of_range_values_name_the_field(field, value):
    with pytest.raises(InvalidRecipeError) as error:
        RECIPES["gpt_1_3b"].replace(**{field: value})
    assert error.value.problems[0].field == field


def test_unknown_recipe_suggests_a_name():
    with pytest.raises(InvalidRecipeError, match="did you mean 'gpt_70b'"):
        get_recipe("gpt_70")


def test_closest_recipe():
    assert closest_recipe(1.5e9).name == "gpt_1_3b"
    assert closest_recipe(30e9).name == "gpt_70b"  # 30/12.9 > 64.9/30 on a log scale
    assert closest_recipe(65e9).name == "gpt_70b"
    assert closest_recipe(500e9).name == "gpt_175b"
    assert closest_recipe(500e9, family="llama").name == "llama_405b"
    assert closest_recipe(7e9, family="llama").name == "llama_8b"
    with pytest.raises(InvalidRecipeError, match="family"):
        closest_recipe(7e9, family="mistral")
    with pytest.raises(InvalidRecipeError):
        closest_recipe(0)


def test_importing_the_catalog_and_planner_loads_no_heavy_module():
    code = (
        "import sys, json, nemo_recipes, nemo_recipes.catalog, nemo_recipes.plan;"
        "nemo_recipes.get_recipe('gpt_70b').num_parameters;"
        "heavy = ('nemo', 'nemo_run', 'megatron', 'torch', 'lightning', 'numpy', 'matplotlib');"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == []


@pytest.mark.parametrize("minutes", [2**63, 1e9, 525_601, 0, -5])
def test_checkpoint_time_interval_is_bounded(minutes):
    # NeMo builds a timedelta from it: 2**63 minutes overflowed at build time instead of being refused here.
    with pytest.raises(InvalidRecipeError, match="checkpoint_every_minutes"):
        RECIPES["gpt_7b"].replace(checkpoint_every_minutes=minutes)
    assert RECIPES["gpt_7b"].replace(checkpoint_every_minutes=525_600).checkpoint_every_minutes == 525_600


# ---- the Llama-3-shaped rows ----

# The published Llama 3 shapes (Dubey et al. 2024, Table 3) and NVIDIA's H100 BF16 layouts, typed in again.
LLAMA_ROWS = {
    #             layers hidden heads groups FFN   TP PP CP VP    MBS GBS
    "llama_8b": (32, 4096, 32, 8, 14336, 1, 1, 2, None, 1, 128),
    "llama_70b": (80, 8192, 64, 8, 28672, 4, 4, 2, 5, 1, 128),
    "llama_405b": (126, 16384, 128, 8, 53248, 8, 8, 2, 8, 1, 512),
}
LLAMA_COLUMNS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "tensor_parallel",
    "pipeline_parallel",
    "context_parallel",
    "virtual_pipeline",
    "micro_batch_size",
    "global_batch_size",
)


@pytest.mark.parametrize("name", list(LLAMA_ROWS))
def test_llama_rows_have_the_published_shape_layout_and_architecture(name):
    spec = RECIPES[name]
    assert tuple(getattr(spec, c) for c in LLAMA_COLUMNS) == LLAMA_ROWS[name]
    assert (spec.vocab_size, spec.seq_length, spec.share_embeddings) == (128256, 8192, False)
    assert (spec.position_embedding_type, spec.rotary_base, spec.rotary_percent) == ("rope", 500_000, 1.0)
    assert (spec.normalization, spec.activation, spec.add_bias_linear) == ("RMSNorm", "swiglu", False)
    assert spec.gated_linear_unit and spec.head_dim == 128
    assert (spec.hidden_dropout, spec.attention_dropout) == (0.0, 0.0)
    assert spec.family == "llama" and catalog.config_class_name(spec) == "LlamaConfig" + spec.size_label
    # Every value the row states has a Llama source, not the GPT seed's.
    for field in LLAMA_COLUMNS + ("vocab_size", "rotary_base", "activation", "max_lr"):
        assert "seed table" not in catalog.source(spec, field), field


def test_config_class_names_do_not_collide_across_families():
    names = [catalog.config_class_name(spec) for spec in RECIPES.values()]
    assert len(set(names)) == len(names)
    assert catalog.config_class_name(RECIPES["gpt_70b"]) == "GPTConfig70B"
    assert catalog.config_class_name(RECIPES["llama_70b"]) == "LlamaConfig70B"


def _llama_count(layers, hidden, heads, groups, ffn, vocab):
    """The count of a Llama 3 checkpoint, written out as Meta's layout has it: per layer q, k, v, o, gate, up, down
    and two RMSNorm weights; embeddings and an untied output layer; the final norm."""
    head = hidden // heads
    attention = hidden * heads * head + 2 * hidden * groups * head + heads * head * hidden
    mlp = 3 * hidden * ffn
    return layers * (attention + mlp + 2 * hidden) + 2 * vocab * hidden + hidden


@pytest.mark.parametrize(
    "name,published",
    # Meta's published counts (Hugging Face safetensors metadata): 8,030,261,248; 70,553,706,496; 405,853,388,800.
    [("llama_8b", 8_030_261_248), ("llama_70b", 70_553_706_496), ("llama_405b", 405_853_388_800)],
)
def test_llama_parameter_counts(name, published):
    spec = RECIPES[name]
    assert _llama_count(*LLAMA_ROWS[name][:5], 128256) == published
    # NeMo pads the vocabulary to a multiple of 128 x TP (nemo.lightning.base.get_vocab_size): the padding rows of
    # the embedding and of the output layer are parameters too.
    padding = spec.padded_vocab_size - 128256
    assert padding == {"llama_8b": 0, "llama_70b": 256, "llama_405b": 768}[name]
    assert spec.num_parameters == published + 2 * padding * spec.hidden_size
    assert spec.replace(tensor_parallel=1).num_parameters == published


def test_architecture_overrides_change_the_count_as_megatron_builds_it():
    gpt = RECIPES["gpt_7b"]
    h, ffn, layers = gpt.hidden_size, gpt.ffn_hidden_size, gpt.num_layers
    # Dropping biases removes QKV (3h), proj (h), fc1 (ffn) and fc2 (h) biases from every layer.
    assert gpt.num_parameters - gpt.replace(add_bias_linear=False).num_parameters == layers * (5 * h + ffn)
    # A gate doubles fc1 (weight and bias), whichever activation gates it.
    for gated in ("swiglu", "geglu"):
        assert gpt.replace(activation=gated).num_parameters - gpt.num_parameters == layers * (h * ffn + ffn)
    # Untying adds an output layer; RoPE drops the learned position table; RMSNorm drops the norms' biases.
    assert gpt.replace(share_embeddings=False).num_parameters - gpt.num_parameters == gpt.padded_vocab_size * h
    rope = gpt.replace(position_embedding_type="rope")
    assert gpt.num_parameters - rope.num_parameters == gpt.seq_length * h
    assert gpt.num_parameters - gpt.replace(normalization="RMSNorm").num_parameters == (2 * layers + 1) * h
    # Grouped-query attention: K and V shrink to groups x head_dim each.
    d = h // gpt.num_attention_heads
    assert gpt.num_parameters - gpt.replace(num_query_groups=8).num_parameters == layers * 2 * (h - 8 * d) * (h + 1)
    # kv_channels sets the head width: Q, K, V and the output projection follow it, hidden does not.
    wide = gpt.replace(kv_channels=2 * d)
    assert wide.num_parameters - gpt.num_parameters == layers * (4 * h * h + 3 * h)


def test_gated_linear_unit_is_refused_with_the_activation_that_means_it():
    with pytest.raises(InvalidRecipeError) as error:
        RECIPES["gpt_7b"].replace(gated_linear_unit=True, activaton="swiglu")
    problem, typo = error.value.problems
    assert (problem.field, problem.value) == ("gated_linear_unit", True)
    assert "GeGLU" in problem.message and "activation=swiglu" in problem.fix and "activation=geglu" in problem.fix
    assert typo.field == "activaton" and "did you mean 'activation'" in typo.message
    assert RECIPES["gpt_7b"].replace(activation="geglu").gated_linear_unit
    assert not RECIPES["llama_8b"].replace(activation="gelu").gated_linear_unit


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"rotary_percent": 0.0}, "rotary_percent"),
        ({"rotary_percent": 1.5}, "rotary_percent"),
        ({"rotary_base": 0}, "rotary_base"),
        ({"kv_channels": 0}, "kv_channels"),
        ({"activation": "relu"}, "activation"),
    ],
)
def test_architecture_fields_name_the_field_and_the_fix(overrides, field):
    # Rules across fields and the layout (heads and query groups, TP, RoPE's channel pairs) are the planner's:
    # tests/test_plan_validate.py.
    with pytest.raises(InvalidRecipeError) as error:
        RECIPES["llama_8b"].replace(**overrides)
    assert [p.field for p in error.value.problems] == [field]
    assert error.value.problems[0].fix
