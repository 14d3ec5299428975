"""The planner knows experts (issue 45 item 3): the routed experts' memory and step time, the all-to-all by where
EP lands, the routing imbalance, EP/ETP in the search, the precisions and GPUs of the published MoE tables, and the
MoE rows of the accuracy benchmark. No NeMo: the planner is standard library."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from _cli import cli

from nemo_recipes.catalog import get_recipe
from nemo_recipes.errors import InvalidInputError
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.plan import Cluster, validate
from nemo_recipes.plan.hardware import get_gpu
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.memory import LayoutActivations, estimate_memory
from nemo_recipes.plan.search import Space, valid_plans
from nemo_recipes.plan.throughput import estimate_throughput

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QWEN = "qwen3_moe_30b_a3b"  # 128 experts, top-8, hidden 2048, experts' FFN 768, 48 layers


def _qwen(**changes):
    base = dict(tensor_parallel=1, pipeline_parallel=1, virtual_pipeline=None, context_parallel=1,
                expert_tensor_parallel=1, sequence_parallel=None, micro_batch_size=1, global_batch_size=256,
                num_nodes=1, num_gpus_per_node=8, precision="bf16")  # fmt: skip
    return get_recipe(QWEN).replace(**{**base, **changes})


def test_routed_tokens_and_dispatcher_buffers_are_stored_and_grow_with_the_imbalance():
    spec = _qwen(expert_parallel=8)
    moe = Architecture.of(spec).moe
    # Each of a token's top_k copies keeps its expert's tensors (SwiGLU: 8 ffn/h) and the two dispatcher buffers.
    assert moe.routed_activations_per_sbh() == 8 * (8 * 768 / 2048 + 4)
    assert moe.stored_activations_per_sbh() == moe.routed_activations_per_sbh() + 8 * 128 / 2048
    layout = Layout.of(spec, Cluster.of(1, 8, "h100"))
    even = LayoutActivations.of(spec, layout).layer_without_core
    skewed = LayoutActivations.of(spec.replace(moe_imbalance=1.5), layout).layer_without_core
    sbh = spec.seq_length * spec.hidden_size  # micro batch 1, TP 1
    assert skewed - even == pytest.approx(0.5 * moe.routed_activations_per_sbh() * sbh)


def test_expert_weights_split_over_ep_and_their_optimizer_state_over_expert_data_parallel():
    cluster = Cluster.of(2, 8, "h100")
    four, eight = (Layout.of(_qwen(expert_parallel=ep, num_nodes=2), cluster) for ep in (4, 8))
    assert four.expert_params_per_rank == pytest.approx(2 * eight.expert_params_per_rank)
    assert (four.expert_data_parallel, eight.expert_data_parallel) == (4, 2)  # 16 GPUs / (PP 1 x EP x ETP 1)
    memory = estimate_memory(_qwen(expert_parallel=8, num_nodes=2), cluster)
    dense = eight.params_per_rank - eight.expert_params_per_rank
    expected = (dense * 12 / eight.optimizer_shards + eight.expert_params_per_rank * 12 / 2) / 2**30
    assert memory.optimizer == pytest.approx(expected)


def test_the_all_to_all_runs_over_nvlink_inside_a_node_and_over_the_nics_across_nodes():
    # EP 8 within one 8-GPU node, then the same EP 8 spread over 8 nodes of one GPU each: only the link changes.
    inside = estimate_throughput(_qwen(expert_parallel=8), Cluster.of(1, 8, "h100")).breakdown_s
    across = estimate_throughput(_qwen(expert_parallel=8, num_nodes=8, num_gpus_per_node=1),
                                 Cluster.of(8, 1, "h100")).breakdown_s  # fmt: skip
    assert across["ep_comm_exposed"] > inside["ep_comm_exposed"] > 0.0
    assert across["expert_matmul"] == pytest.approx(inside["expert_matmul"])
    # No expert parallelism: nothing to dispatch but the per-layer latency.
    alone = estimate_throughput(_qwen(expert_parallel=1), Cluster.of(1, 8, "h100")).breakdown_s
    assert alone["ep_comm_exposed"] < inside["ep_comm_exposed"]


def test_the_busiest_rank_sets_the_pace_of_the_experts():
    cluster = Cluster.of(1, 8, "h100")
    even = estimate_throughput(_qwen(expert_parallel=8), cluster)
    skewed = estimate_throughput(_qwen(expert_parallel=8, moe_imbalance=2.0), cluster)
    assert skewed.step_time_s > even.step_time_s
    assert skewed.breakdown_s["expert_matmul"] / even.breakdown_s["expert_matmul"] == pytest.approx(2.0, rel=0.15)
    assert skewed.breakdown_s["dense_matmul"] == even.breakdown_s["dense_matmul"]
    # MFU counts the active FLOPs only: the same for both.
    assert skewed.model_tflops_per_gpu / even.model_tflops_per_gpu == pytest.approx(
        even.step_time_s / skewed.step_time_s
    )


def test_mxfp8_is_blackwells_and_fp8_scalings_run_on_hopper_and_blackwell():
    spec = _qwen(expert_parallel=8)
    problems = validate(spec.replace(precision="mxfp8"), Cluster.of(1, 8, "h100")).problems
    refused = [p for p in problems if p.field == "precision"]
    assert refused and refused[0].value == "mxfp8" and "Blackwell" in refused[0].message
    assert "fp8_tensorwise" in refused[0].fix
    for gpu in ("b200", "gb200", "b300", "gb300"):
        assert get_gpu(gpu).supports_mxfp8
        assert not [p for p in validate(spec.replace(precision="mxfp8"), Cluster.of(1, 8, gpu)).problems
                    if p.field == "precision"]  # fmt: skip
    for precision in ("fp8_tensorwise", "fp8_blockwise"):
        for gpu in ("h100", "b200"):
            assert not [p for p in validate(spec.replace(precision=precision), Cluster.of(1, 8, gpu)).problems
                        if p.field == "precision"]  # fmt: skip
    with pytest.raises(InvalidInputError, match="precision"):
        spec.replace(precision="fp4")


def test_the_search_tries_expert_layouts_that_megatron_accepts():
    spec = _qwen(expert_parallel=8, global_batch_size=64)
    seen = set()
    for plan, _ in valid_plans(spec, Cluster.of(1, 8, "h100"), space=Space.BEST):
        ep, etp = plan.expert_parallel, plan.expert_tensor_parallel_size
        assert 128 % ep == 0 and 8 % (ep * etp * plan.pipeline_parallel) == 0 and 768 % etp == 0
        seen.add((ep, etp))
    assert {(1, 1), (8, 1)} <= seen and len({ep for ep, _ in seen}) >= 3


def test_plan_answers_a_published_layout(tmp_path):
    # Megatron-Bridge 26.02, DGX-B200: Qwen3-30B-A3B, 8 GPUs, MXFP8, GBS 512, MBS 1, TP1 PP1 EP8 (moe_rows.csv).
    result = cli("plan", QWEN, "--gpu", "b200", "--nodes", "1", "--gpus-per-node", "8", "tensor_parallel=1",
                 "pipeline_parallel=1", "expert_parallel=8", "expert_tensor_parallel=1", "precision=mxfp8",
                 "micro_batch_size=1", "global_batch_size=512", "--json")  # fmt: skip
    data = json.loads(result.stdout)
    assert data["valid"], data["problems"]
    assert data["throughput"]["breakdown_s"]["expert_matmul"] > 0
    refused = cli("plan", QWEN, "--gpu", "h100", "--nodes", "1", "expert_parallel=8", "precision=mxfp8", "--json")
    assert refused.returncode != 0 and "MXFP8" in refused.stdout


def test_the_benchmark_reports_moe_rows_on_their_own_with_held_out_error():
    from benchmarks import moe_accuracy

    out = io.StringIO()
    result = moe_accuracy.run_moe(out=out)
    text = out.getvalue()
    assert "skipped" in text or "deepseek" not in text  # rows of a family not in the catalog are named, not lost
    assert {"Bridge26.02", "Bridge25.11", "NeMo25.04"} <= set(result["sources"])
    held_out = result["held_out"]
    assert len(held_out) >= 20 and sum(abs(e) for e in held_out.values()) / len(held_out) < 25.0
