"""A plain dict with calibration.csv's columns becomes a (RecipeSpec, Cluster) plus the assumptions made."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.published_rows import is_missing, plan_from_row, stack_from_row
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan.throughput import estimate_throughput

CALIBRATION = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "calibration.csv"


def calibration_rows() -> list[dict]:
    with open(CALIBRATION, newline="") as handle:
        return list(csv.DictReader(handle))


ROW = dict(
    id="x",
    model="GPT-20B",
    layers="48",
    hidden="6144",
    heads="48",
    kv_heads="48",
    ffn="24576",
    vocab="51200",
    seq="2048",
    gpu="H100-80GB",
    n_gpus="64",
    tp="4",
    pp="2",
    cp="1",
    vp="",
    dp="8",
    mbs="2",
    gbs="512",
    precision="bf16",
    recompute="selective",
    sp="yes",
    dist_opt="yes",
)


@pytest.mark.parametrize("row", calibration_rows(), ids=lambda r: r["id"])
def test_every_calibration_row_parses_and_can_be_estimated(row):
    spec, cluster, assumptions = plan_from_row(row)
    for column, field in (
        ("layers", "num_layers"),
        ("hidden", "hidden_size"),
        ("heads", "num_attention_heads"),
        ("ffn", "ffn_hidden_size"),
        ("vocab", "vocab_size"),
        ("seq", "seq_length"),
        ("tp", "tensor_parallel"),
        ("pp", "pipeline_parallel"),
        ("cp", "context_parallel"),
        ("gbs", "global_batch_size"),
    ):
        assert getattr(spec, field) == int(row[column]), column
    assert spec.kv_groups == int(row["kv_heads"])
    assert cluster.world_size == int(row["n_gpus"])
    assert cluster.gpu is not None and cluster.gpu.name.split("-")[0] in row["gpu"].lower()
    if not is_missing(row["dp"]):
        assert cluster.world_size // spec.model_parallel_size == int(row["dp"])
    for column in ("mbs", "vp", "precision", "recompute", "sp", "dist_opt"):
        if is_missing(row[column]):
            assert any(line.startswith(column) for line in assumptions), column
    if row["mbs"] and not is_missing(row["mbs"]):
        assert spec.micro_batch_size == int(row["mbs"])
    stack, _ = stack_from_row(row)
    assert estimate_throughput(spec, cluster, stack=stack).step_time_s > 0


def test_stated_values_are_taken_and_nothing_is_assumed_about_them():
    spec, cluster, assumptions = plan_from_row(ROW)
    assert (spec.micro_batch_size, spec.recompute, spec.sequence_parallel, spec.distributed_optimizer) == (
        2,
        "selective",
        True,
        True,
    )
    assert spec.virtual_pipeline is None and spec.precision == "bf16" and spec.num_query_groups is None
    assert (cluster.nodes, cluster.gpus_per_node) == (8, 8)
    assert not any(line.split(" ")[0] in ("mbs", "precision", "recompute", "sp", "dist_opt") for line in assumptions)
    assert any("GPT-3 style" in line for line in assumptions)


def test_missing_values_are_assumed_and_stated():
    row = dict(
        ROW,
        mbs="n/s",
        vp="n/s",
        precision="n/s (MFU vs 989 => BF16 peak)",
        recompute="",
        sp="n/s",
        dist_opt="n/s (overlap on)",
        kv_heads="",
        vocab="",
    )
    spec, _, assumptions = plan_from_row(row)
    assert spec.micro_batch_size == 1 and spec.recompute == "none" and spec.sequence_parallel is None
    assert spec.precision == "bf16" and spec.distributed_optimizer is True and spec.vocab_size == 51200
    assert spec.kv_groups == 48
    for column in ("mbs", "vp", "precision", "recompute", "sp", "dist_opt", "kv_heads", "vocab"):
        assert any(line.startswith(column) for line in assumptions), column


def test_precision_recompute_and_flags_are_read_from_free_text():
    spec, _, _ = plan_from_row(dict(ROW, precision="fp16 mixed", recompute="full", sp="no", dist_opt="no (DP=1)"))
    assert (spec.precision, spec.recompute, spec.sequence_parallel, spec.distributed_optimizer) == (
        "fp16",
        "full",
        False,
        False,
    )
    spec, _, _ = plan_from_row(dict(ROW, precision="FP8 (table does not name recipe)"))
    assert spec.precision == "fp8"


def test_llama_shapes_are_gated_with_gqa_and_vp():
    row = dict(
        ROW,
        model="LLAMA3-70B",
        layers="80",
        hidden="8192",
        heads="64",
        kv_heads="8",
        ffn="28672",
        vocab="128256",
        seq="8192",
        n_gpus="64",
        tp="4",
        pp="4",
        cp="2",
        vp="5",
        dp="2",
        mbs="1",
        gbs="128",
    )
    spec, _, assumptions = plan_from_row(row)
    assert spec.gated_linear_unit and spec.num_query_groups == 8 and spec.virtual_pipeline == 5
    assert spec.normalization == "RMSNorm" and not spec.share_embeddings
    assert any("Llama-style" in line for line in assumptions)
    # Without a model name, an FFN that is not 4 x hidden is taken as SwiGLU, and said so.
    spec, _, assumptions = plan_from_row(dict(row, model=""))
    assert spec.gated_linear_unit and any("not 4 x hidden" in line for line in assumptions)


def test_layers_that_divide_only_with_embedding_and_loss_are_counted_and_said():
    row = dict(
        ROW,
        model="LLAMA3.1-405B",
        layers="126",
        hidden="16384",
        heads="128",
        kv_heads="8",
        ffn="53248",
        vocab="128256",
        seq="8192",
        n_gpus="1024",
        tp="8",
        pp="8",
        cp="2",
        vp="8",
        dp="8",
        mbs="1",
        gbs="512",
    )
    spec, _, assumptions = plan_from_row(row)
    assert spec.pipeline_counts_embedding_and_loss
    assert any("126 + 2" in line for line in assumptions)
    spec, _, _ = plan_from_row(dict(row, layers="128"))
    assert not spec.pipeline_counts_embedding_and_loss


def test_small_clusters_and_vp_one():
    spec, cluster, _ = plan_from_row(dict(ROW, n_gpus="4", tp="4", pp="1", dp="1", vp="1", gbs="8"))
    assert (cluster.nodes, cluster.gpus_per_node) == (1, 4) and spec.virtual_pipeline is None


def test_all_problems_are_reported_at_once():
    row = dict(ROW, layers="", hidden="lots", gpu="tpu-v9", tp="0", dp="3", recompute="sometimes")
    with pytest.raises(InvalidRecipeError) as error:
        plan_from_row(row)
    fields = {p.field for p in error.value.problems}
    assert {"layers", "hidden", "gpu", "tp", "recompute"} <= fields
    assert "'x'" in str(error.value)


def test_dp_that_contradicts_the_gpu_count_is_refused():
    with pytest.raises(InvalidRecipeError) as error:
        plan_from_row(dict(ROW, dp="4"))
    assert {p.field for p in error.value.problems} == {"dp"}


def test_partial_nodes_are_refused():
    with pytest.raises(InvalidRecipeError) as error:
        plan_from_row(dict(ROW, n_gpus="12", dp=""))
    assert {p.field for p in error.value.problems} == {"n_gpus"}


def test_stack_rule():
    assert stack_from_row(dict(ROW, precision="fp16 mixed"))[0] == "megatron-legacy"
    assert stack_from_row(dict(ROW, precision="bf16"))[0] == "transformer-engine"
    assert stack_from_row(dict(ROW, precision="n/s"))[0] == "transformer-engine"
    assert stack_from_row(dict(ROW, precision="fp16", stack="transformer-engine")) == ("transformer-engine", [])
    assert stack_from_row(dict(ROW, precision="fp16 mixed"))[1]
