"""`data inspect`: what a prepared dataset holds (documents, tokens, dtype, manifest, a decoded sample), checked
against the tokenizer: a token id at or beyond its vocabulary is an error (the embedding lookup would fail or read
another row on the GPU)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.data import tokenizers
from nemo_recipes.data.manifest import FIELD, Manifest, manifest_path, read_index, read_manifest
from nemo_recipes.errors import ERROR, WARNING, InvalidInputError, Problem

#: Tokens of the first document decoded as the sample.
SAMPLE_TOKENS = 64


@dataclass
class Inspection:
    prefix: str
    documents: int
    sequences: int
    tokens: int
    dtype: str
    max_token_id: int
    vocab_size: Optional[int]
    manifest: Optional[Manifest]
    sample: Optional[str]
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "documents": self.documents,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "dtype": self.dtype,
            "max_token_id": self.max_token_id,
            "vocab_size": self.vocab_size,
            "sample": self.sample,
            "manifest": self.manifest.to_json() if self.manifest else None,
            "problems": [p.to_dict() for p in self.problems],
        }


def inspect(
    prefix: str | Path, *, tokenizer_path: Optional[str | Path] = None, sample_tokens: int = SAMPLE_TOKENS
) -> Inspection:
    """Inspect the dataset at `prefix`; its problems are in `.problems` (raise with `check`). The tokenizer is
    `tokenizer_path`, else the manifest's when it is still there with the same fingerprint."""
    import numpy as np

    dtype, sequences, documents, lengths = read_index(prefix)
    manifest = read_manifest(prefix) if manifest_path(prefix).is_file() else None
    problems: list[Problem] = []
    tokens = np.memmap(f"{prefix}.bin", dtype=np.dtype(dtype), mode="r") if sum(lengths) else np.zeros(0, np.int64)
    max_id = int(tokens.max()) if len(tokens) else 0
    encoder = None
    vocab_size = manifest.tokenizer.vocab_size if manifest else None
    if tokenizer_path is not None:
        encoder = tokenizers.load(tokenizer_path)
        vocab_size = encoder.vocab_size
        if manifest and tokenizers.fingerprint(tokenizer_path) != manifest.tokenizer.fingerprint:
            problems.append(
                Problem(
                    "tokenizer_path",
                    str(tokenizer_path),
                    f"not the tokenizer the dataset was written with ({manifest.tokenizer.path}, "
                    f"{manifest.tokenizer.fingerprint[:19]}...): its ids mean other text.",
                    "use the tokenizer named in the manifest, or prepare the data again with this one.",
                )
            )
    elif manifest:
        encoder = _manifests_tokenizer(manifest, problems)
    if vocab_size is not None and max_id >= vocab_size:
        problems.append(
            Problem(
                FIELD,
                str(prefix),
                f"token id {max_id} is not below the tokenizer's vocabulary of {vocab_size}: the dataset was written "
                "by another tokenizer, or is damaged.",
                "prepare the data again with the tokenizer you train with (nemo-recipes data prepare --tokenizer ...).",
            )
        )
    if manifest and (manifest.documents, manifest.tokens, manifest.dtype) != (documents, sum(lengths), dtype):
        problems.append(
            Problem(
                FIELD,
                str(prefix),
                f"the manifest says {manifest.documents} documents, {manifest.tokens} {manifest.dtype} tokens; the "
                f"files hold {documents}, {sum(lengths)} {dtype}.",
                "prepare the data again (the files were replaced after the manifest was written).",
            )
        )
    if manifest is None:
        problems.append(
            Problem(
                FIELD,
                str(prefix),
                "no manifest: the tokenizer it was written with is unknown.",
                "prepare it with `nemo-recipes data prepare`, or give --tokenizer to check the ids.",
                WARNING,
            )  # fmt: skip
        )
    sample = None
    if encoder is not None and sequences and max_id < encoder.vocab_size:
        sample = encoder.decode(tokens[: min(lengths[0], sample_tokens)].tolist())
    return Inspection(
        str(prefix), documents, sequences, sum(lengths), dtype, max_id, vocab_size, manifest, sample, problems
    )


def _manifests_tokenizer(manifest: Manifest, problems: list[Problem]) -> Any:
    """The tokenizer the manifest names, loaded when it is still the one that wrote the data; otherwise an error in
    `problems` (a sample decoded by another tokenizer would be other text, and one silently left out hides that the
    data can no longer be read back)."""
    written = manifest.tokenizer
    try:
        if tokenizers.fingerprint(written.path) == written.fingerprint:
            return tokenizers.load(written.path)
        why = "is not the one the dataset was written with (its files changed since)"
    except (InvalidInputError, OSError) as error:
        why = (
            f"cannot be read ({error.problems[0].message if isinstance(error, InvalidInputError) else error.strerror})"
        )
    problems.append(
        Problem(
            "tokenizer",
            written.path,
            f"the manifest's tokenizer {why}: the ids are not checked against it and no sample is decoded.",
            "give --tokenizer with the tokenizer that wrote the data, or prepare the data again with the one you train "
            "with.",
        )
    )
    return None


def errors(inspection: Inspection) -> list[Problem]:
    return [p for p in inspection.problems if p.severity == ERROR]
