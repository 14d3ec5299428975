"""What the user gives `data prepare`: input arguments resolved into named sources of files, each file's kind
(JSON Lines or plain text, plain, gzip or zstd), and the documents read from a byte range of a file.

A document in a plain-text file is a paragraph: a run of non-blank lines, ended by one or more blank lines (lines of
only whitespace) or the end of the file, with its surrounding whitespace removed ("\r\n" line endings read as
"\n"). Why: a whole file as one document would make a book (or a 1 GB dump) a single sequence that no length
guard, train/validation split or worker split could cut; one line per document would cut prose and verse
mid-thought. Paragraphs are how plain-text corpora (Project Gutenberg, Shakespeare) mark their units, and a shard
boundary can always fall between two of them.

Standard library only (zstandard inside the function that opens a .zst file), and `manifest`'s names.
"""

from __future__ import annotations

import enum
import glob
import gzip
import io
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Optional

from nemo_recipes.data.manifest import MANIFEST_SUFFIX, PREFIX_SUFFIXES
from nemo_recipes.errors import InvalidInputError, Problem, did_you_mean, known
from nemo_recipes.user_paths import not_regular


class DataFormat(enum.StrEnum):
    """How an input file holds its documents: JSON Lines (one object a line, the text under `--key`) or plain text
    (a document a paragraph). A string enum: a shard plan writes it, and reads it back, as its value."""

    JSONL = "jsonl"
    TEXT = "text"


class Compression(enum.StrEnum):
    """How an input file is compressed (None where it is not)."""

    GZIP = "gzip"
    ZSTD = "zstd"


#: File suffixes (after any compression suffix) and the format they hold. `.json` is read as JSON Lines, as
#: Megatron-LM's preprocess_data.py reads it: one object per line.
FORMATS = {
    ".jsonl": DataFormat.JSONL,
    ".ndjson": DataFormat.JSONL,
    ".json": DataFormat.JSONL,
    ".txt": DataFormat.TEXT,
    ".text": DataFormat.TEXT,
    ".md": DataFormat.TEXT,
}
#: Compression suffixes and the codec of each.
COMPRESSIONS = {".gz": Compression.GZIP, ".zst": Compression.ZSTD, ".zstd": Compression.ZSTD}
#: A paragraph break: a newline, then one or more lines of only whitespace.
PARAGRAPH_BREAK = re.compile(r"\n(?:[ \t\r\f\v]*\n)+")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class InvalidDataError(InvalidInputError):
    """An input of `data prepare` the user must fix (exit code 2): a file, a line of it, or how the inputs are
    named."""


#: Deprecated: the name before 0.2 (a subclass of InvalidConfigError then), the same class.
BadInput = InvalidDataError


def bad(field: str, value: Any, why: str, fix: str) -> InvalidDataError:
    return InvalidDataError([Problem(field, value, why, fix)], context="data prepare")


@dataclass(frozen=True)
class InputFile:
    path: str  # absolute
    format: DataFormat
    compression: Optional[Compression]


@dataclass(frozen=True)
class Source:
    """One output prefix: its name and its files, in the order their documents are written."""

    name: str
    argument: str
    files: tuple[InputFile, ...]


def classify(path: Path) -> Optional[InputFile]:
    """The kind of an input file from its suffixes, or None when it is not one we read."""
    suffixes = [s.lower() for s in path.suffixes]
    compression = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression:
        suffixes = suffixes[:-1]
    form = FORMATS.get(suffixes[-1]) if suffixes else None
    if form is None:
        return None
    return InputFile(str(path.absolute()), form, compression)


def _stem(path: Path) -> str:
    name = path.name
    while Path(name).suffix.lower() in (*FORMATS, *COMPRESSIONS):
        name = name[: -len(Path(name).suffix)]
    return name


def _has_magic(text: str) -> bool:
    return glob.has_magic(text)


def _kinds_fix() -> str:
    return (
        f"give files ending in {', '.join(FORMATS)} (optionally {', '.join(COMPRESSIONS)}), directories or globs of "
        "them."
    )


