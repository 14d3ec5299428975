"""Tier (b), training: `nemo-recipes smoke qwen3_dense_8b` trains the Qwen3 row scaled down through NeMo's own loop
on this CPU (Megatron-Core's local layer spec: torch's RMSNorm for the query and key norms too), stops, resumes and
passes every check of the judge; its checkpoint holds each layer's query and key norms. Then the trained model
leaves as transformers' Qwen3ForCausalLM that computes Megatron's logits on the same tokens.

One run serves both tests (qwen3_dense_32b scales down to the same architecture with full recomputation, which the
GPT and Llama smoke runs cover: test_smoke_training.TRAINED_ELSEWHERE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

from test_smoke_data import LOGITS_RTOL, _load, _logits_error, _megatron_logits  # noqa: E402

pytestmark = [pytest.mark.nemo, pytest.mark.slow]


@pytest.fixture(scope="module")
def qwen3_run(tmp_path_factory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("run-qwen3")
    result = cli("smoke", "qwen3_dense_8b", "--dir", str(run), "--json", timeout=900)
    report = json.loads(result.stdout or "{}")
    assert result.returncode == 0 and report.get("passed"), result.stdout[-3000:] + result.stderr[-3000:]
    return run, report


def test_the_qwen3_smoke_passes_every_check_and_trains_the_query_and_key_norms(qwen3_run):
    from megatron.core import dist_checkpointing

    run, report = qwen3_run
    assert report["device"] == "cpu" and report["layout"] == "TP1 PP1 CP1 DP1"
    assert [c["name"] for c in report["checks"] if not c["passed"]] == []
    names = {c["name"] for c in report["checks"]}
    assert {"every parameter trains", "every parameter moved", "resume restored the exact state"} <= names
    assert report["resumed_at"] == 10 and len(report["losses"]) == 20
    spec = json.loads((run / "train.json").read_text())["spec"]
    assert spec["qk_layernorm"] is True and spec["norm_epsilon"] == 1e-6
    weights = Path(report["checkpoint"]["path"]) / "weights"
    shapes = {k: tuple(v.global_shape) for k, v in dist_checkpointing.load_tensors_metadata(str(weights)).items()}
    head_dim = spec["kv_channels"]
    for norm in ("q_layernorm", "k_layernorm"):
        assert shapes[f"module.decoder.layers.self_attention.{norm}.weight"] == (spec["num_layers"], head_dim)
    assert not any(k.endswith("bias") for k in shapes)  # no biases, not even on QKV


def test_the_trained_qwen3_leaves_as_qwen3_for_causal_lm_computing_megatrons_logits(qwen3_run, tmp_path):
    import torch

    from nemo_recipes.conversion.hf_export import export_hf

    run, report = qwen3_run
    exported = export_hf(str(run), str(tmp_path / "hf"))
    assert exported.architecture == "Qwen3ForCausalLM"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["model_type"], config["rms_norm_eps"], config["rope_theta"]) == ("qwen3", 1e-6, 1e6)
    model = _load(tmp_path / "hf")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    # Mock data: any ids of the vocabulary, one sequence's worth.
    vocab, seq_length = report["shape"]["vocab_size"], report["shape"]["seq_length"]
    ids = torch.randint(0, vocab, (seq_length,), generator=torch.Generator().manual_seed(0)).tolist()
    assert _logits_error(model, ids, _megatron_logits("qwen3", run, ids)) < LOGITS_RTOL
