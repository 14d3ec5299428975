"""The one layout value and the one program: sizes computed once, read by the catalog, validation, memory and
throughput; validation and the throughput model refuse exactly the same plans; the software stack decides the
attention kernel and the overlaps for memory and throughput together."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan import GPUS, Cluster, Layout, estimate_memory, program_for, resolve_stack, validate
from nemo_recipes.plan import stack as stack_module
from nemo_recipes.plan.layout import derived_values, layer_params
from nemo_recipes.plan.rules import STRUCTURAL_RULES, structural_errors
from nemo_recipes.plan.throughput import estimate_throughput

H100 = Cluster.of(1, 8, "h100")


@pytest.mark.parametrize(
    "name, dp, m, stage, chunk",
    [
        ("gpt_1_3b", 8, 8, 24, 24),
        ("gpt_7b", 8, 32, 32, 32),
        ("gpt_13b", 4, 128, 40, 40),
        ("gpt_70b", 1, 1024, 20, 20),
        ("gpt_175b", 1, 1536, 12, 12),
    ],
)
def test_recipe_layouts(name, dp, m, stage, chunk):
    spec = RECIPES[name]
    layout = Layout.of(spec)
    assert (layout.dp, layout.microbatches, layout.layers_per_stage, layout.layers_per_chunk) == (dp, m, stage, chunk)
    assert layout.world_divides and layout.batch_divides and layout.layers_divide
    # The catalog's derived values are read from the same layout.
    values = derived_values(spec)
    assert (values["data_parallel_size"], values["grad_accumulation_steps"]) == (dp, m)


def test_the_layout_on_another_cluster_and_with_interleaving():
    spec = RECIPES["gpt_175b"].replace(virtual_pipeline=3)
    layout = Layout.of(spec, Cluster.of(16, 8, "h100"))
    assert (layout.dp, layout.microbatches, layout.vp, layout.layers_per_chunk) == (2, 768, 3, 4)
    assert layout.optimizer_shards == 2 and layout.tokens_per_rank == 2048


def test_an_inconsistent_layout_rounds_and_says_so():
    layout = Layout.of(RECIPES["gpt_70b"], Cluster.of(3, 8))
    assert not layout.world_divides and layout.dp == 1
    odd = Layout.of(RECIPES["gpt_7b"].replace(num_layers=30, pipeline_parallel=4), H100)
    assert not odd.layers_divide and odd.layers_per_stage == 8


def test_embedding_and_loss_counted_in_the_pipeline_split():
    # Llama 3.1 405B as NeMo runs it: 126 layers + embedding + loss = 128 slots over PP 8 x VP 8.
    spec = RecipeSpec(
        name="405b",
        size_label="405B",
        num_layers=126,
        hidden_size=16384,
        num_attention_heads=128,
        num_query_groups=8,
        ffn_hidden_size=53248,
        seq_length=8192,
        vocab_size=128256,
        activation="swiglu",
        normalization="RMSNorm",
        position_embedding_type="rope",
        share_embeddings=False,
        tensor_parallel=8,
        pipeline_parallel=8,
        context_parallel=2,
        virtual_pipeline=8,
        micro_batch_size=1,
        global_batch_size=512,
        max_lr=1e-4,
        num_nodes=128,
    )
    uncounted = validate(spec.replace(pipeline_counts_embedding_and_loss=False), Cluster.of(128, 8))
    assert {p.field for p in uncounted.errors} == {"pipeline_parallel", "virtual_pipeline"}
    counted = spec.replace(pipeline_counts_embedding_and_loss=True)
    layout = Layout.of(counted, Cluster.of(128, 8))
    assert (
        layout.pipeline_slots,
        layout.layers_first_stage,
        layout.layers_per_stage,
        layout.layers_last_stage,
        layout.layers_per_chunk,
    ) == (128, 15, 16, 15, 2)
    # A middle stage holds 16 layers and no embedding: more parameters than the first (15 layers + embedding).
    assert layout.params_per_rank == pytest.approx(16 * layer_params(counted).per_rank(8))
    assert validate(counted, Cluster.of(128, 8)).valid
    assert estimate_throughput(counted, Cluster.of(128, 8, "h100")).step_time_s > 0


def test_the_first_and_last_stages_may_hold_their_own_layers():
    # DeepSeek-V3 as NeMo's deepseek_v3 recipe splits it: 61 layers over PP 16 as 3 + 14 x 4 + 2 (Megatron-Core's
    # num_layers_in_first/last_pipeline_stage); 61 divides by no PP above 1 otherwise.
    spec = RECIPES["gpt_7b"].replace(num_layers=61, pipeline_parallel=16, num_nodes=16)
    assert {p.field for p in validate(spec, Cluster.of(16, 8)).errors} == {"pipeline_parallel"}
    split = spec.replace(pipeline_first_stage_layers=3, pipeline_last_stage_layers=2)
    layout = Layout.of(split, Cluster.of(16, 8))
    assert (layout.layers_first_stage, layout.layers_per_stage, layout.layers_last_stage) == (3, 4, 2)
    assert layout.layers_divide and validate(split, Cluster.of(16, 8)).valid
    per_layer, t = layer_params(split).per_rank(split.tensor_parallel), split.tensor_parallel
    embedding, positions = split.padded_vocab_size * split.hidden_size / t, split.seq_length * split.hidden_size
    # The first stage's 3 layers, embedding and learned positions outweigh a middle stage's 4 layers.
    assert layout.params_per_rank == pytest.approx(3 * per_layer + embedding + positions)
    assert layout.params_per_rank > 4 * per_layer
    # 3 + 2 leaves 56 for 14 stages; 3 + 3 leaves 55, which 14 stages cannot share; a VP of 3 divides no stage.
    for wrong in (dict(pipeline_last_stage_layers=3), dict(virtual_pipeline=3)):
        errors = validate(split.replace(**wrong), Cluster.of(16, 8)).errors
        assert [p.field for p in errors] == ["pipeline_first_stage_layers"], errors
    # Megatron-Core refuses them beside the embedding and loss slots.
    both = validate(split.replace(pipeline_counts_embedding_and_loss=True), Cluster.of(16, 8)).errors
    assert "pipeline_counts_embedding_and_loss" in both[0].fix


@pytest.mark.parametrize(
    "first, last, counted", [(None, None, False), (None, None, True), (3, 2, False), (4, None, False)]
)
def test_an_interleaved_layout_derives_from_the_one_without(first, last, counted):
    """What lets a plan search lay out each (TP, PP, micro batch) once for all its VPs: `interleaved_by` gives what
    `Layout.of` gives, also where VP does not divide the layers, and with stages of their own layers."""
    cluster = Cluster.of(16, 8, "h100")
    spec = RECIPES["gpt_7b"].replace(
        num_layers=64,
        num_nodes=16,
        pipeline_counts_embedding_and_loss=counted,
        pipeline_first_stage_layers=first,
        pipeline_last_stage_layers=last,
    )
    for p in (2, 3, 4, 6, 8, 10, 16):
        plain = spec.replace(pipeline_parallel=p, virtual_pipeline=None)
        for v in (2, 3, 4, 5, 8):
            chunked = plain.replace(virtual_pipeline=v)
            assert Layout.of(plain, cluster).interleaved_by(chunked, v) == Layout.of(chunked, cluster), (p, v)


@pytest.mark.parametrize("name", ["gpt_7b", "mixtral_moe_8x7b"])
def test_a_layout_of_another_batch_derives_from_the_first(name):
    """What lets a plan search lay out each (TP, PP, experts) once for all its micro batches: `batched` gives what
    `Layout.of` gives, also where the batch does not divide."""
    cluster = Cluster.of(2, 8, "h100")
    spec = RECIPES[name].replace(num_nodes=2, tensor_parallel=2, pipeline_parallel=2)
    first = Layout.of(spec, cluster)
    for b, gbs in ((1, 512), (2, 512), (3, 512), (4, 96), (8, 1000)):
        other = spec.replace(micro_batch_size=b, global_batch_size=gbs)
        assert first.batched(other) == Layout.of(other, cluster), (b, gbs)


def test_recomputed_fraction_is_one_definition():
    spec = RECIPES["gpt_175b"].replace(recompute="full", virtual_pipeline=3)  # 4 layers per chunk
    layout = Layout.of(spec)
    assert layout.recomputed_fraction(spec) == 1.0
    assert layout.recomputed_fraction(spec.replace(recompute_num_layers=1)) == 0.25
    assert layout.recomputed_fraction(spec.replace(recompute_num_layers=9)) == 1.0
    assert layout.recomputed_fraction(spec.replace(recompute="selective")) == 0.0


# ---- the rule sets agree ----

shapes = st.fixed_dictionaries(
    {
        "num_layers": st.integers(1, 96),
        "heads": st.sampled_from([8, 12, 16, 32, 40, 64]),
        "groups_div": st.sampled_from([1, 2, 4, 8]),
        "seq": st.sampled_from([1000, 2048, 4096, 4100]),
        "tp": st.sampled_from([1, 2, 3, 4, 8]),
        "pp": st.integers(1, 8),
        "cp": st.sampled_from([1, 2, 3]),
        "vp": st.sampled_from([None, 2, 3]),
        "mbs": st.integers(1, 4),
        "gbs": st.integers(1, 2048),
        "sp": st.sampled_from([None, True, False]),
        "counted": st.booleans(),
        "nodes": st.integers(1, 16),
        "gpu": st.sampled_from(list(GPUS)),
        "precision": st.sampled_from(["bf16", "fp8"]),
    }
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes)
def test_validation_and_throughput_refuse_exactly_the_same_layouts(shape):
    heads = shape["heads"]
    spec = RecipeSpec(
        name="random",
        size_label="?",
        num_layers=shape["num_layers"],
        hidden_size=heads * 64,
        num_attention_heads=heads,
        num_query_groups=max(1, heads // shape["groups_div"]),
        ffn_hidden_size=heads * 256,
        seq_length=shape["seq"],
        tensor_parallel=shape["tp"],
        pipeline_parallel=shape["pp"],
        context_parallel=shape["cp"],
        virtual_pipeline=shape["vp"],
        sequence_parallel=shape["sp"],
        pipeline_counts_embedding_and_loss=shape["counted"],
        micro_batch_size=shape["mbs"],
        global_batch_size=shape["gbs"],
        precision=shape["precision"],
        max_lr=1e-4,
        num_nodes=shape["nodes"],
    )
    cluster = Cluster.of(shape["nodes"], 8, shape["gpu"])
    structural = structural_errors(spec, Layout.of(spec, cluster))
    report = validate(spec, cluster)
    assert {p.field for p in structural} <= {p.field for p in report.errors}
    try:
        estimate_throughput(spec, cluster)
    except InvalidRecipeError as error:
        assert structural, error
        assert {p.field for p in error.problems} == {p.field for p in structural}
    else:
        assert not structural


def test_structural_rules_are_a_subset_of_the_validation_rules():
    from nemo_recipes.plan.rules import RULES

    assert set(STRUCTURAL_RULES) <= set(RULES)


@pytest.mark.parametrize(
    "spec, field, words",
    [
        (RECIPES["gpt_13b"].replace(seq_length=4097, tensor_parallel=2), "seq_length", "scatters"),
        (RECIPES["gpt_7b"].replace(context_parallel=2, seq_length=4098), "context_parallel", "2 x context_parallel"),
        (RECIPES["gpt_7b"].replace(num_query_groups=2, tensor_parallel=4), "tensor_parallel", "num_query_groups=2"),
    ],
)
def test_validation_and_throughput_name_the_same_field(spec, field, words):
    report = validate(spec, H100)
    assert any(p.field == field and words in p.message for p in report.errors), report.summary()
    with pytest.raises(InvalidRecipeError) as raised:
        estimate_throughput(spec, H100)
    assert field in {p.field for p in raised.value.problems}


@pytest.mark.parametrize(
    "spec, field",
    [
        (RECIPES["gpt_7b"].replace(tp_comm_overlap=True), "tp_comm_overlap"),
        (RECIPES["gpt_7b"].replace(pipeline_counts_embedding_and_loss=True), "pipeline_counts_embedding_and_loss"),
    ],
)
def test_switches_that_cannot_act_are_warnings(spec, field):
    report = validate(spec, H100)
    assert report.valid and [p.field for p in report.warnings] == [field]


# ---- the program ----


def test_the_default_stack_is_the_nemo_container_and_says_what_this_machine_has(monkeypatch):
    stack, why = resolve_stack()
    assert stack.name == "transformer-engine" and stack.transformer_engine
    here = "installed" if stack_module.transformer_engine_installed() else "not installed"
    assert f"Transformer Engine is {here} on this machine" in why and "--stack local" in why


@pytest.mark.parametrize("installed, expected", [(True, "transformer-engine"), (False, "megatron-core")])
def test_local_stack_follows_find_spec(monkeypatch, installed, expected):
    monkeypatch.setattr(stack_module, "transformer_engine_installed", lambda: installed)
    stack_module.resolve_stack.cache_clear()
    try:
        assert resolve_stack("local")[0].name == expected
    finally:
        stack_module.resolve_stack.cache_clear()


def test_an_unknown_stack_is_refused_with_the_choices():
    with pytest.raises(InvalidRecipeError) as raised:
        resolve_stack("pytorch-eager")
    assert raised.value.problems[0].field == "stack" and "local" in raised.value.problems[0].fix


@pytest.mark.parametrize(
    "gpu, stack, spec_overrides, expected",
    [
        ("h100", None, {}, True),
        ("b200", None, {}, True),
        ("a100-80gb", None, {}, False),  # no CUDA multicast for userbuffers
        ("h100", "megatron-core", {}, False),  # no Transformer Engine
        ("h100", None, {"tp_comm_overlap": False}, False),
        ("h100", None, {"sequence_parallel": False}, False),
    ],
)
def test_tp_overlap_follows_recipe_stack_and_gpu(gpu, stack, spec_overrides, expected):
    spec = RECIPES["gpt_70b"].replace(**spec_overrides)
    program = program_for(spec, Cluster.of(4, 8, gpu).gpu, stack)
    assert program.tp_comm_overlap is expected
    assert any(note.startswith("TP communication overlap: " + ("on" if expected else "off")) for note in program.notes)


def test_memory_and_throughput_describe_the_same_program():
    spec, cluster = RECIPES["gpt_13b"], Cluster.of(1, 8, "h100")
    for stack in ("transformer-engine", "megatron-core"):
        report = validate(spec, cluster, stack=stack)
        throughput = estimate_throughput(spec, cluster, stack=stack)
        assert report.memory.detail["attention"] == report.program.to_dict()["attention"]
        assert all(note in throughput.assumptions for note in report.program.notes)
        exposed = throughput.breakdown_s["tp_comm_exposed"]
        if report.program.tp_comm_overlap:
            assert (
                exposed
                < estimate_throughput(spec.replace(tp_comm_overlap=False), cluster).breakdown_s["tp_comm_exposed"]
            )
    assert estimate_memory(spec, cluster, stack="megatron-core").total > estimate_memory(spec, cluster).total


def test_fp8_needs_transformer_engine():
    spec = RECIPES["gpt_13b"].replace(precision="fp8")
    report = validate(spec, H100, stack="megatron-core")
    assert [p.field for p in report.errors] == ["precision"]
    with pytest.raises(InvalidRecipeError):
        estimate_throughput(spec, H100, stack="megatron-core")
    assert validate(spec, H100).valid
