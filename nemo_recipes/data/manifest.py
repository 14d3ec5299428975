"""What a prepared dataset says about itself: the manifest beside `PREFIX.bin`/`PREFIX.idx`, and the counts read
straight from the `.idx` header.

Standard library only, also inside functions: the planner and `plan` read manifests and count prefixes without
NumPy, Megatron or a tokenizer library.
"""

from __future__ import annotations

import json
import struct
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nemo_recipes.errors import InvalidConfigError, Problem

# Re-exported: data's modules write through these (moved to the core for the run cards and calibrations).
from nemo_recipes.yaml_files import fsync_directory, umask, write_atomic  # noqa: F401

MANIFEST_SUFFIX = ".manifest.json"
#: What a dataset's files add to its prefix: a prefix (or a source's NAME) ending in one of them names a file.
PREFIX_SUFFIXES = (".bin", ".idx", MANIFEST_SUFFIX)
FORMAT = "nemo-recipes-dataset/1"

#: The field every error about a prefix names: the recipe field that carries prefixes.
FIELD = "data_paths"

# Megatron-Core's `.idx` layout (indexed_dataset._IndexWriter): magic, version, dtype code, sequence and document
# counts, then int32 sequence lengths, int64 sequence pointers, int64 document indices.
_IDX_MAGIC = b"MMIDIDX\x00\x00"
_IDX_HEAD = struct.Struct("<9sQBQQ")
#: Megatron-Core's DType codes and the item size of each.
DTYPES = {1: ("uint8", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8), 6: ("float64", 8),
          7: ("float32", 4), 8: ("uint16", 2)}  # fmt: skip


@dataclass(frozen=True)
class TokenizerInfo:
    """The tokenizer a dataset was written with: enough to recognise it again and to size the model's vocabulary."""

    path: str
    kind: str  # "huggingface" or "sentencepiece"
    fingerprint: str  # "sha256:<hex>" over its files (tokenizers.fingerprint)
    vocab_size: int  # the full vocabulary, special and added tokens included
    eod_id: int