def _kind(path: Path) -> str:
    """'dir', 'file', 'other' (a FIFO, a device, a socket), 'missing', or why the system refuses to look the path up
    (a name over 255 bytes: 'File name too long'), which Path.is_dir() raises rather than answers."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    except OSError as error:
        return error.strerror or type(error).__name__
    except ValueError:  # os.stat refuses a NUL byte before the system sees the path
        return "no path may hold a NUL byte"
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _visible_files(directory: Path) -> list[Path]:
    """The files under `directory`, recursively, in sorted order, less hidden ones and everything in a hidden
    directory (.git, .cache, a `data prepare`'s work directory): not text the user means as the directory's, as a
    hidden file is not. Hidden directories are not even walked (a .git of many objects)."""
    found = []
    for root, directories, names in os.walk(directory):
        directories[:] = [d for d in directories if not d.startswith(".")]
        found += [Path(root, name) for name in names if not name.startswith(".")]
    return sorted(p for p in found if p.is_file())


def resolve(arguments: list[str]) -> list[Source]:
    """Sources of the INPUT arguments: a file is a source; a directory (its files, recursively) or a glob is one
    source of its files in sorted order. `NAME=INPUT` names the source; otherwise the input's stem does
    (`corpus.jsonl.gz` -> corpus, `data/wiki/` -> wiki). Every problem is reported at once."""
    problems: list[Problem] = []
    sources: list[Source] = []
    if not arguments:
        problems.append(Problem("inputs", [], "no input given.", "give one or more files, directories or globs."))
    for argument in arguments:
        name, _, given = (
            argument.rpartition("=") if "=" in argument and _kind(Path(argument)) == "missing" else ("", "", argument)
        )
        path = Path(given).expanduser()
        if not given:  # Path("") is ".": every file under the working directory
            problems.append(Problem("inputs", argument, "names no input.", "give NAME=INPUT, e.g. wiki=data/wiki/"))
            continue
        kind = _kind(path)
        if _has_magic(given):
            matched = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
            default_name = _stem(Path(re.sub(r"[*?\[\]]", "", path.name))).strip("-_.") or path.parent.name
        elif kind not in ("dir", "file", "other", "missing"):
            problems.append(Problem("inputs", given, f"the system refuses to look it up: {kind}.", "check the path."))
            continue
        elif kind == "dir":
            matched = _visible_files(path)
            default_name = path.absolute().name
        elif kind == "file":
            matched = [path]
            default_name = _stem(path)
        elif kind == "other":  # a FIFO, a device (/dev/null), a socket: no size to cut into shards, no second read
            problems.append(known(not_regular(path, "inputs", "save the text to a file first."), "_kind saw no file"))
            continue
        else:
            problems.append(Problem("inputs", given, "no such file or directory.", "check the path."))
            continue
        files = [f for f in (classify(p) for p in matched) if f is not None]
        if kind == "file" and not files:
            problems.append(Problem("inputs", given, "not a kind of file `data prepare` reads.", _kinds_fix()))
            continue
        if not files:
            problems.append(Problem("inputs", given, "matches no input file.", _kinds_fix()))
            continue
        name = name or default_name
        if not _NAME.match(name):
            problems.append(
                Problem(
                    "inputs",
                    argument,
                    f"the source's name {name!r} cannot be a prefix (letters, digits, '.', '_', '-').",
                    "name it: NAME=INPUT, e.g. wiki=data/wiki/",
                )
            )
            continue
        suffix = next((s for s in PREFIX_SUFFIXES if name.endswith(s)), None)
        if suffix is not None:
            problems.append(
                Problem(
                    "inputs",
                    argument,
                    f"the source's name {name!r} ends in {suffix!r}, which the dataset's files add to it: it would "
                    f"be written as {name}.bin, {name}.idx and {name}{MANIFEST_SUFFIX}, a prefix no recipe can name.",
                    f"name it without the suffix: {name[: -len(suffix)] or 'NAME'}={given}",
                )
            )
            continue
        sources.append(Source(name, argument, tuple(files)))
    seen: dict[str, Source] = {}
    for source in sources:
        if source.name in seen:
            problems.append(
                Problem(
                    "inputs",
                    [seen[source.name].argument, source.argument],
                    f"both would write the prefix {source.name!r}: one would overwrite the other.",
                    f"name them apart (NAME=INPUT, e.g. {source.name}2={source.argument}), or put the files in one "
                    "directory to make them one source.",
                )
            )
        seen.setdefault(source.name, source)
    if problems:
        raise InvalidDataError(problems, context="data prepare")
    return sources


class CutShort(EOFError):
    """A compressed file that ends inside a frame (a copy or a download cut short)."""


class _ZstdReader(io.RawIOBase):
    """A .zst file's content, frame after frame, that raises CutShort where the file ends inside a frame.

    zstandard's own stream_reader returns what it decoded and then an empty read at a cut frame, so a file cut in
    half read as a file with no text. Input goes in 64 KiB pieces to bound what one piece can expand to."""

    _PIECE = 1 << 16

    def __init__(self, path: str) -> None:
        import zstandard

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._file = open(path, "rb")
        self._frame: Any = None
        self._pending = b""

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            piece = self._file.read(self._PIECE)
            if not piece:
                if self._frame is not None and not self._frame.eof:
                    raise CutShort("the file ends inside a zstd frame")
                return 0
            self._pending = self._decode(piece)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _decode(self, piece: bytes) -> bytes:
        out = []
        while piece:
            if self._frame is None or self._frame.eof:
                self._frame = self._new()
            out.append(self._frame.decompress(piece))
            piece = self._frame.unused_data if self._frame.eof else b""
        return b"".join(out)


def open_binary(file: InputFile) -> IO[bytes]:
    """The file's decompressed bytes as a stream. Reading it raises what `damaged` recognises for a damaged file."""
    if file.compression == Compression.GZIP:
        return gzip.open(file.path, "rb")  # type: ignore[return-value]
    if file.compression == Compression.ZSTD:
        return io.BufferedReader(_ZstdReader(file.path), buffer_size=1 << 20)
    return open(file.path, "rb")


def damaged(file: InputFile, error: Exception) -> Optional[InvalidDataError]:
    """The answer to a decompression error while reading `file` (exit 2, the file named), or None when `error` is
    not one: a truncated or corrupt .gz (EOFError, BadGzipFile, zlib.error), a .zst cut short or not zstd."""
    import zlib

    kinds: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, zlib.error)
    if file.compression == Compression.ZSTD:
        import zstandard

        kinds += (zstandard.ZstdError,)
    if file.compression is None or not isinstance(error, kinds):
        return None
    codec = file.compression
    return bad(
        "inputs",
        file.path,
        f"the file cannot be decompressed as {codec}: {error or type(error).__name__} (cut short, damaged, or not "
        f"{codec} at all).",
        f"copy or download the file again and check it (e.g. {'gzip -t' if codec == Compression.GZIP else 'zstd -t'} "
        f"{file.path}), or leave it out of the inputs.",
    )


