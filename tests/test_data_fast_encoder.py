"""The faster encoders of `data prepare` (gigatoken, then tiktoken built from the tokenizer's vocabulary): the same
ids as the tokenizer's own library on text with the traps, and the check that keeps a tokenizer they do not reproduce
on its own library, with a one-line notice. Real tokenizers trained here; `data prepare` runs end to end (about 20 s
of CPU)."""

from __future__ import annotations

import io
import json
import os
import random

import numpy as np
import pytest

from nemo_recipes.data import fast_encoder, gigatoken_encoder, process_memory, tokenizers
from nemo_recipes.data.prepare import prepare
from nemo_recipes.data.shard_plan import read_plan

TRAPS = "".join(fast_encoder.TRAPS)
TEXTS = [
    f"Document {i}: the quick brown fox jumps over the lazy dog; isn't it 12,345? naïve café, 東京 🙂\r\n  x\t\ty. "
    * (1 + i % 3)
    for i in range(400)
] + [TRAPS] * 4
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)

NOT_INVERTED = {"invert": False}


def _random_text(rng: random.Random, size: int) -> str:
    """Characters drawn from every Unicode plane (surrogates and private-use planes aside), spaces, CR, LF, tabs
    and the end-of-document token written literally."""
    pieces = []
    for _ in range(size):
        roll = rng.random()
        if roll < 0.15:
            pieces.append(rng.choice([" ", "  ", "\n", "\r\n", "\t", "   \n"]))
        elif roll < 0.17:
            pieces.append(tokenizers.TRAINED_EOD)
        elif roll < 0.6:
            pieces.append(rng.choice("abcdefghij klmnopqrstuvwxyz'.,0123456789"))
        else:
            plane = rng.choice([0, 0, 1, 2, 3, 14])
            code = plane * 0x10000 + rng.randrange(0x20, 0xFFFE)
            if 0xD800 <= code <= 0xDFFF:
                code = 0x4E2D
            pieces.append(chr(code))
    return "".join(pieces)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return tokenizers.train(TEXTS, tmp_path_factory.mktemp("hf"), vocab_size=600)