@dataclass(frozen=True)
class Manifest:
    prefix: str  # the prefix's name inside its directory (`corpus` for DIR/corpus.bin)
    documents: int
    tokens: int  # every token in the .bin, EOD included
    text_bytes: int  # UTF-8 bytes of the documents' text
    dtype: str
    max_token_id: int
    tokenizer: TokenizerInfo
    inputs: tuple[dict, ...]  # {"path", "bytes", "sha256"} per input file, in the order read
    arguments: dict = field(default_factory=dict)
    created_by: str = ""
    skipped_lines: int = 0  # bad lines skipped under --skip-bad-lines

    def to_json(self) -> dict[str, Any]:
        data = {"format": FORMAT, **asdict(self)}
        data["inputs"] = [dict(i) for i in self.inputs]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Manifest":
        """The manifest in `data`; ValueError (with what is wrong) when it is not one of this format."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"format is {found!r}, not {FORMAT!r}")
        try:
            tokenizer = TokenizerInfo(**data["tokenizer"])
            manifest = cls(
                prefix=data["prefix"],
                documents=data["documents"],
                tokens=data["tokens"],
                text_bytes=data["text_bytes"],
                dtype=data["dtype"],
                max_token_id=data["max_token_id"],
                tokenizer=tokenizer,
                inputs=tuple(dict(i) for i in data["inputs"]),
                arguments=dict(data.get("arguments", {})),
                created_by=data.get("created_by", ""),
                skipped_lines=data.get("skipped_lines", 0),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"missing or malformed field: {error}") from None
        numbers = {
            "documents": manifest.documents,
            "tokens": manifest.tokens,
            "text_bytes": manifest.text_bytes,
            "max_token_id": manifest.max_token_id,
            "tokenizer.vocab_size": tokenizer.vocab_size,
            "tokenizer.eod_id": tokenizer.eod_id,
            "skipped_lines": manifest.skipped_lines,
        }
        for name, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} is {value!r}, not a non-negative integer")
        return manifest


@dataclass(frozen=True)
class IndexSummary:
    dtype: str
    sequences: int
    documents: int
    tokens: int


def _problem(prefix: str | Path, why: str, fix: str) -> InvalidConfigError:
    return InvalidConfigError([Problem(FIELD, str(prefix), why, fix)], context="dataset")


def check_prefix(prefix: str | Path) -> Path:
    """`prefix` as a Path; a prefix written with its `.bin`/`.idx`/manifest suffix is refused (Megatron appends
    the suffixes itself, so `corpus.bin` would name `corpus.bin.bin`)."""
    text = str(prefix)
    if "\x00" in text:
        raise _problem(prefix, "holds a NUL character, which no file name can.", "give the PREFIX without it.")
    for suffix in PREFIX_SUFFIXES:
        if text.endswith(suffix):
            raise _problem(
                prefix,
                f"a prefix names a dataset without its file suffix; {suffix!r} makes Megatron look for "
                f"{Path(text).name}.bin.",
                f"drop the suffix: {text[: -len(suffix)]}",
            )
    return Path(text)


def manifest_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}{MANIFEST_SUFFIX}")


def read_manifest(prefix: str | Path) -> Manifest:
    """The manifest of the complete dataset at `prefix`; InvalidConfigError (field data_paths) when its .bin, .idx
    or manifest is missing or malformed."""
    path = check_prefix(prefix)
    missing = [p.name for p in (Path(f"{path}.bin"), Path(f"{path}.idx")) if not p.is_file()]
    if missing:
        raise _problem(
            prefix,
            f"no Megatron dataset there: {', '.join(missing)} missing in {path.parent}.",
            "give the PREFIX that `nemo-recipes data prepare` printed (DIR/NAME, no suffix), or prepare the data.",
        )
    where = manifest_path(path)
    if not where.is_file():
        raise _problem(
            prefix,
            f"{where.name} is missing: the dataset was not written by `nemo-recipes data prepare`, or its run did "
            "not finish (the manifest is written last).",
            "run `nemo-recipes data prepare` (again: it resumes) to write the dataset and its manifest.",
        )
    try:
        return Manifest.from_json(json.loads(where.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise _problem(
            prefix,
            f"{where.name} cannot be read as a manifest ({error}).",
            "prepare the data again with `nemo-recipes data prepare` (it rewrites the manifest).",
        ) from None


def write_manifest(prefix: str | Path, manifest: Manifest) -> Path:
    """Write `prefix`'s manifest atomically and return its path."""
    text = json.dumps(manifest.to_json(), indent=2) + "\n"
    return write_atomic(manifest_path(prefix), text.encode("utf-8"))


def index_summary(prefix: str | Path) -> IndexSummary:
    """Counts of the Megatron dataset at `prefix`, read from its `.idx` header and sequence lengths (struct and
    array, no NumPy). InvalidConfigError when the `.idx` is missing, is not an index, or does not match the size
    of its `.bin` (a truncated or half-written dataset)."""
    dtype, sequences, documents, lengths = read_index(prefix)
    return IndexSummary(dtype=dtype, sequences=sequences, documents=documents, tokens=sum(lengths))


def read_index(prefix: str | Path) -> tuple[str, int, int, array]:
    """(dtype, sequences, documents, the sequence lengths) of the `.idx` at `prefix`, checked against its `.bin`."""
    head = _read_head(prefix)
    with open(head.idx, "rb") as stream:
        stream.seek(_IDX_HEAD.size)
        lengths = array("i")
        lengths.frombytes(stream.read(4 * head.sequences))
    if struct.pack("=i", 1) != struct.pack("<i", 1):  # pragma: no cover  (big-endian hosts)
        lengths.byteswap()
    if any(length < 0 for length in lengths):
        raise _problem(prefix, f"{head.idx.name} holds a negative sequence length: damaged.", _AGAIN)
    tokens = sum(lengths)
    if len(lengths) != head.sequences or head.bin_size != tokens * head.itemsize:
        raise _problem(
            prefix,
            f"{head.idx.name} and {head.bin.name} do not match ({head.sequences} sequences of {tokens} {head.dtype} "
            f"tokens need {tokens * head.itemsize} bytes of .bin; it has {head.bin_size}): truncated or half-written.",
            _AGAIN,
        )
    # document_indices starts with a 0: documents = its length - 1.
    return head.dtype, head.sequences, max(head.documents - 1, 0), lengths


