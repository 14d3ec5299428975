"""A JSON line is read as json.loads reads it: `sources._record` (a direct scan of lines that are strict UTF-8 and one
JSON value from their first character) gives json.loads's value on every line, and json.loads's own error on every
line it refuses, whatever the bytes: BOMs, NULs, encoded surrogates, invalid UTF-8, CRLF, leading or trailing
whitespace and junk, NaN, deep nesting."""

from __future__ import annotations

import json

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
    lines = [b'{"text": "one"}', b'{"text": "t\\u0077o"}\r', b"", b'{"text": "\xed\xa0\x80x"}', b'{"text": 3}']
    data = b"\n".join(lines) + b"\n"
    file = sources.InputFile(str(tmp_path / "a.jsonl"), sources.JSONL, None)
    skipped = sources.Skipped()
    read = sources.ReadOptions("text", 100, skip_bad_lines=True)
    got = list(sources.jsonl_documents(data, file, 1, read, skipped))
    assert got == ["one", "two", json.loads(lines[3])["text"]]
    assert skipped.count == 1 and skipped.examples[0].startswith(f"{file.path}:5: ")
    assert "int, not a string" in skipped.examples[0]
