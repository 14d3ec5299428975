"""The cut of an uncompressed input into shards (shard_plan._split_plain, read where asked with pread) gives the ranges,
line numbers and verdict of the line-by-line reading that compressed inputs keep (_split_read), on hostile layouts:
blank and whitespace-only lines, CRLF, no final newline, lines longer than the read limit, cuts inside lines."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nemo_recipes.data import shard_plan
from nemo_recipes.data.sources import Compression, DataFormat, InputFile

PIECES = [b"\n", b"  \n", b"\r\n", b"\t\x0b\x0c\r\n", b'{"text": "a"}\n', b"word\n", b"x" * 90 + b"\n", b"   ", b"abc",
          b"\n\n\n", b"y" * 300 + b"\n", " \u00e9\n".encode()]  # fmt: skip


@pytest.fixture
def small_blocks(monkeypatch):
    """Read limit and blocks a few bytes long, so that short files cross every boundary the real sizes have."""
    monkeypatch.setattr(shard_plan, "_READ_LIMIT", 64)
    monkeypatch.setattr(shard_plan, "_FIND_BLOCK", 5)
    monkeypatch.setattr(shard_plan, "_BLOCK", 7)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=40),
    shard_bytes=st.sampled_from([1, 2, 3, 7, 50, 200, 5000]),
    jsonl=st.booleans(),
)
@example(pieces=[b"y" * 300 + b"\n", b"  \n", b"word\n"], shard_bytes=3, jsonl=False)  # a line over the read limit
@example(pieces=[b"   "], shard_bytes=1, jsonl=True)  # whitespace only, no newline: no text
def test_a_plain_file_is_cut_as_reading_it_line_by_line_cuts_it(small_blocks, tmp_path_factory, pieces, shard_bytes,
                                                                 jsonl):  # fmt: skip
    path = tmp_path_factory.mktemp("cut") / "input"
    path.write_bytes(b"".join(pieces))
    file = InputFile(str(path), DataFormat.JSONL if jsonl else DataFormat.TEXT, None)
    assert shard_plan._split(file, shard_bytes) == shard_plan._split_read(file, shard_bytes)


def test_a_compressed_copy_is_cut_at_the_same_places(tmp_path):
    text = b"".join(f'{{"text": "document {i}"}}\n'.encode() + (b"\n" if i % 7 == 0 else b"") for i in range(2000))
    (tmp_path / "a.jsonl").write_bytes(text)
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(text))
    plain = shard_plan.split_file(InputFile(str(tmp_path / "a.jsonl"), DataFormat.JSONL, None), 4096)
    packed = shard_plan.split_file(InputFile(str(tmp_path / "a.jsonl.gz"), DataFormat.JSONL, Compression.GZIP), 4096)
    assert plain == packed and len(plain[0]) > 5
    starts = [start for start, _, _ in plain[0]]
    lines = [line for _, _, line in plain[0]]
    assert lines == [text[:start].count(b"\n") + 1 for start in starts]  # the line numbers errors will name
    assert all(text[start - 1 : start] == b"\n" and text[start : start + 1] == b"{" for start in starts[1:])


def test_the_cut_reads_a_file_once_in_blocks_not_line_by_line(tmp_path, monkeypatch):
    """The point of the plain path: no readline of every line (it held the GIL for a fifth of the plan)."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "x"}\n' * 100_000)
    calls = []
    monkeypatch.setattr(shard_plan, "_split_read", lambda *a: calls.append(a))
    ranges, size, any_text = shard_plan.split_file(InputFile(str(path), DataFormat.JSONL, None), 100_000)
    assert not calls and size == path.stat().st_size and any_text and len(ranges) == 14
    assert Path(path).read_bytes()[ranges[3][0] - 1 : ranges[3][0] + 1] == b"\n{"


def test_a_files_format_and_compression_are_enums_in_the_shard_plan_and_its_json(tmp_path):
    from dataclasses import asdict

    from nemo_recipes.data.sources import classify

    file = classify(tmp_path / "part.JSON.zst")
    assert file is not None and file.format is DataFormat.JSONL and file.compression is Compression.ZSTD
    assert classify(tmp_path / "notes.md").format is DataFormat.TEXT  # type: ignore[union-attr]
    shard = shard_plan.Shard(0, "part", file.path, file.format, file.compression, 0, 10, 1)
    written = asdict(shard)
    assert (written["format"], written["compression"]) == ("jsonl", "zstd")  # the JSON holds the values
    read = shard_plan._shard(written | {"format": "jsonl", "compression": "zstd"})
    assert read == shard and read.format is DataFormat.JSONL and read.compression is Compression.ZSTD
