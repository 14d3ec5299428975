"""Local tokenizers: recognised, fingerprinted, loaded and trained offline; a trained one loads in the classes NeMo
uses (transformers' and NeMo's AutoTokenizer, NeMo's SentencePieceTokenizer) with the same ids, vocabulary and EOD."""

from __future__ import annotations

import json
import shutil

import pytest

from nemo_recipes.data import tokenizers
from nemo_recipes.errors import InvalidConfigError

TEXTS = [
    f"Document {i}: the quick brown fox jumps over the lazy dog; naïve café, 東京, emoji 🙂. " * (1 + i % 3)
    for i in range(400)
]
SAMPLE = "The lazy fox — naïve 🙂 東京\n\n  indented\ttab"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return tokenizers.train(TEXTS, tmp_path_factory.mktemp("hf"), vocab_size=400)


@pytest.fixture(scope="module")
def trained_sp(tmp_path_factory):
    return tokenizers.train(TEXTS, tmp_path_factory.mktemp("sp"), vocab_size=400, kind="sentencepiece")


def _problem(error):
    [problem] = error.value.problems
    return problem


def test_a_trained_tokenizer_is_described_and_round_trips(trained):
    assert trained.name == "tokenizer" and {p.name for p in trained.iterdir()} == {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    info = tokenizers.describe(trained)
    assert info.kind == "huggingface" and info.vocab_size == 400 and info.path == str(trained)
    encoder = tokenizers.load(trained)
    assert (
        encoder.eod_id == info.eod_id == json.loads((trained / "tokenizer.json").read_text())["added_tokens"][0]["id"]
    )
    [ids] = encoder.encode_batch([SAMPLE])
    assert encoder.decode(ids) == SAMPLE  # byte-level: nothing is lost, nothing unknown
    assert info.eod_id not in ids and max(ids) < info.vocab_size


def test_training_is_deterministic_and_the_fingerprint_follows_the_files(trained, tmp_path):
    again = tokenizers.train(TEXTS, tmp_path, vocab_size=400)
    assert tokenizers.fingerprint(again) == tokenizers.fingerprint(trained)
    # Other files in the directory (a model's weights) do not change the tokenizer's fingerprint ...
    (again / "model.safetensors").write_bytes(b"weights")
    assert tokenizers.fingerprint(again) == tokenizers.fingerprint(trained)
    # ... its own files do, and the file alone has a fingerprint of its own.
    other = tokenizers.train(TEXTS[:100], tmp_path / "other", vocab_size=300)
    assert tokenizers.fingerprint(other) != tokenizers.fingerprint(trained)
    assert tokenizers.fingerprint(trained / "tokenizer.json").startswith("sha256:")


def test_a_bare_tokenizer_json_is_a_tokenizer(trained, tmp_path):
    file = shutil.copy(trained / "tokenizer.json", tmp_path / "tokenizer.json")
    info = tokenizers.describe(file)
    assert (info.kind, info.vocab_size, info.eod_id) == ("huggingface", 400, tokenizers.describe(trained).eod_id)


def test_a_trained_sentencepiece_model(trained_sp):
    assert trained_sp.name == "tokenizer.model"
    info = tokenizers.describe(trained_sp)
    encoder = tokenizers.load(trained_sp)
    assert info.kind == "sentencepiece" and info.vocab_size == 400 and info.eod_id == 2
    [ids] = encoder.encode_batch(["The lazy fox"])
    assert encoder.decode(ids) == "The lazy fox"


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda p: p / "missing", "no such file"),
        (lambda p: p, "none of a tokenizer's files"),
        (lambda p: (p / "notes.txt").write_text("hello") and p / "notes.txt", "not a Hugging Face tokenizer"),
        (lambda p: (p / "tokenizer.json").write_text('{"not": "a tokenizer"}') and p, "not a Hugging Face tokenizer"),
        (lambda p: (p / "m.model").write_bytes(b"\x00garbage") and p / "m.model", "not a SentencePiece model"),
    ],
    ids=["missing", "empty directory", "text file", "json that is no tokenizer", "garbage .model"],
)
def test_what_is_not_a_tokenizer_is_refused_with_field_and_fix(tmp_path, make, why):
    path = make(tmp_path)
    with pytest.raises(InvalidConfigError) as error:
        tokenizers.describe(path)
    problem = _problem(error)
    assert problem.field == "tokenizer_path" and problem.value == str(path.absolute())
    assert why in problem.message and "--train-tokenizer" in problem.fix


def test_a_tokenizer_without_an_end_of_document_token_is_refused(trained, tmp_path):
    text = (trained / "tokenizer.json").read_text()
    (tmp_path / "tokenizer.json").write_text(text.replace(tokenizers.TRAINED_EOD, "<|unusual|>"))
    with pytest.raises(InvalidConfigError) as error:
        tokenizers.describe(tmp_path / "tokenizer.json")
    assert "no end-of-document token" in _problem(error).message


@pytest.mark.parametrize(
    "arguments",
    [{"vocab_size": 100}, {"vocab_size": True}, {"kind": "tiktoken"}, {"vocab_size": 270, "kind": "sentencepiece"}],
)
def test_training_arguments_are_checked(tmp_path, arguments):
    with pytest.raises(InvalidConfigError):
        tokenizers.train(TEXTS, tmp_path, **arguments)


@pytest.mark.nemo
def test_nemo_loads_the_trained_tokenizers_offline_with_the_same_ids(trained, trained_sp, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

    for path, nemo_tokenizer in (
        (trained, AutoTokenizer(pretrained_model_name=str(trained))),
        (trained_sp, SentencePieceTokenizer(model_path=str(trained_sp))),
    ):
        info, encoder = tokenizers.describe(path), tokenizers.load(path)
        assert nemo_tokenizer.vocab_size == info.vocab_size
        assert nemo_tokenizer.eod == info.eod_id
        assert nemo_tokenizer.text_to_ids(SAMPLE) == encoder.encode_batch([SAMPLE])[0]
