"""Bad input to `nemo-recipes data prepare`, one test each: a clear message with field, value and fix, exit code 2,
and nothing half-written under a final name. Run through the CLI's `main` in this process (Megatron-Core is
imported once for the module)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from nemo_recipes.cli.main import main
from nemo_recipes.data import tokenizers
from nemo_recipes.data.manifest import MANIFEST_SUFFIX, index_summary, read_manifest

pytestmark = pytest.mark.nemo

GOOD = [{"text": f"Line {i}: the quick brown fox jumps over the lazy dog."} for i in range(50)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return tokenizers.train([r["text"] for r in GOOD] * 4, tmp_path_factory.mktemp("tok"), vocab_size=300)


def jsonl(path: Path, records: list, extra_lines: dict | None = None) -> Path:
    lines = [json.dumps(r).encode() for r in records]
    for number, raw in sorted((extra_lines or {}).items()):
        lines.insert(number - 1, raw)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["data", "prepare", *args, "--workers", "1", "--progress", "none"])
    return code, out.getvalue(), err.getvalue()


def nothing_final(out: Path) -> None:
    """Every .bin/.idx under a final name has a manifest and matches it; nothing else looks like a dataset."""
    if not out.exists():
        return
    for path in out.iterdir():
        if path.suffix in (".bin", ".idx") or path.name.endswith(MANIFEST_SUFFIX):
            prefix = out / path.name.removesuffix(MANIFEST_SUFFIX).removesuffix(path.suffix)
            manifest = read_manifest(prefix)  # raises when the manifest is missing
            assert index_summary(prefix).tokens == manifest.tokens


def expect(code: int, err: str, field: str, *words: str) -> None:
    assert code == 2, err
    line = [line for line in err.splitlines() if line.startswith("nemo-recipes data") or line.startswith("  - ")]
    assert line and f"{field}=" in err, err
    assert "Fix:" in err, err
    for word in words:
        assert word in err, err


def test_an_empty_file(tmp_path, tokenizer):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("\n   \n\n")
    code, _, err = run(str(tmp_path / "empty.jsonl"), str(tmp_path / "blank.txt"), "--out", str(tmp_path / "out"),
                       "--tokenizer", str(tokenizer))  # fmt: skip
    expect(code, err, "inputs", "empty.jsonl", "the file is empty", "remove it from the inputs")
    code, _, err = run(str(tmp_path / "blank.txt"), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", "blank.txt", "holds no text")
    nothing_final(tmp_path / "out")


def test_a_file_that_is_not_utf8(tmp_path, tokenizer):
    text = tmp_path / "latin.txt"
    text.write_bytes("First paragraph.\n\nCafé in Latin-1.\n".encode("latin-1"))
    code, _, err = run(str(text), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", f"{text}:3", "not UTF-8", "byte 0xe9", "iconv")
    lines = jsonl(tmp_path / "latin.jsonl", GOOD, {7: '{"text": "caf\xe9"}'.encode("latin-1")})
    code, _, err = run(str(lines), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", f"{lines}:7", "not UTF-8")
    nothing_final(tmp_path / "out")


def test_malformed_json_lines_stop_with_file_and_line_or_are_skipped_and_counted(tmp_path, tokenizer):
    bad = jsonl(tmp_path / "bad.jsonl", GOOD, {3: b'{"text": "unterminated', 10: b"[1, 2"})
    out = tmp_path / "out"
    code, _, err = run(str(bad), "--out", str(out), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", f"{bad}:3", "not valid JSON", "--skip-bad-lines")
    nothing_final(out)
    code, stdout, err = run(str(bad), "--out", str(out), "--tokenizer", str(tokenizer), "--skip-bad-lines")
    assert code == 0, err
    manifest = read_manifest(out / "bad")
    assert manifest.documents == len(GOOD) and manifest.skipped_lines == 2
    assert "2 bad line(s) skipped" in err and stdout.strip() == f"{out}/bad"


def test_a_missing_key(tmp_path, tokenizer):
    records = jsonl(tmp_path / "records.jsonl", [{"txt": "a"}] + GOOD)
    code, _, err = run(str(records), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "key", "key='text'", f"{records}:1", "has no 'text'", "did you mean 'txt'", "--key")
    nested = jsonl(tmp_path / "nested.jsonl", [{"meta": {"body": "x"}}])
    code, _, err = run(str(nested), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer), "--key", "meta.text")
    expect(code, err, "key", "has no 'text'", "'body'")
    nothing_final(tmp_path / "out")


def test_a_gigantic_document(tmp_path, tokenizer):
    from nemo_recipes.data.prepare import DEFAULT_MAX_DOCUMENT_CHARS

    huge = jsonl(tmp_path / "huge.jsonl", GOOD[:5] + [{"text": "word " * 2000}] + GOOD[5:])
    code, _, err = run(str(huge), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer),
                       "--max-document-chars", "5000")  # fmt: skip
    expect(code, err, "max_document_chars", f"{huge}:6", "10,000 characters", "raise --max-document-chars")
    nothing_final(tmp_path / "out")
    text = tmp_path / "wall.txt"
    text.write_text("short\n\n" + "no paragraph breaks at all\n" * 400)
    code, _, err = run(str(text), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer),
                       "--max-document-chars", "5000")  # fmt: skip
    expect(code, err, "max_document_chars", f"{text}:3", "a paragraph ends at a blank line")
    assert 1_000_000 <= DEFAULT_MAX_DOCUMENT_CHARS <= 100_000_000  # a book passes; a whole dump in a record does not


def test_an_output_directory_that_cannot_be_written(tmp_path, tokenizer):
    good = jsonl(tmp_path / "good.jsonl", GOOD)
    (tmp_path / "a-file").write_text("a regular file, not a directory")
    code, _, err = run(str(good), "--out", str(tmp_path / "a-file" / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "out", "cannot be written", "choose an --out directory")
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(readonly)]).returncode == 0:
        try:  # as root, permissions do not stop a write; a read-only filesystem does
            code, _, err = run(str(good), "--out", str(readonly), "--tokenizer", str(tokenizer))
            expect(code, err, "out", "Read-only file system")
        finally:
            subprocess.run(["umount", str(readonly)], check=True)


def test_a_disk_that_fills(tmp_path, tokenizer):
    # Enough tokens that the shards fit on the small disk but the merged copy does not.
    records = [{"text": f"{i} " + "the quick brown fox jumps over the lazy dog " * 20} for i in range(3000)]
    data = jsonl(tmp_path / "data.jsonl", records)
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        code, _, err = run(str(data), "--out", str(disk / "out"), "--tokenizer", str(tokenizer))
        expect(code, err, "out", "the disk is full", "run again: finished shards are kept")
        nothing_final(disk / "out")
        leftovers = [p.name for p in (disk / "out").rglob("*") if ".tmp" in p.name]
        assert leftovers == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_the_same_prefix_twice(tmp_path, tokenizer):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = jsonl(tmp_path / "a" / "corpus.jsonl", GOOD)
    second = tmp_path / "b" / "corpus.jsonl.gz"
    second.write_bytes(gzip.compress(first.read_bytes()))
    code, _, err = run(str(first), str(second), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", "both would write the prefix 'corpus'", "NAME=INPUT")
    assert not (tmp_path / "out").exists()  # refused before anything is created
    code, _, err = run(str(first), f"corpus2={second}", "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    assert code == 0, err
    assert read_manifest(tmp_path / "out" / "corpus").tokens == read_manifest(tmp_path / "out" / "corpus2").tokens


def test_a_tokenizer_path_that_is_not_a_tokenizer(tmp_path):
    good = jsonl(tmp_path / "good.jsonl", GOOD)
    (tmp_path / "notes.json").write_text('{"hello": "world"}')
    for path, why in ((tmp_path / "notes.json", "not a Hugging Face tokenizer"), (tmp_path / "nope", "no such file")):
        code, _, err = run(str(good), "--out", str(tmp_path / "out"), "--tokenizer", str(path))
        expect(code, err, "tokenizer_path", why, "--train-tokenizer")
    nothing_final(tmp_path / "out")


def test_a_vocabulary_too_large_for_uint16_is_said(tmp_path, tokenizer):
    # Not an error (int32 is what Megatron uses then), but said on stderr and recorded in the manifest.
    from tokenizers import Tokenizer

    big = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    big.add_tokens([f"<extra_{i}>" for i in range(70000)])
    big.save(str(tmp_path / "big.json"))
    code, _, err = run(str(jsonl(tmp_path / "good.jsonl", GOOD)), "--out", str(tmp_path / "out"), "--tokenizer",
                       str(tmp_path / "big.json"))  # fmt: skip
    assert code == 0, err
    assert "note: tokenizer_path=" in err and "does not fit uint16" in err and "stored as int32" in err
    assert read_manifest(tmp_path / "out" / "good").dtype == "int32"


# data prepare's numeric flags: 0 and negative values are refused (0 was read as "the default"), as are values that
# are no number and a vocabulary the trainer cannot build; every one exits 2 naming the flag, before any work.
NUMERIC = {
    "--vocab-size": ("vocab_size", ["0", "-1", "259", "1000000000000", "x"]),
    "--shard-size": ("shard_size", ["0", "-1", "1e3x"]),
    "--tokenizer-sample": ("tokenizer_sample_bytes", ["0", "-5", "many"]),
    "--max-document-chars": ("max_document_chars", ["0", "-1", "1.5"]),
    "--workers": ("workers", ["0", "-3", "two"]),
}


@pytest.mark.parametrize("flag,value", [(f, v) for f, (_, values) in NUMERIC.items() for v in values])
def test_numeric_flags_refuse_zero_negative_and_non_numbers(flag, value, tmp_path):
    source = jsonl(tmp_path / "in.jsonl", GOOD)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as parsed:
        code = main(["data", "prepare", str(source), "--out", str(tmp_path / "out"), "--train-tokenizer",
                     "--progress", "none", flag, value])  # fmt: skip
        raise SystemExit(code)
    assert parsed.value.code == 2, err.getvalue()
    assert "Traceback" not in err.getvalue()
    field = NUMERIC[flag][0]
    assert f"{field}=" in err.getvalue() or flag in err.getvalue(), err.getvalue()
    assert not (tmp_path / "out" / "in.bin").exists()


def test_an_empty_name_input_is_refused_not_read_as_the_working_directory(tmp_path, tokenizer, monkeypatch):
    jsonl(tmp_path / "stray.jsonl", GOOD)
    monkeypatch.chdir(tmp_path)
    code, _, err = run("wiki=", "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", "names no input")
    assert not (tmp_path / "out" / "wiki.bin").exists()


def test_workers_beyond_the_cores_are_bounded_with_a_notice(tmp_path, tokenizer):
    source = jsonl(tmp_path / "in.jsonl", GOOD)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["data", "prepare", str(source), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer),
                     "--progress", "none", "--workers", "1000"])  # fmt: skip
    cores = len(os.sched_getaffinity(0))
    assert code == 0 and f"--workers 1,000: {cores} core(s) here; {cores} worker(s) used" in err.getvalue()


def test_inspect_refuses_a_negative_sample(tmp_path):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["data", "inspect", str(tmp_path / "any"), "--sample-tokens", "-1"])
    assert code == 2 and "sample_tokens=-1" in err.getvalue(), err.getvalue()


def test_an_out_inside_the_input_directory_never_reads_its_own_outputs(tmp_path, tokenizer):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    jsonl(corpus / "a.jsonl", GOOD)
    out = corpus / "out"
    first = run(str(corpus), "--out", str(out), "--tokenizer", str(tokenizer))
    assert first[0] == 0, first[2]
    # The second run sees plan.json, receipts and the manifest under the input directory: none of them is an input.
    code, _, err = run(str(corpus), "--out", str(out), "--tokenizer", str(tokenizer))
    assert code == 0 and "nothing to do" in err, err
    assert read_manifest(out / "corpus").inputs[0]["path"].endswith("a.jsonl")
    assert len(read_manifest(out / "corpus").inputs) == 1


def test_a_second_prepare_on_one_out_is_refused_while_the_first_holds_it(tmp_path, tokenizer):
    import fcntl

    out = tmp_path / "out"
    (out / ".nemo-recipes-work").mkdir(parents=True)
    with open(out / ".nemo-recipes-work" / "lock", "w") as held:  # what a running prepare holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, err = run(str(jsonl(tmp_path / "a.jsonl", GOOD)), "--out", str(out), "--tokenizer", str(tokenizer))
    expect(code, err, "out", "another `data prepare` is writing there now")
    assert not (out / "a.bin").exists()


def test_a_fifo_or_a_device_is_named_as_not_a_regular_file(tmp_path, tokenizer):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for given in (str(fifo), "/dev/null"):
        code, _, err = run(given, "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
        expect(code, err, "inputs", "not a regular file")
        assert "no such file" not in err


def _damaged_inputs(tmp_path: Path) -> dict[str, Path]:
    """A .gz and a .zst cut in half, and random bytes under each suffix: what a copy or download cut short and a
    misnamed file look like."""
    import zstandard

    data = b"\n".join(json.dumps(r).encode() for r in GOOD * 40) + b"\n"
    gz, zst = gzip.compress(data), zstandard.ZstdCompressor().compress(data)
    noise = os.urandom(4096)
    files = {
        "cut.jsonl.gz": gz[: len(gz) // 2],
        "cut.jsonl.zst": zst[: len(zst) // 2],
        "noise.jsonl.gz": noise,
        "noise.jsonl.zst": noise,
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    return {name: tmp_path / name for name in files}


def test_a_damaged_compressed_file_is_named_with_its_cause(tmp_path, tokenizer):
    for name, path in _damaged_inputs(tmp_path).items():
        out = tmp_path / f"out-{name}"
        code, _, err = run(f"d={path}", "--tokenizer", str(tokenizer), "--out", str(out))
        expect(code, err, "inputs")
        assert str(path) in err and "cannot be decompressed" in err, (name, err)
        assert "holds no text" not in err and "Traceback" not in err, (name, err)
        nothing_final(out)


def test_a_whole_zst_of_several_frames_reads_as_before(tmp_path):
    """The reader that notices a cut frame reads a complete file of two frames whole, in any read size."""
    import zstandard

    from nemo_recipes.data.sources import Compression, DataFormat, InputFile, open_binary

    first, second = b"a" * 300_000 + b"\n", b"b" * 70_000 + b"\n"
    path = tmp_path / "two.txt.zst"
    compressor = zstandard.ZstdCompressor()
    path.write_bytes(compressor.compress(first) + compressor.compress(second))
    with open_binary(InputFile(str(path), DataFormat.TEXT, Compression.ZSTD)) as stream:
        assert stream.read() == first + second


def test_a_lone_surrogate_is_a_bad_line_not_an_internal_error(tmp_path, tokenizer):
    """Valid JSON but no character: the tokenizer failed on it (an internal error, exit 1), and --skip-bad-lines did
    not skip it."""
    lines = jsonl(tmp_path / "s.jsonl", GOOD, {4: b'{"text": "a high surrogate \\udbff alone"}'})
    out = tmp_path / "out"
    code, _, err = run(str(lines), "--out", str(out), "--tokenizer", str(tokenizer))
    expect(code, err, "inputs", f"{lines}:4", "line 4 holds a lone surrogate (U+DBFF", "--skip-bad-lines")
    assert "Traceback" not in err
    nothing_final(out)
    code, _, err = run(str(lines), "--out", str(out), "--tokenizer", str(tokenizer), "--skip-bad-lines")
    assert code == 0, err
    assert read_manifest(out / "s").documents == len(GOOD) and read_manifest(out / "s").skipped_lines == 1


def test_hidden_directories_and_another_prepares_output_are_not_read_as_input(tmp_path, tokenizer):
    """A directory's hidden directories (.git, .cache) are left out as its hidden files are; a prepared dataset in it
    (its manifests, trained tokenizer and work files are JSON) is left out with a note. Before: the manifest was
    read as JSON Lines and refused as invalid JSON, and the hidden files were tokenized."""
    import shutil

    corpus = tmp_path / "corpus"
    (corpus / ".cache" / "deep").mkdir(parents=True)
    jsonl(corpus / "a.jsonl", GOOD)
    (corpus / ".cache" / "deep" / "junk.jsonl").write_bytes(b"{not json\n")
    first = run(str(jsonl(tmp_path / "b.jsonl", GOOD[:5])), "--out", str(corpus / "old"), "--tokenizer", str(tokenizer))
    assert first[0] == 0, first[2]
    shutil.copytree(tokenizer, corpus / "old" / "tokenizer")  # as --train-tokenizer leaves it
    code, _, err = run(str(corpus), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    assert code == 0, err
    assert [i["path"] for i in read_manifest(tmp_path / "out" / "corpus").inputs] == [str(corpus / "a.jsonl")]
    assert f"file(s) that data prepare wrote in {corpus / 'old'} left out (another prepare's output" in err, err


def test_a_source_name_ending_in_a_dataset_suffix_is_refused(tmp_path, tokenizer):
    """`NAME=` is the output prefix: `wiki.bin` would write wiki.bin.bin and print a prefix no recipe can name. The
    same from a file's stem (`notes.idx.jsonl`)."""
    good = jsonl(tmp_path / "good.jsonl", GOOD)
    named = jsonl(tmp_path / "notes.idx.jsonl", GOOD)
    code, _, err = run(f"wiki.bin={good}", str(named), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizer))
    expect(
        code,
        err,
        "inputs",
        "the source's name 'wiki.bin' ends in '.bin'",
        f"Fix: name it without the suffix: wiki={good}",
    )
    assert f"inputs={str(named)!r}: the source's name 'notes.idx' ends in '.idx'" in err
    assert f"Fix: name it without the suffix: notes={named}" in err
    assert not (tmp_path / "out").exists()