@dataclass(frozen=True)
class ReadOptions:
    key: str = "text"
    max_document_chars: int = 10_000_000
    skip_bad_lines: bool = False


def _where(path: str, line: int) -> str:
    return f"{path}:{line}"


def _field(record: Any, key: str) -> tuple[Any, Optional[str]]:
    """The value at the dotted `key` of `record`, or (None, why it is not there)."""
    value = record
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            keys = list(value) if isinstance(value, dict) else []
            shown = f"its keys are {keys[:10]}" if keys else f"it is {type(value).__name__}, not an object"
            return None, f"has no {part!r} ({shown}){did_you_mean(part, keys)}"
    return value, None


class Skipped:
    """Counts what --skip-bad-lines skipped, with the first few places, for the report."""

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, where: str, why: str) -> None:
        self.count += 1
        if len(self.examples) < 3:
            self.examples.append(f"{where}: {why}")


def _utf8_fix(path: str) -> str:
    return f"convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8 {path} > {Path(path).stem}.utf8{Path(path).suffix})"


def _lines(data: bytes) -> Iterator[bytes]:
    """The lines of `data` as `data.split(b"\\n")` gives them, one at a time: a list of every line of a shard would
    double its memory."""
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        yield data[start:end]
        start = end + 1
    yield data[start:]


#: The scanner of a decoder with json.loads's own options, called directly by `_record` (set by the decoder's
#: __init__, which typeshed does not list).
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_JSON_WHITESPACE = " \t\n\r"


def _record(line: bytes) -> Any:
    """`json.loads(line)`, a fifth faster on the lines of a corpus: a line that is strict UTF-8 and one JSON value
    from its first character is decoded and scanned directly (what json.loads does, less its guess at the encoding
    and its wrappers: 0.44 CPU-s per GB here, about 4 % of a shard). Any other line, and any line that fails, goes
    through json.loads itself, so its value and its error are json.loads's."""
    try:
        text = line.decode("utf-8")
        value, end = _SCAN(text, 0)
    except (ValueError, StopIteration):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return json.loads(line)
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        return json.loads(line)  # something after the value: json.loads says what
    return value


