"""A prepared dataset without a manifest, checked against the tokenizer it is to be trained with: nothing records
which tokenizer wrote it, so its token ids are read and tried against this one before any training.

Three checks on the first `SAMPLE_TOKENS` tokens (all of a smoke-sized dataset; the start of a large one, read in
constant time whatever its size): every id below the tokenizer's vocabulary; where the documents end with one common
id (the EOD that data preparation appends), that id is the tokenizer's EOD; and whole documents decoded by the
tokenizer encode back to the same ids. Data written by another tokenizer of the same size passes the first check and
fails the last: its ids decode to text that this tokenizer splits differently. Standard library (the tokenizer is
loaded by `data.tokenizers`, as the planner already does to size the vocabulary).
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

from nemo_recipes.data.manifest import FIELD, read_index
from nemo_recipes.errors import ERROR, WARNING, Problem

#: Tokens read from the start of the .bin.
SAMPLE_TOKENS = 1 << 20
#: Documents decoded and encoded again, and the longest stretch of one that is (tokens).
ROUND_TRIPS, ROUND_TRIP_TOKENS = 16, 256
#: Share of documents ending with one id above which that id is taken for the data's EOD.
EOD_SHARE = 0.9
#: Share of the round trips that must give the ids back: a tokenizer's own output round-trips (all of it in the
#: corpora tried here); another tokenizer's ids almost never do. A few misses (text normalisation, a byte split
#: across a cut) are warned about, not refused.
ROUND_TRIP_SHARE = 0.5

_TYPECODES = {"uint8": "B", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "int64": "q"}
_FIX = (
    "give the tokenizer that wrote the data as tokenizer_path, or prepare the data again with this one "
    "(`nemo-recipes data prepare`, which writes a manifest naming its tokenizer)."
)


def documents(prefix: str | Path, limit: int = SAMPLE_TOKENS) -> tuple[str, list[list[int]]]:
    """(dtype, the documents whose tokens lie in the first `limit` tokens of the .bin, the last one cut there)."""
    dtype, _, _, lengths = read_index(prefix)
    code = _TYPECODES.get(dtype)
    if code is None:
        return dtype, []
    tokens = array(code)
    with open(f"{prefix}.bin", "rb") as stream:
        tokens.frombytes(stream.read(min(limit, sum(lengths)) * tokens.itemsize))
    out, start = [], 0
    for length in lengths:
        if start >= len(tokens):
            break
        out.append(tokens[start : start + length].tolist())
        start += length
    return dtype, out


def tokenizer_problems(prefix: str | Path, tokenizer_path: str | Path) -> list[Problem]:
    """Errors where the data at `prefix` (no manifest) cannot have been written by the tokenizer at
    `tokenizer_path`, a warning where some round trips miss; none when it reads as this tokenizer's output."""
    from nemo_recipes.data import tokenizers

    encoder = tokenizers.load(tokenizer_path)
    _, docs = documents(prefix)
    flat = [i for doc in docs for i in doc]
    if not flat:
        return []
    problems: list[Problem] = []

    def refuse(why: str, severity: str = ERROR) -> None:
        problems.append(Problem(FIELD, str(prefix), f"(no manifest) {why}", _FIX, severity))

    named = f"the tokenizer at {tokenizer_path} (vocabulary {encoder.vocab_size:,}, EOD id {encoder.eod_id})"
    top = max(flat)
    if top >= encoder.vocab_size or min(flat) < 0:
        refuse(
            f"holds token id {top:,} in its first {len(flat):,} tokens: not below the vocabulary of {named}; the "
            "embedding lookup would fail or read another row."
        )
        return problems
    ends = [doc[-1] for doc in docs[:-1] if doc] or [docs[-1][-1]]
    common = max(set(ends), key=ends.count)
    if ends.count(common) >= EOD_SHARE * len(ends) and len(ends) > 1 and common != encoder.eod_id:
        refuse(
            f"{ends.count(common)} of its first {len(ends)} documents end with id {common}, where data preparation "
            f"puts the EOD; the EOD of {named} is {encoder.eod_id}."
        )
    trips = _round_trips(encoder, docs)
    kept = sum(same for same, _ in trips)
    if trips and kept < ROUND_TRIP_SHARE * len(trips):
        shown = next(text for same, text in trips if not same)
        refuse(
            f"only {kept} of {len(trips)} documents decoded by {named} encode back to the same ids (the first reads "
            f"{shown!r}): its ids were written by another tokenizer."
        )
    elif kept < len(trips):
        refuse(f"{len(trips) - kept} of {len(trips)} documents decoded by {named} do not encode back to the same ids.",
               WARNING)  # fmt: skip
    return problems


def _round_trips(encoder: Any, docs: list[list[int]]) -> list[tuple[bool, str]]:
    """(whether the ids came back, the decoded text's start) for the first whole documents, their EOD left out."""
    trips = []
    for doc in docs[:-1][:ROUND_TRIPS] or docs[:1]:
        ids = [i for i in doc if i != encoder.eod_id][:ROUND_TRIP_TOKENS]
        if not ids:
            continue
        text = encoder.decode(ids)
        trips.append((encoder.encode_batch([text])[0] == ids, text[:60]))
    return trips
