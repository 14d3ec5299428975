"""Validation: each rule broken once (field, message and fix checked), defaults on their default cluster, the report's
JSON form, and property tests that validation never crashes and agrees with the divisibility rules."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan import GPUS, Cluster, PlanReport, estimate_memory, validate

H100 = Cluster.of(1, 8, "h100")


def default_cluster(spec: RecipeSpec) -> Cluster:
    return Cluster.of(spec.num_nodes, spec.num_gpus_per_node, spec.default_gpu)


def problems_for(report: PlanReport, field: str, severity: str = "error"):
    return [p for p in report.problems if p.field == field and p.severity == severity]


# ---- the defaults ----


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipe_defaults_validate_on_their_default_cluster(name):
    spec = RECIPES[name]
    report = validate(spec, default_cluster(spec))
    assert report.valid, report.summary()
    assert report.memory.total <= report.memory.capacity


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipe_defaults_validate_without_a_gpu_type(name):
    spec = RECIPES[name]
    report = validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node))
    assert report.valid and report.memory is None


def test_seed_7b_row_needs_recompute_beyond_selective_on_80gb():
    seed_7b = RECIPES["gpt_7b"].replace(recompute="selective")
    assert not validate(seed_7b, H100).valid
    assert validate(seed_7b, Cluster.of(1, 8, "h200")).valid


# ---- one test per rule: (spec, cluster, field, words the message and fix must contain) ----


def _gpt7b(**overrides) -> RecipeSpec:
    return RECIPES["gpt_7b"].replace(**overrides)


BROKEN = {
    "world size not divisible by TP x PP x CP": (
        _gpt7b(tensor_parallel=2, pipeline_parallel=2),
        Cluster.of(3, 2, "h100"),
        "world_size",
        ["TP x PP x CP"],
        ["multiple of 4 GPUs"],
    ),
    "TP larger than a node": (
        RECIPES["gpt_70b"].replace(tensor_parallel=16, pipeline_parallel=2),
        Cluster.of(4, 8, "h100"),
        "tensor_parallel",
        ["TP=16", "NVLink"],
        ["raise pipeline_parallel"],
    ),
    "TP does not divide the node": (
        RECIPES["gpt_13b"].replace(tensor_parallel=5, num_nodes=5),
        Cluster.of(5, 8, "h100"),
        "tensor_parallel",
        ["straddle"],
        ["tensor_parallel in 1, 2, 4, 8"],
    ),
    "heads not divisible by TP": (
        RECIPES["gpt_13b"].replace(num_attention_heads=20, tensor_parallel=8),
        H100,
        "tensor_parallel",
        ["num_attention_heads=20"],
        ["tensor_parallel in 1, 2, 4"],
    ),
    "query groups not divisible by TP": (
        _gpt7b(num_query_groups=2, tensor_parallel=4),
        H100,
        "tensor_parallel",
        ["num_query_groups=2"],
        ["tensor_parallel in 1, 2"],
    ),
    "heads not divisible by query groups": (
        _gpt7b(num_query_groups=5),
        H100,
        "num_query_groups",
        ["5 query groups"],
        ["num_query_groups in"],
    ),
    "hidden not divisible by heads": (
        _gpt7b(num_attention_heads=24, tensor_parallel=1),
        H100,
        "num_attention_heads",
        ["hidden_size=4096"],
        ["divides 4096"],
    ),
    "RoPE over an odd number of channels": (
        RECIPES["llama_8b"].replace(kv_channels=127),
        H100,
        "rotary_percent",
        ["= 127 channels", "head_dim=127"],
        ["even"],
    ),
    "RoPE over no channel": (
        RECIPES["llama_8b"].replace(rotary_percent=0.0077),  # int(128 x 0.0077) = 0
        H100,
        "rotary_percent",
        ["= 0 channels"],
        ["rotary_percent"],
    ),
    "ffn not divisible by TP": (
        _gpt7b(ffn_hidden_size=11001, tensor_parallel=2),
        H100,
        "ffn_hidden_size",
        ["tensor_parallel=2"],
        ["multiple of 2"],
    ),
    "layers not divisible by PP": (
        _gpt7b(pipeline_parallel=8, num_layers=30),
        H100,
        "pipeline_parallel",
        ["num_layers=30"],
        ["pipeline_parallel in 1, 2, 3, 5"],
    ),
    "VP without PP": (
        _gpt7b(virtual_pipeline=2),
        H100,
        "virtual_pipeline",
        ["pipeline_parallel > 1"],
        ["unset virtual_pipeline"],
    ),
    "layers not divisible by PP x VP": (
        _gpt7b(pipeline_parallel=2, virtual_pipeline=3),
        H100,
        "virtual_pipeline",
        ["2 x 3 = 6"],
        ["virtual_pipeline in 2, 4, 8, 16"],
    ),
    "interleaved schedule with micro-batches not a multiple of PP": (
        _gpt7b(pipeline_parallel=8, virtual_pipeline=2, global_batch_size=12, micro_batch_size=1),
        H100,
        "virtual_pipeline",
        ["m = 12", "pipeline_parallel=8"],
        ["multiple of micro batch x DP x PP = 8"],
    ),
    "global batch not divisible by micro batch x DP": (
        _gpt7b(global_batch_size=500),
        H100,
        "global_batch_size",
        ["2 x 8 = 16"],
        ["496 or 512"],
    ),
    "sequence not divisible by 2 x CP": (
        _gpt7b(context_parallel=2, seq_length=4098, global_batch_size=256),
        H100,
        "context_parallel",
        ["2 x context_parallel = 4"],
        ["context_parallel in 1"],
    ),
    "sequence parallelism with TP 1": (
        _gpt7b(sequence_parallel=True),
        H100,
        "sequence_parallel",
        ["tensor_parallel > 1"],
        ["sequence_parallel to None"],
    ),
    "FP8 on a GPU without it": (
        RECIPES["gpt_1_3b"].replace(precision="fp8"),
        Cluster.of(1, 8, "a100-80gb"),
        "precision",
        ["FP8"],
        ["precision='bf16'", "h100-80gb"],
    ),
    "blend weights without paths": (
        _gpt7b(data_weights=(0.5, 0.5)),
        H100,
        "data_weights",
        ["without data_paths"],
        ["one data path per weight"],
    ),
    "as many weights as paths": (
        _gpt7b(data_paths=("a", "b", "c"), data_weights=(1.0, 2.0)),
        H100,
        "data_weights",
        ["2 weights for 3 data paths"],
        ["exactly 3 weights"],
    ),
    "positive weights": (
        _gpt7b(data_paths=("a", "b"), data_weights=(1.0, -1.0)),
        H100,
        "data_weights",
        ["positive"],
        ["positive weights"],
    ),
    "memory above capacity": (
        _gpt7b(recompute="selective"),
        H100,
        "memory",
        ["exceeds the 79.6 GiB"],
        ["tensor_parallel=2"],
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_rule_reports_field_value_message_and_fix(case):
    spec, cluster, field, message_words, fix_words = BROKEN[case]
    report = validate(spec, cluster)
    assert not report.valid
    found = problems_for(report, field)
    assert found, report.summary()
    problem = found[0]
    assert problem.value is not None
    for word in message_words:
        assert word in problem.message, problem
    for word in fix_words:
        assert word in problem.fix, problem
    with pytest.raises(InvalidRecipeError) as raised:
        report.raise_if_invalid()
    assert problem in raised.value.problems


def test_memory_fixes_are_computed_and_each_one_fits():
    spec, cluster = _gpt7b(recompute="selective"), H100
    fix = problems_for(validate(spec, cluster), "memory")[0].fix
    named = {
        "tensor_parallel=2": spec.replace(tensor_parallel=2),
        "micro_batch_size=1": spec.replace(micro_batch_size=1),
        "pipeline_parallel=2": spec.replace(pipeline_parallel=2),
    }
    for text, fixed in named.items():
        assert text in fix
        assert validate(fixed, cluster).valid, text
    assert "recompute='full'" in fix


def test_a_pipeline_fix_counts_the_embedding_and_loss_slots():
    # llama_405b splits 126 layers + embedding + loss = 128 slots over its stages: a larger pipeline must divide 128
    # (16), and none that divides 126 alone (9, 14, 18, ...) can.
    spec, cluster = RECIPES["llama_405b"].replace(recompute="none", num_nodes=64), Cluster.of(64, 8, "h100")
    fix = problems_for(validate(spec, cluster), "memory")[0].fix
    assert "pipeline_parallel=16" in fix
    assert validate(spec.replace(pipeline_parallel=16, virtual_pipeline=None), cluster).valid


def test_distributed_optimizer_is_named_as_a_memory_fix_when_off():
    spec = RECIPES["gpt_13b"].replace(distributed_optimizer=False)
    report = validate(spec, H100)
    assert "distributed_optimizer=True" in problems_for(report, "memory")[0].fix
    assert validate(spec.replace(distributed_optimizer=True), H100).valid


def test_no_single_fix_says_so_and_points_to_fit():
    spec = RECIPES["gpt_175b"]
    report = validate(spec.replace(num_nodes=1), Cluster.of(1, 8, "a100-40gb"))
    memory = problems_for(report, "memory")
    assert memory and "fit" in memory[0].fix


# ---- warnings ----

WARNED = {
    "TP across nodes inside an NVL72 domain": (
        RECIPES["gpt_70b"].replace(tensor_parallel=16, pipeline_parallel=2, num_gpus_per_node=4),
        Cluster.of(8, 4, "gb200"),
        "tensor_parallel",
        "NVLink domain",
    ),
    "TP beyond a node without a GPU type": (
        RECIPES["gpt_70b"].replace(tensor_parallel=16, pipeline_parallel=2),
        Cluster.of(4, 8),
        "tensor_parallel",
        "without a GPU type",
    ),
    "pipeline bubble with gradient accumulation 1": (
        _gpt7b(pipeline_parallel=4, global_batch_size=4, micro_batch_size=2),
        H100,
        "global_batch_size",
        "bubble",
    ),
    "distributed optimizer with DP 1": (
        RECIPES["gpt_70b"],
        default_cluster(RECIPES["gpt_70b"]),
        "distributed_optimizer",
        "single shard",
    ),
    "recompute_num_layers ignored": (
        _gpt7b(recompute="selective", recompute_num_layers=4, tensor_parallel=2),
        H100,
        "recompute_num_layers",
        "ignored",
    ),
    "recompute_num_layers above the chunk": (
        _gpt7b(recompute_num_layers=40),
        H100,
        "recompute_num_layers",
        "larger than",
    ),
    "little memory headroom": (
        _gpt7b(recompute="selective", micro_batch_size=1, seq_length=5888),
        H100,
        "memory",
        "under 5%",
    ),
}


@pytest.mark.parametrize("case", list(WARNED))
def test_warnings_do_not_invalidate(case):
    spec, cluster, field, words = WARNED[case]
    report = validate(spec, cluster)
    found = problems_for(report, field, "warning")
    assert found, report.summary()
    assert words in found[0].message and found[0].fix
    assert not problems_for(report, field, "error")


def test_headroom_warning_matches_the_memory_estimate():
    spec = _gpt7b(recompute="selective", micro_batch_size=1, seq_length=5888)
    memory = estimate_memory(spec, H100)
    assert memory.capacity * 0.95 < memory.total <= memory.capacity


# ---- hardware checks need a GPU ----


def test_without_a_gpu_memory_and_fp8_are_skipped_but_layout_is_checked():
    spec = _gpt7b(recompute="none", precision="fp8", tensor_parallel=3)
    report = validate(spec, Cluster.of(1, 8))
    assert report.memory is None
    assert not problems_for(report, "memory") and not problems_for(report, "precision")
    assert problems_for(report, "world_size") and problems_for(report, "tensor_parallel")


def test_every_problem_is_reported_at_once():
    spec = _gpt7b(tensor_parallel=3, global_batch_size=500, sequence_parallel=None, data_weights=(1.0,))
    report = validate(spec, Cluster.of(1, 8, "h100"))
    fields = {p.field for p in report.errors}
    assert {"world_size", "tensor_parallel", "data_weights"} <= fields


# ---- the report ----


def test_report_json_has_the_stable_keys():
    spec = RECIPES["gpt_70b"]
    payload = json.loads(json.dumps(validate(spec, default_cluster(spec)).to_dict()))
    assert {"valid", "recipe", "cluster", "parallelism", "problems", "memory_gib", "throughput", "changes"} <= set(
        payload
    )
    assert set(payload["cluster"]) == {"nodes", "gpus_per_node", "gpu", "world_size"}
    assert set(payload["parallelism"]) == {
        "tp",
        "pp",
        "cp",
        "vp",
        "dp",
        "sp",
        "grad_accumulation",
        "micro_batch_size",
        "global_batch_size",
    }
    assert set(payload["memory_gib"]) == {
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "other",
        "total",
        "capacity",
    }
    assert all(set(p) == {"severity", "field", "value", "message", "fix"} for p in payload["problems"])
    assert payload["parallelism"]["dp"] * spec.model_parallel_size == payload["cluster"]["world_size"]
    assert payload["parallelism"]["grad_accumulation"] == spec.global_batch_size // (
        spec.micro_batch_size * payload["parallelism"]["dp"]
    )
    memory = payload["memory_gib"]
    parts = sum(memory[k] for k in ("weights", "gradients", "optimizer", "activations", "other"))
    assert memory["total"] == pytest.approx(parts, abs=0.01)
    assert payload["changes"] == [] and payload["throughput"] is None


def test_report_without_gpu_has_no_memory():
    assert validate(RECIPES["gpt_1_3b"], Cluster.of(1, 8)).to_dict()["memory_gib"] is None


def test_with_throughput_attaches_a_mapping_or_an_object_with_to_dict():
    report = validate(RECIPES["gpt_1_3b"], H100)

    class Estimate:
        def to_dict(self):
            return {"tokens_per_s": 1.5e6}

    assert report.with_throughput({"tokens_per_s": 2.0}).to_dict()["throughput"] == {"tokens_per_s": 2.0}
    assert report.with_throughput(Estimate()).throughput == {"tokens_per_s": 1.5e6}
    assert report.throughput is None  # reports are immutable


def test_summary_names_the_verdict_numbers_and_problems():
    report = validate(_gpt7b(recompute="selective"), H100)
    text = str(report)
    assert "INVALID" in text and f"{report.memory.total:.1f}" in text and "memory=" in text
    assert "valid" in str(validate(RECIPES["gpt_7b"], H100))


# ---- properties ----

shapes = st.fixed_dictionaries(
    {
        "num_layers": st.integers(1, 130),
        "heads": st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 20, 32, 40, 64, 96]),
        "head_dim": st.sampled_from([32, 64, 96, 128]),
        "groups_div": st.sampled_from([1, 2, 4, 8]),
        "ffn_mult": st.sampled_from([2.5, 3.5, 4.0]),
        "seq": st.sampled_from([128, 1000, 2048, 4096, 8192]),
        "tp": st.sampled_from([1, 2, 3, 4, 8, 16]),
        "pp": st.integers(1, 16),
        "cp": st.sampled_from([1, 2, 4]),
        "vp": st.sampled_from([None, 2, 3]),
        "mbs": st.integers(1, 8),
        "gbs": st.integers(1, 4096),
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "recompute_num_layers": st.sampled_from([None, 1, 4]),
        "sp": st.sampled_from([None, True, False]),
        "precision": st.sampled_from(["bf16", "fp8"]),
        "dist": st.booleans(),
        "gated": st.booleans(),
        "nodes": st.integers(1, 64),
        "gpus_per_node": st.sampled_from([1, 2, 4, 8]),
        "gpu": st.sampled_from([None, *GPUS]),
    }
)


def _spec_from(shape: dict) -> RecipeSpec:
    heads = shape["heads"]
    groups = max(1, heads // shape["groups_div"])
    hidden = heads * shape["head_dim"]
    return RecipeSpec(
        name="random",
        size_label="?",
        num_layers=shape["num_layers"],
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=groups,
        ffn_hidden_size=int(hidden * shape["ffn_mult"]),
        seq_length=shape["seq"],
        activation="swiglu" if shape["gated"] else "gelu",
        tensor_parallel=shape["tp"],
        pipeline_parallel=shape["pp"],
        context_parallel=shape["cp"],
        virtual_pipeline=shape["vp"],
        sequence_parallel=shape["sp"],
        micro_batch_size=shape["mbs"],
        global_batch_size=shape["gbs"],
        precision=shape["precision"],
        recompute=shape["recompute"],
        recompute_num_layers=shape["recompute_num_layers"],
        distributed_optimizer=shape["dist"],
        max_lr=1e-4,
        num_nodes=shape["nodes"],
        num_gpus_per_node=shape["gpus_per_node"],
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes)
def test_validate_never_crashes_and_agrees_with_the_divisibility_rules(shape):
    spec = _spec_from(shape)
    cluster = Cluster.of(shape["nodes"], shape["gpus_per_node"], shape["gpu"])
    report = validate(spec, cluster)
    json.dumps(report.to_dict())  # always serialisable
    assert report.valid == (not [p for p in report.problems if p.severity == "error"])

    world, mp = cluster.world_size, spec.model_parallel_size
    broken = {
        "world_size": world % mp != 0,
        "pipeline_parallel": spec.num_layers % spec.pipeline_parallel != 0,
        "global_batch_size": world % mp == 0 and spec.global_batch_size % (spec.micro_batch_size * world // mp) != 0,
        "context_parallel": spec.context_parallel > 1 and spec.seq_length % (2 * spec.context_parallel) != 0,
        "sequence_parallel": spec.sequence_parallel is True and spec.tensor_parallel == 1,
        "seq_length": spec.sequence_parallel_enabled
        and spec.tensor_parallel > 1
        and spec.seq_length % (spec.tensor_parallel * spec.context_parallel) != 0,
    }
    error_fields = {p.field for p in report.errors}
    for field, is_broken in broken.items():
        assert (field in error_fields) == is_broken, (field, report.summary())
    if spec.num_attention_heads % spec.tensor_parallel:
        assert "tensor_parallel" in error_fields
    if report.memory is not None:
        assert math.isfinite(report.memory.total)
        assert ("memory" in error_fields) == (report.memory.total > report.memory.capacity)


@settings(max_examples=80, deadline=None)
@given(shapes)
def test_every_rejected_plan_has_at_least_one_error_and_raises_with_it(shape):
    spec = _spec_from(shape)
    report = validate(spec, Cluster.of(shape["nodes"], shape["gpus_per_node"], shape["gpu"]))
    if report.valid:
        assert report.raise_if_invalid() is report
        return
    assert report.errors
    with pytest.raises(InvalidRecipeError) as raised:
        report.raise_if_invalid()
    assert any(p.severity == "error" for p in raised.value.problems)


def test_kv_channels_frees_the_head_width_from_hidden():
    # 4096 / 30 heads is not whole: refused unless the head width is given.
    odd = RECIPES["llama_8b"].replace(num_attention_heads=30, num_query_groups=6)
    assert problems_for(validate(odd, H100), "num_attention_heads")
    wide = odd.replace(kv_channels=128)
    assert wide.head_dim == 128 and not problems_for(validate(wide, H100), "num_attention_heads")


@pytest.mark.parametrize("name", ["llama_8b", "llama_70b", "llama_405b"])
def test_llama_rows_are_valid_on_their_published_clusters(name):
    spec = RECIPES[name]
    report = validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node, spec.default_gpu))
    assert report.valid and not report.problems, report.summary()


def test_a_gated_mlp_at_four_times_hidden_is_flagged_as_one_and_a_half_mlps():
    report = validate(RECIPES["gpt_7b"].replace(activation="swiglu"), H100)
    (problem,) = problems_for(report, "ffn_hidden_size", "warning")
    assert report.valid and "1.5 times" in problem.message and "11008" in problem.fix
    same_size = RECIPES["gpt_7b"].replace(activation="swiglu", ffn_hidden_size=11008)
    assert not problems_for(validate(same_size, H100), "ffn_hidden_size", "warning")
