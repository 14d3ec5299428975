"""The sample the encoder check compares (data/check_sample.py): read at offsets spread over plain inputs, whole
documents only, bad lines left to the shard that numbers them; from the shards when an input is compressed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nemo_recipes.data import check_sample, fast_encoder, shard_plan, sources, tokenizers
from nemo_recipes.data.prepare import prepare

TEXTS = [f"Document number {i} says: " + " ".join(f"w{(i * j) % 97}" for j in range(300)) for i in range(4000)]
READ = sources.ReadOptions("text", 10_000_000, False)


def _jsonl(path: Path, texts: list[str]) -> tuple[sources.InputFile, int]:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return sources.InputFile(str(path), sources.DataFormat.JSONL, None), path.stat().st_size


def test_the_sample_is_whole_documents_from_every_sixteenth_of_the_plain_inputs(tmp_path):
    files = [_jsonl(tmp_path / "a.jsonl", TEXTS[:1000]), _jsonl(tmp_path / "b.jsonl", TEXTS[1000:])]
    sample = check_sample.at_points(files, READ)
    position = {text: i for i, text in enumerate(TEXTS)}
    assert all(text in position for text in sample)  # no partial line, no JSON
    regions = {position[text] * check_sample.POINTS // len(TEXTS) for text in sample}
    assert regions == set(range(check_sample.POINTS))
    assert fast_encoder.SAMPLE_CHARS * 0.9 <= sum(map(len, sample)) <= fast_encoder.SAMPLE_CHARS * 1.1


def test_a_bad_line_at_a_point_is_left_to_its_shard_which_reports_it_numbered(tmp_path):
    lines = [json.dumps({"text": t}) for t in TEXTS[:800]]
    lines[401] = "{not json"  # the line after the middle point
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    sample = check_sample.at_points(
        [(sources.InputFile(str(path), sources.DataFormat.JSONL, None), path.stat().st_size)], READ
    )
    assert sample and "{not json" not in sample
    tokenizer = tokenizers.train(TEXTS[:100], tmp_path / "tok", vocab_size=400)
    with pytest.raises(sources.InvalidDataError) as raised:
        prepare([str(path)], tmp_path / "out", tokenizer_path=tokenizer, progress="none")
    assert "line 402" in str(raised.value) and "not valid JSON" in str(raised.value)
    assert not list((tmp_path / "out").glob("*.bin"))


def test_a_text_file_that_is_not_utf8_at_a_point_is_reported_by_its_shard(tmp_path):
    path = tmp_path / "book.txt"
    paragraphs = [t.encode() for t in TEXTS[:400]]
    paragraphs[300] = b"caf\xe9 latin-1 here"
    path.write_bytes(b"\n\n".join(paragraphs) + b"\n")
    tokenizer = tokenizers.train(TEXTS[:100], tmp_path / "tok", vocab_size=400)
    with pytest.raises(sources.InvalidDataError) as raised:
        prepare([str(path)], tmp_path / "out", tokenizer_path=tokenizer, progress="none")
    assert "not UTF-8" in str(raised.value) and "line 601" in str(raised.value)


def test_with_a_compressed_input_the_sample_comes_from_the_shards(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:300]))
    packed = tmp_path / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[300:600]).encode()))
    tokenizer = tokenizers.train(TEXTS[:100], tmp_path / "tok", vocab_size=400)
    log = tmp_path / "log"
    with open(log, "w") as stream:
        prepare([str(plain), str(packed)], tmp_path / "out", tokenizer_path=tokenizer, progress="none", stream=stream)
    plan = shard_plan.read_plan(tmp_path / "out")
    assert plan is not None
    chars = sum(map(len, check_sample.from_shards(plan.shards, READ)))
    assert f"the same ids as huggingface on {chars:,} characters" in log.read_text()