def check_files(prefix: str | Path, manifest: Manifest) -> None:
    """The `.bin` and `.idx` at `prefix` are still the files `manifest` describes, checked in constant time (the
    planner reads this for every source of every plan): the index header, both sizes, and where the last sequence
    ends. InvalidConfigError naming the first difference: a `.bin` cut short or grown, an `.idx` of another dataset.
    `data inspect` reads the whole index and every token."""
    head = _read_head(prefix)
    ends = _last_end(head)
    said = (manifest.dtype, manifest.documents, manifest.documents + 1, manifest.tokens * head.itemsize)
    found = (head.dtype, head.sequences, head.documents, head.bin_size)
    if said != found or ends != head.bin_size:
        raise _problem(
            prefix,
            f"the files are not the ones its manifest describes: the manifest says {manifest.documents} documents of "
            f"{manifest.tokens} {manifest.dtype} tokens ({said[3]} bytes of .bin); {head.idx.name} says "
            f"{head.sequences} sequences of {head.dtype} ending at byte {ends}, and {head.bin.name} has "
            f"{head.bin_size} bytes: cut short, grown, or replaced by another dataset's after it was written.",
            "prepare the data again with `nemo-recipes data prepare` (into a new --out, or after removing these "
            "files), and do not edit a prepared dataset in place.",
        )


def _last_end(head: "_Head") -> int:
    """Where the `.idx` says its last sequence ends in the `.bin` (bytes): its pointer plus its length; 0 without
    sequences. Two reads, whatever the size (the header's counts are checked against the file's size already)."""
    if not head.sequences:
        return 0
    with open(head.idx, "rb") as stream:
        stream.seek(_IDX_HEAD.size + 4 * (head.sequences - 1))
        (last_length,) = struct.unpack("<i", stream.read(4))
        stream.seek(_IDX_HEAD.size + 4 * head.sequences + 8 * (head.sequences - 1))
        (last_pointer,) = struct.unpack("<q", stream.read(8))
    return last_pointer + last_length * head.itemsize


_AGAIN = "prepare the data again with `nemo-recipes data prepare` (it resumes and rewrites what is incomplete)."


@dataclass(frozen=True)
class _Head:
    idx: Path
    bin: Path
    dtype: str
    itemsize: int
    sequences: int
    documents: int  # the header's document-index count: documents + 1
    bin_size: int


def _read_head(prefix: str | Path) -> _Head:
    """The `.idx` header at `prefix`, its counts checked against its own size before anything is read by them (a
    damaged header of 2^62 sequences would otherwise ask for exabytes), and the `.bin`'s size."""
    path = check_prefix(prefix)
    idx, bin_ = Path(f"{path}.idx"), Path(f"{path}.bin")
    try:
        with open(idx, "rb") as stream:
            head = stream.read(_IDX_HEAD.size)
        size = idx.stat().st_size
        bin_size = bin_.stat().st_size
    except FileNotFoundError as error:
        raise _problem(
            prefix,
            f"no Megatron dataset there: {Path(error.filename).name} is missing.",
            "give the PREFIX that `nemo-recipes data prepare` printed (DIR/NAME, no suffix), or prepare the data.",
        ) from None
    except OSError as error:  # a path the system refuses to look up: too long a name, a loop, no permission
        raise _problem(
            prefix,
            f"cannot be read ({error.strerror or type(error).__name__}; the path has {len(str(path)):,} characters).",
            "give the PREFIX of a prepared dataset (DIR/NAME, no suffix) as this machine names it.",
        ) from None
    if len(head) < _IDX_HEAD.size or head[:9] != _IDX_MAGIC:
        raise _problem(prefix, f"{idx.name} is not a Megatron index (bad header).", _AGAIN)
    _magic, version, code, sequences, documents = _IDX_HEAD.unpack(head)
    if version != 1 or code not in DTYPES:
        raise _problem(prefix, f"{idx.name} has version {version}, dtype code {code}: not readable.", _AGAIN)
    expected = _IDX_HEAD.size + 4 * sequences + 8 * sequences + 8 * documents
    if size not in (expected, expected + sequences):
        raise _problem(
            prefix,
            f"{idx.name} is {size} bytes, but its header's {sequences} sequences and {documents} document "
            f"offsets need {expected}: damaged or cut short.",
            _AGAIN,
        )
    dtype, itemsize = DTYPES[code]
    return _Head(idx, bin_, dtype, itemsize, sequences, documents, bin_size)
