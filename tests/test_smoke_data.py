"""The main job on real text (issue 19, points 4 and 5), in one run that serves every check: `nemo-recipes data
prepare` of a slice of the shipped Shakespeare corpus with a trained tokenizer, then `nemo-recipes smoke` on it
through NeMo's PreTrainingDataModule; the loss must end below the text's unigram entropy and the checkpoint must
sample text through Megatron's forward pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli

pytestmark = [pytest.mark.nemo, pytest.mark.slow]

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "data" / "shakespeare"
#: Two plays (about 200 kB): two sources for the blend, and enough documents for Megatron's split.
PLAYS = ("macbeth", "the-tempest")


def test_smoke_trains_on_prepared_text_and_learns_more_than_token_frequencies(tmp_path):
    data = tmp_path / "data"
    prepared = cli(
        "data", "prepare", *(str(CORPUS / f"{p}.jsonl") for p in PLAYS), "--out", str(data),
        "--train-tokenizer", "--vocab-size", "1024", "--json", timeout=300,
    )  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr
    manifests = json.loads(prepared.stdout)
    assert [m["prefix"] for m in manifests] == list(PLAYS)
    vocab = manifests[0]["tokenizer"]["vocab_size"]

    paths = f"data_paths=[{data / PLAYS[0]},{data / PLAYS[1]}]"
    result = cli(
        "smoke", "gpt_7b", paths, "data_weights=[2,1]", f"tokenizer_path={data / 'tokenizer'}",
        "--steps", "160", "max_lr=0.003", "hidden_size=128", "ffn_hidden_size=512", "micro_batch_size=8",
        "global_batch_size=16", "--dir", str(tmp_path / "run"), "--json", timeout=1200,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["passed"], result.stderr[-3000:]
    # The user's data, not the built-in corpus, with the tokenizer's vocabulary.
    assert not (tmp_path / "run" / "data").exists()
    assert report["shape"]["vocab_size"] == vocab
    log = (tmp_path / "run" / "train.log").read_text()
    assert all(f"Load the _IndexReader from {data / p}.idx" in log for p in PLAYS)  # Megatron's own dataset reader
    learned = report["learned"]
    # Below the unigram entropy by a clear margin: the model predicts from context.
    assert learned["final_loss"] < learned["unigram_entropy"] - 0.3, learned
    samples = learned["samples"]
    assert [s["temperature"] for s in samples] == [0.0, 0.8] and learned["sample_error"] is None
    for sample in samples:
        continuation = sample["text"][len(sample["prompt"]) :]
        assert sample["text"].startswith(sample["prompt"]) and len(continuation.split()) >= 10, sample
        assert sum(c.isalpha() for c in continuation) > len(continuation) / 2, sample