def _variant(trained, tmp_path, change) -> str:
    data = json.loads((trained / "tokenizer.json").read_text())
    change(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_trained_tokenizer_passes_the_check_and_gives_the_same_ids_on_the_traps(trained):
    reference = tokenizers.load(trained)
    fast = fast_encoder.build(trained, reference)
    assert isinstance(fast, fast_encoder.TiktokenEncoder)
    rng = random.Random(29)
    texts = [TRAPS, tokenizers.TRAINED_EOD * 3, "a" * 20_000, " " * 300, "\r\n" * 100]
    texts += [_random_text(rng, rng.randrange(1, 3000)) for _ in range(300)]
    expected = reference.encode_batch(texts)
    assert fast.encode_batch(texts) == expected
    giga = gigatoken_encoder.build(trained, reference)
    assert isinstance(giga, gigatoken_encoder.GigatokenEncoder)
    assert giga.encode_batch(texts) == expected
    ids, offsets = giga.encode_flat(texts)
    assert offsets.tolist() == np.cumsum([0] + [len(e) for e in expected]).tolist()
    assert ids.tolist() == [i for e in expected for i in e]
    choice = fast_encoder.choose(trained, TEXTS[:50])
    assert choice.encoder == fast_encoder.GIGATOKEN, choice.why


@pytest.mark.parametrize("build", [fast_encoder.build, gigatoken_encoder.build])
def test_a_literal_special_token_is_its_id_as_hugging_face_encodes_it(trained, build):
    reference = tokenizers.load(trained)
    fast = build(trained, reference)
    assert not isinstance(fast, str)
    ids = fast.encode_batch([f"x{tokenizers.TRAINED_EOD}y"])[0]
    assert reference.eod_id in ids and ids == reference.encode_batch([f"x{tokenizers.TRAINED_EOD}y"])[0]


ANOTHER_SPLIT = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", **NOT_INVERTED},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}


@pytest.mark.parametrize(
    "name, change, gigatoken_why",
    [
        ("a normalizer", lambda data: data.update(normalizer={"type": "Lowercase"}), "no gigatoken: gigatoken cannot"),
        ("BPE dropout", lambda data: data["model"].update(dropout=0.9), "gigatoken gives other ids"),
    ],
)
def test_the_check_fails_on_a_tokenizer_no_faster_encoder_reproduces(trained, tmp_path, name, change, gigatoken_why):
    path = _variant(trained, tmp_path, change)
    choice = fast_encoder.choose(path, TEXTS[:50])
    assert choice.encoder == tokenizers.HUGGINGFACE, (name, choice.why)
    assert "tiktoken gives other ids" in choice.why and gigatoken_why in choice.why, choice.why
    assert "\n" not in choice.why


def test_the_check_on_threads_keeps_every_id_in_order_and_still_tells_a_difference(trained, tmp_path):
    """The reference encodes the check's texts on a thread per worker: its ids in the texts' order, the same as on
    one thread, and a tokenizer that differs (BPE dropout) is still caught."""
    reference = tokenizers.load(trained)
    texts = [*TEXTS[:40], "x" * 9000, *fast_encoder._trap_texts([tokenizers.TRAINED_EOD])]
    expected = reference.encode_batch(texts)
    for threads in (2, 3, 64):
        assert fast_encoder._on_threads(reference, texts, threads) == expected, threads
    assert fast_encoder.choose(trained, TEXTS[:50], threads=2).encoder == fast_encoder.GIGATOKEN
    dropout = _variant(trained, tmp_path, lambda data: data["model"].update(dropout=0.9))
    assert fast_encoder.choose(dropout, TEXTS[:50], threads=2).encoder == tokenizers.HUGGINGFACE


def test_another_split_pattern_fails_tiktokens_check_and_passes_gigatokens(trained, tmp_path, monkeypatch):
    """gigatoken reads the split rules from tokenizer.json, tiktoken is built with GPT-2's: the check tells."""
    path = _variant(trained, tmp_path, lambda data: data.update(pre_tokenizer=ANOTHER_SPLIT))
    assert fast_encoder.choose(path, TEXTS[:50]).encoder == fast_encoder.GIGATOKEN
    monkeypatch.setattr(fast_encoder, "FASTER", (fast_encoder.TIKTOKEN,))
    choice = fast_encoder.choose(path, TEXTS[:50])
    assert choice.encoder == tokenizers.HUGGINGFACE and "tiktoken gives other ids" in choice.why, choice.why


def test_the_check_fails_on_a_sentencepiece_model(tmp_path):
    model = tokenizers.train(TEXTS, tmp_path, vocab_size=400, kind=tokenizers.SENTENCEPIECE)
    choice = fast_encoder.choose(model, TEXTS[:50])
    assert choice.encoder == tokenizers.SENTENCEPIECE
    assert "tiktoken gives other ids" in choice.why, choice.why


@pytest.mark.parametrize(
    "encoder, workers",
    [(fast_encoder.GIGATOKEN, 1), (fast_encoder.GIGATOKEN, 2), (fast_encoder.TIKTOKEN, 2)],
)
def test_prepare_with_a_faster_encoder_writes_the_hugging_face_ids(trained, tmp_path, monkeypatch, encoder, workers):
    """The output, id for id, is the Hugging Face encoding of every document plus the end-of-document token."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    monkeypatch.setattr(fast_encoder, "FASTER", (encoder,))
    rng = random.Random(workers)
    documents = [TRAPS, *TEXTS[:100], *(_random_text(rng, rng.randrange(1, 4000)) for _ in range(400))]
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents), encoding="utf-8")
    log = io.StringIO()
    prepare([str(corpus)], tmp_path / "out", tokenizer_path=trained, workers=workers, shard_bytes=64 << 10, stream=log)
    assert read_plan(tmp_path / "out").encoder == encoder, log.getvalue()
    assert "Traceback" not in log.getvalue()
    reference = tokenizers.load(trained)
    expected = [ids + [reference.eod_id] for ids in reference.encode_batch(documents)]
    dataset = IndexedDataset(str(tmp_path / "out" / "in"))
    assert [dataset[i].tolist() for i in range(len(dataset))] == expected


def test_prepare_keeps_the_slow_encoder_with_one_line_when_the_check_fails(tmp_path):
    model = tokenizers.train(TEXTS, tmp_path / "sp", vocab_size=400, kind=tokenizers.SENTENCEPIECE)
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in TEXTS), encoding="utf-8")
    log = io.StringIO()
    prepare([str(corpus)], tmp_path / "out", tokenizer_path=model, workers=1, stream=log)
    notices = [line for line in log.getvalue().splitlines() if "tiktoken gives other ids" in line]
    assert len(notices) == 1 and notices[0].startswith("tokenizer: encoding with sentencepiece"), log.getvalue()
    assert read_plan(tmp_path / "out").encoder == tokenizers.SENTENCEPIECE


def test_gigatoken_starts_a_fresh_cache_once_memory_has_grown_with_the_same_ids(trained, monkeypatch):
    """Its cache of split words has no bound of its own: a fresh tokenizer object once the process's resident memory
    has grown FRESH_AFTER_GROWTH_BYTES since its first encoding (every FRESH_EVERY_CHARS characters where it cannot be
    read), and the ids do not change across it."""
    reference = tokenizers.load(trained)
    batch = TEXTS[:40]
    expected = reference.encode_batch(batch)
    always = -(1 << 50)  # grown, even where the resident memory went down between two calls
    for limits in ({"FRESH_AFTER_GROWTH_BYTES": always}, {"FRESH_EVERY_CHARS": 5_000, "resident_bytes": lambda: None}):
        giga = gigatoken_encoder.build(trained, reference)
        assert isinstance(giga, gigatoken_encoder.GigatokenEncoder)
        with monkeypatch.context() as patched:
            for name, value in limits.items():
                patched.setattr(gigatoken_encoder, name, value)
            first = giga._backend
            assert giga.encode_batch(batch) == expected
            ids, _ = giga.encode_flat(batch)
            assert giga._backend is not first, limits
            assert ids.tolist() == [i for e in expected for i in e]


def test_gigatoken_keeps_its_cache_on_words_that_repeat(trained):
    giga = gigatoken_encoder.build(trained, tokenizers.load(trained))
    assert isinstance(giga, gigatoken_encoder.GigatokenEncoder)
    first = giga._backend
    for _ in range(200):  # 200 x the same 40 documents: the cache holds their words once
        giga.encode_flat(TEXTS[:40])
    assert giga._backend is first


def test_gigatoken_memory_stays_within_its_bound_on_words_that_never_repeat(trained, monkeypatch):
    """Random words (the worst case: every word a new cache entry, about 14 MB a million characters here) with a
    32 MB bound: fresh objects keep the growth near it (36-69 MB measured; 188 MB after other tests when the freed
    caches were not given back), where one object grows past 250 MB."""
    monkeypatch.setattr(gigatoken_encoder, "FRESH_AFTER_GROWTH_BYTES", 32 << 20)
    giga = gigatoken_encoder.build(trained, tokenizers.load(trained))
    assert isinstance(giga, gigatoken_encoder.GigatokenEncoder)
    rnd = random.Random(7)

    def word() -> str:
        return "".join(rnd.choices("abcdefghijklmnopqrstuvwxyz", k=rnd.randint(4, 12)))

    loads, load = [], giga._load
    giga._load = lambda: loads.append(1) or load()  # an object's id may be its freed predecessor's: count the loads
    peak = 0
    giga.encode_flat(["warm up"])
    process_memory.give_back_freed_memory()  # what earlier tests freed is not counted as room
    start = process_memory.resident_bytes()
    assert start is not None
    for _ in range(24):  # 24 x about 0.8M characters: 19M, over 250 MB for one object
        giga.encode_flat([" ".join(word() for _ in range(300)) for _ in range(300)])
        peak = max(peak, (process_memory.resident_bytes() or 0) - start)
    assert loads  # it did start fresh objects
    assert peak < 128 << 20, f"grew {peak >> 20} MB over a 32 MB bound"


def test_what_holds_the_gil_runs_beside_the_reference_once_before_any_candidate(trained, tmp_path, monkeypatch):
    """`choose(meanwhile=)` (the shards' cut) runs once, while the reference encodes and before a candidate encodes
    (gigatoken beside a thread that holds the GIL ran 60x slower), even when the first candidate fails; the encoder it
    checked is the object the shards then get."""
    order: list[str] = []
    build = fast_encoder._build
    monkeypatch.setattr(fast_encoder, "_build", lambda name, *args: order.append(name) or build(name, *args))
    path = _variant(trained, tmp_path, lambda data: data.update(normalizer={"type": "Lowercase"}))
    choice = fast_encoder.choose(path, TEXTS[:50], threads=2, meanwhile=lambda: order.append("meanwhile"))
    assert order == ["meanwhile", fast_encoder.GIGATOKEN, fast_encoder.TIKTOKEN]
    assert choice.encoder == tokenizers.HUGGINGFACE
    order.clear()
    choice = fast_encoder.choose(trained, TEXTS[:50], meanwhile=lambda: order.append("meanwhile"))
    assert order == ["meanwhile", fast_encoder.GIGATOKEN] and choice.encoder == fast_encoder.GIGATOKEN
    fingerprint = tokenizers.fingerprint(trained)
    relative = os.path.relpath(trained)
    checked = fast_encoder.load(relative, choice.encoder, fingerprint)
    assert fast_encoder.load(str(trained), choice.encoder, fingerprint) is checked  # the one slot, path made absolute
    assert fast_encoder.load(str(trained), choice.encoder) is not checked  # no fingerprint: a new one


def test_the_unassigned_table_marks_every_unassigned_code_point():
    """The table skips looking up planes 4-13 (empty in every Unicode version to date) and marks them unassigned:
    it must still mark every code point this Python calls unassigned, and, on this Python, nothing else."""
    import unicodedata

    from nemo_recipes.data import unassigned

    full = np.fromiter((unicodedata.category(chr(c)) == "Cn" for c in range(0x110000)), dtype=bool, count=0x110000)
    table = unassigned.table()
    assert table.shape == full.shape and (table | ~full).all()  # every unassigned one marked: the safe side
    assert (table == full).all(), np.flatnonzero(table != full)[:5]