def jsonl_documents(
    data: bytes, file: InputFile, first_line: int, options: ReadOptions, skipped: Skipped
) -> Iterator[str]:
    """The documents of whole JSON lines in `data`, whose first line is line `first_line` of `file`."""
    key, limit = options.key, options.max_document_chars
    for number, line in enumerate(_lines(data), start=first_line):
        if not line.strip():
            continue
        problem: tuple[str, Any, str, str]
        try:
            record = _record(line)
        except UnicodeDecodeError as error:
            column = error.start + 1
            why = f"is not UTF-8 (byte {line[error.start]:#04x} at column {column})."
            problem = ("inputs", None, why, f"{_utf8_fix(file.path)}, {_SKIP}")
        except ValueError as error:
            problem = ("inputs", None, f"is not valid JSON ({error}).", f"fix the line, {_SKIP}")
        else:
            text, missing = _field(record, key)
            if missing:
                problem = ("key", key, f"the record {missing}.", _KEY_FIX)
            elif not isinstance(text, str):
                problem = ("key", key, f"the record's {key!r} is {type(text).__name__}, not a string.", _KEY_FIX)
            elif not text.isascii() and (surrogate := _SURROGATE.search(text)):
                at = f"U+{ord(surrogate.group()):04X} at character {surrogate.start() + 1} of the text"
                why = f"holds a lone surrogate ({at}): not a character, no tokenizer encodes it."
                problem = ("inputs", None, why, f"write the character it stood for, or drop the line, {_SKIP}")
            elif len(text) > limit:
                chars = f"{len(text):,} characters, more than --max-document-chars {limit:,}"
                problem = ("max_document_chars", limit, f"the document has {chars}.", _LONG_FIX)
            else:
                if text:  # an empty text makes no document
                    yield text
                continue
        field, value, why, fix = problem
        where = _where(file.path, number)
        if options.skip_bad_lines:
            skipped.add(where, why)
            continue
        raise bad(field, where if value is None else value, f"{where}: line {number} {why}", fix)


#: A UTF-16 surrogate alone in a decoded text: JSON's escapes may write one ("\\ud800"), and json.loads passes one
#: written as bytes ("\xed\xa0\x80", decoded with surrogatepass); valid JSON, but no Unicode character, so no
#: tokenizer (nor UTF-8) takes it. A pair of escapes is decoded to the one character it stands for.
_SURROGATE = re.compile("[\ud800-\udfff]")
_SKIP = "or pass --skip-bad-lines to skip such lines and count them"
_KEY_FIX = f"name the text's field with --key (a dotted path for nested fields: --key meta.text), {_SKIP}."
_LONG_FIX = f"raise --max-document-chars if documents that long are intended, {_SKIP}."


def text_documents(
    data: bytes, file: InputFile, first_line: int, options: ReadOptions, skipped: Skipped, *, at_start: bool
) -> Iterator[str]:
    """The paragraphs of `data`, which starts at a paragraph's first line (line `first_line` of `file`)."""
    try:
        text = data.decode("utf-8-sig" if at_start else "utf-8")
    except UnicodeDecodeError as error:
        line = first_line + data.count(b"\n", 0, error.start)
        raise bad(
            "inputs",
            _where(file.path, line),
            f"the file is not UTF-8 (byte {data[error.start]:#04x} on line {line}).",
            _utf8_fix(file.path),
        ) from None
    if "\r" in text:  # Windows line endings read as "\n", as Python's text mode reads them
        text = text.replace("\r\n", "\n")
    limit = options.max_document_chars
    for paragraph in PARAGRAPH_BREAK.split(text):
        document = paragraph.strip()
        if not document:
            continue
        if len(document) > limit:
            line = first_line + text.count("\n", 0, text.find(paragraph))
            where = _where(file.path, line)
            why = (
                f"the paragraph starting on line {line} has {len(document):,} characters, more than "
                f"--max-document-chars {limit:,} (a paragraph ends at a blank line)."
            )
            if options.skip_bad_lines:
                skipped.add(where, why)
                continue
            raise bad(
                "max_document_chars",
                f"{where}: {limit}",
                why,
                "raise --max-document-chars if documents that long are intended, separate paragraphs with blank "
                f"lines, {_SKIP}.",
            )
        yield document
