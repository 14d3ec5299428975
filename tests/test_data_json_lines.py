"""A JSON line is read as json.loads reads it: `sources._record` (a direct scan of lines that are strict UTF-8 and one
JSON value from their first character) gives json.loads's value on every line, and json.loads's own error on every
line it refuses, whatever the bytes: BOMs, NULs, encoded surrogates, invalid UTF-8, CRLF, leading or trailing
whitespace and junk, NaN, deep nesting."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nemo_recipes.data import sources

_PIECES = [
    b'{"text": "a"}',
    b'{"text": "caf\xc3\xa9 \\u00e9 \\ud83d\\ude00"}',
    b'{"text": "\\ud800"}',  # an escaped lone surrogate: valid JSON
    b'"\xed\xa0\x80"',  # a surrogate written as UTF-8 bytes: json.loads passes it through
    b"\xef\xbb\xbf",  # a UTF-8 BOM
    b"\xff\xfe",
    b"\x00",
    b"\xc3",  # a truncated character
    b"\x80",
    b"NaN",
    b"-Infinity",
    b"12345678901234567890123",
    b"1e400",
    b"[",
    b"]",
    b"{",
    b"}",
    b'"',
    b"\\",
    b",",
    b":",
    b" ",
    b"\t",
    b"\r",
    b"\x0b",
    b"\x0c",
    b"\x1f",
    b"null",
    b"true",
    b'{"a": 1, "a": 2}',
    b"[" * 3000 + b"]" * 3000,
]


def _outcome(read, line: bytes):
    try:
        value = read(line)
    except RecursionError:
        return ("RecursionError",)
    except ValueError as error:
        return (type(error).__name__, str(error))
    return ("value", type(value).__name__, json.dumps(value, sort_keys=True))  # NaN is written NaN: equal as text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.binary(max_size=6)), min_size=1, max_size=6).map(b"".join))
@example(b'{"text": "a"}\r')
@example(b' {"text": "a"}')
@example(b'{"text": "a"} x')
@example(b'{"text": "a"}\x0c')
@example(b"\xef\xbb\xbf{}")
@example(b'"\xed\xa0\x80"')
@example(b"{\x00}")
@example(b"1\x00")
@example(b"[" * 3000 + b"]" * 3000)
def test_a_json_line_is_read_as_json_loads_reads_it(line: bytes) -> None:
    assert _outcome(sources._record, line) == _outcome(json.loads, line)


def test_the_documents_of_a_shard_are_json_loads_s_and_a_bad_line_is_named_as_before(tmp_path) -> None:
    lines = [b'{"text": "one"}', b'{"text": "t\\u0077o"}\r', b"", b'{"text": "\\ud83d\\ude00"}', b'{"text": 3}']
    data = b"\n".join(lines) + b"\n"
    file = sources.InputFile(str(tmp_path / "a.jsonl"), sources.DataFormat.JSONL, None)
    skipped = sources.Skipped()
    read = sources.ReadOptions("text", 100, skip_bad_lines=True)
    got = list(sources.jsonl_documents(data, file, 1, read, skipped))
    assert got == ["one", "two", "\U0001f600"]  # a pair of escaped surrogates is one character
    assert skipped.count == 1 and skipped.examples[0].startswith(f"{file.path}:5: ")
    assert "int, not a string" in skipped.examples[0]


def test_a_lone_surrogate_is_a_bad_line_whichever_way_it_is_read(tmp_path) -> None:
    """Valid JSON, but no character: escaped (read by the direct scan) or written as bytes (strict UTF-8 refuses
    them, json.loads decodes them with surrogatepass), a lone surrogate reached the tokenizer (an internal error).
    It is a bad line: skipped and counted with --skip-bad-lines, refused with its line otherwise."""
    lines = [b'{"text": "low \\udfff alone"}', b'{"text": "ok"}', b'{"text": "bytes \xed\xb0\x80"}']
    assert "\udfff" in sources._record(lines[0])["text"] and "\udc00" in sources._record(lines[2])["text"]
    data = b"\n".join(lines)
    file = sources.InputFile(str(tmp_path / "a.jsonl"), sources.DataFormat.JSONL, None)
    skipped = sources.Skipped()
    read = sources.ReadOptions("text", 100, skip_bad_lines=True)
    assert list(sources.jsonl_documents(data, file, 1, read, skipped)) == ["ok"]
    assert [e.split(": ", 1)[0] for e in skipped.examples] == [f"{file.path}:1", f"{file.path}:3"]
    assert "holds a lone surrogate (U+DFFF at character 5 of the text)" in skipped.examples[0]
    assert "U+DC00 at character 7" in skipped.examples[1]
    with pytest.raises(sources.InvalidDataError) as refused:
        list(sources.jsonl_documents(data, file, 1, sources.ReadOptions("text", 100), sources.Skipped()))
    (problem,) = refused.value.problems
    assert (problem.field, problem.value) == ("inputs", f"{file.path}:1")
    assert "line 1 holds a lone surrogate" in problem.message and "--skip-bad-lines" in problem.fix
