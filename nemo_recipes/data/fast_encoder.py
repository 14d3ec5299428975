"""A faster encoder with the same ids: tiktoken's BPE built in memory from the tokenizer's own vocabulary, used by
`data prepare` only after it gave, id for id, what the tokenizer's own library gives on a sample of the inputs.

Why it can be exact: tiktoken merges the adjacent pair whose concatenation has the lowest rank, Hugging Face's BPE
the pair with the lowest merge index; with ranks = the tokenizer's ids they agree when every token was made by one
merge of two earlier tokens, in id order, which holds for a byte-level BPE trained by `BpeTrainer` (every tokenizer
`--train-tokenizer` writes). Nothing here decides that from the tokenizer's configuration: normalizers, other split
patterns, `ignore_merges`, dropout and SentencePiece's rules are all caught by comparing the ids (`check`), and a
tokenizer that differs keeps its own library. tiktoken is imported inside the functions that need it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from nemo_recipes.data import gigatoken_encoder, tokenizers, unassigned
from nemo_recipes.data.gigatoken_encoder import GIGATOKEN

if TYPE_CHECKING:
    from concurrent.futures import Future

TIKTOKEN = "tiktoken"
#: GPT-2's split pattern, the one Hugging Face's ByteLevel pre-tokenizer applies (`use_regex=True`).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: Text the check encodes besides the sample, so that what a sample of plain prose may lack is compared too: every
#: Unicode plane, a word of thousands of letters, runs of spaces, tabs and newlines, CRLF, combining marks, digits,
#: contractions and punctuation (the special and added tokens are written into it by `check`).
TRAPS = (
    "Plain prose, with punctuation: isn't it? They'll say \"yes\" -- or won't. 12,345.67 and 3.14159e-10.\n",
    "Whitespace:  two,   three,\t tab,\t\ttabs, trailing   \n\n\n   \n and\r\nCRLF\r\n\r\nlines \r\n",
    "Unicode: café naïve Ñandú Ωμέγα Москва العربية עברית हिन्दी 中文字符 日本語のテキスト 한국어 ภาษาไทย\n",
    "Planes: \U00010348\U0001d11e\U0001f600\U0001f469\u200d\U0001f4bb\U00020000\U0002a700\U000e0041\U000f0000"
    "\U0010fffd \ufeff\u00a0\u2028\u3000x\u0301\u0300 \ufffd\n",
    "Long: " + "antidisestablishmentarianism" * 200 + " " + "x" * 5000 + " " + "\u00e9" * 3000 + "\n",
    "Code: def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\tif x != y: pass\n" + " " * 64 + "end\n",
)
#: The sample of the inputs the check compares, at most (encoded twice before the first shard: a second or two).
SAMPLE_CHARS = 2_000_000


def _byte_decoder() -> dict[str, int]:
    """GPT-2's map of printable characters to bytes, the one Hugging Face's ByteLevel writes its vocabulary in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes, strict=True)}


@dataclass(frozen=True)
class Vocabulary:
    """What a tiktoken `Encoding` is built from: {token bytes: id} and {special token: id}."""

    ranks: dict[bytes, int]
    specials: dict[str, int]


def _huggingface_vocabulary(path: Path) -> Vocabulary | str:
    file = path if path.is_file() else path / "tokenizer.json"
    if not file.is_file():
        return "no tokenizer.json"
    data = json.loads(file.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        return f"its model is {model.get('type')}, not BPE"
    specials = {t["content"]: int(t["id"]) for t in data.get("added_tokens") or ()}
    decoder = _byte_decoder()
    ranks: dict[bytes, int] = {}
    for token, token_id in model.get("vocab", {}).items():
        if token in specials:
            continue
        try:
            ranks[bytes(decoder[char] for char in token)] = int(token_id)
        except KeyError:
            return f"its vocabulary is not byte-level (token {token!r})"
    return Vocabulary(ranks, specials)


def _sentencepiece_vocabulary(path: Path) -> Vocabulary | str:
    """A SentencePiece model read as a byte-level BPE (pieces as UTF-8 with '▁' for a space, `<0xNN>` as bytes):
    the encoding a naive conversion gives, which the check then compares with SentencePiece's own."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    processor.Load(str(path if path.is_file() else next(f for f in tokenizers.tokenizer_files(path))))
    ranks: dict[bytes, int] = {}
    specials = {}
    for piece_id in range(processor.get_piece_size()):
        piece = processor.id_to_piece(piece_id)
        if processor.is_byte(piece_id):
            ranks.setdefault(bytes([int(piece[3:5], 16)]), piece_id)
        elif processor.is_control(piece_id) or processor.is_unknown(piece_id):
            specials[piece] = piece_id
        else:
            ranks.setdefault(piece.replace("\u2581", " ").encode("utf-8"), piece_id)
    return Vocabulary(ranks, specials)


def vocabulary(path: str | Path) -> Vocabulary | str:
    """The tokenizer at `path` as tiktoken ranks, or why it cannot be read as one."""
    path = Path(path)
    if tokenizers.kind_of(path) == tokenizers.SENTENCEPIECE:
        result = _sentencepiece_vocabulary(path)
    else:
        result = _huggingface_vocabulary(path)
    if isinstance(result, Vocabulary):
        missing = [byte for byte in range(256) if bytes([byte]) not in result.ranks]
        if missing:
            # tiktoken starts every word from its single bytes: one not in the vocabulary would stop it.
            return f"{len(missing)} of the 256 single bytes are not tokens (first: {missing[0]:#04x})"
    return result


class TiktokenEncoder(tokenizers.Encoder):
    """tiktoken over the vocabulary of a tokenizer, with that tokenizer's vocabulary size and end-of-document id.
    Special and added tokens written literally in the text are encoded as their ids, as Hugging Face does. A document
    with a character unassigned in Python's Unicode tables is encoded by `reference` (the tokenizer's own library),
    whose Unicode version may differ from tiktoken's."""

    kind = TIKTOKEN

    def __init__(self, vocab: Vocabulary, reference: tokenizers.Encoder):
        import tiktoken

        self._encoding = tiktoken.Encoding(
            "nemo-recipes", pat_str=GPT2_PATTERN, mergeable_ranks=vocab.ranks, special_tokens=vocab.specials
        )
        self._core = self._encoding._core_bpe  # the Rust encoder: skips a Python check per document
        self._specials = set(vocab.specials)
        self._reference = reference
        self.vocab_size = reference.vocab_size
        self.eod_id = reference.eod_id

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        encode = self._core.encode
        specials = self._specials
        rare = unassigned.rare(texts)
        skip = set(rare)
        result = [[] if i in skip else encode(text, specials) for i, text in enumerate(texts)]
        if rare:
            for i, ids in zip(rare, self._reference.encode_batch([texts[i] for i in rare]), strict=True):
                result[i] = ids
        return result

    def decode(self, ids: Iterable[int]) -> str:
        return self._encoding.decode(list(ids), errors="strict")


def build(path: str | Path, reference: tokenizers.Encoder) -> TiktokenEncoder | str:
    """tiktoken for the tokenizer at `path` (loaded as `reference`), or why there is none."""
    vocab = vocabulary(path)
    if isinstance(vocab, str):
        return vocab
    return TiktokenEncoder(vocab, reference)


def added_tokens(path: str | Path) -> list[str]:
    """The special and added tokens of the Hugging Face tokenizer at `path` (none for another kind)."""
    path = Path(path)
    file = path if path.is_file() else path / "tokenizer.json"
    if file.suffix != ".json" or not file.is_file():
        return []
    return [t["content"] for t in json.loads(file.read_text(encoding="utf-8")).get("added_tokens") or ()]


def _trap_texts(specials: Iterable[str]) -> list[str]:
    specials = sorted(set(specials))
    literal = "".join(f"a{token}b {token} {token}{token}\n" for token in specials)
    return [*TRAPS, literal, "".join(TRAPS) + literal]


def _on_threads(encoder: tokenizers.Encoder, texts: list[str], threads: int) -> list[list[int]]:
    """`encoder.encode_batch(texts)`, the texts cut into `threads` runs of about equal characters, one thread each.
    The check comes before the first shard, so it is the one step that no worker shares; the tokenizer libraries
    encode without holding the GIL, so the cores of --workers share it this way (the order of the ids is kept)."""
    from concurrent.futures import ThreadPoolExecutor

    if threads <= 1 or len(texts) < 2:
        return encoder.encode_batch(texts)

    share = sum(map(len, texts)) / threads
    runs: list[list[str]] = [[]]
    chars = 0
    for text in texts:
        if chars >= share * len(runs) and len(runs) < threads:
            runs.append([])
        runs[-1].append(text)
        chars += len(text)
    with ThreadPoolExecutor(len(runs)) as pool:
        return [ids for run in pool.map(encoder.encode_batch, runs) for ids in run]


def check(
    reference: tokenizers.Encoder,
    candidate: tokenizers.Encoder,
    sample: list[str],
    specials: Iterable[str] = (),
    threads: int = 1,
    expected: Optional["Future[list[list[int]]]"] = None,
) -> Optional[str]:
    """None when `candidate` gives the ids `reference` gives on every text of `sample` and the traps (with each of
    `specials` written literally), else the first difference, in words. The reference encodes on `threads`
    threads; `expected`: its ids of `sample`, being encoded already (`choose` encodes them once for every candidate)."""
    if isinstance(candidate, TiktokenEncoder):
        specials = [*specials, *candidate._specials]
    from concurrent.futures import ThreadPoolExecutor

    traps = _trap_texts(specials)
    texts = list(sample) + traps
    # The reference encodes (without the GIL) while this thread runs the candidate and what its first call loads.
    with ThreadPoolExecutor(1) as background:
        if expected is None:
            expected = background.submit(_on_threads, reference, list(sample), threads)
        try:
            got = candidate.encode_batch(texts)
        except BaseException as error:  # noqa: BLE001  tiktoken's Rust panics are BaseExceptions: a difference
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            return f"it failed: {type(error).__name__}: {str(error)[:120]}"
        wanted = expected.result() + reference.encode_batch(traps)
    for number, (want, have) in enumerate(zip(wanted, got, strict=True)):
        if want != have:
            pairs = enumerate(zip(want, have, strict=False))
            at = next((i for i, (a, b) in pairs if a != b), min(len(want), len(have)))
            where = "the traps" if number >= len(sample) else f"sample document {number + 1}"
            return (
                f"{where} differs at token {at} of {len(want)}: {want[at : at + 3]} expected, {have[at : at + 3]} "
                f"given, near {reference.decode(want[max(0, at - 2) : at + 2])!r}"
            )
    return None


@dataclass(frozen=True)
class Choice:
    encoder: str  # GIGATOKEN, TIKTOKEN, or the tokenizer's kind (its own library)
    why: str  # one line for the user


#: The faster encoders, tried in this order; the first that passes `check` encodes (gigatoken_encoder.py says why
#: gigatoken comes first).
FASTER = (GIGATOKEN, TIKTOKEN)


def _build(name: str, path: str | Path, reference: tokenizers.Encoder) -> tokenizers.Encoder | str:
    return gigatoken_encoder.build(path, reference) if name == GIGATOKEN else build(path, reference)


#: The encoder `choose` chose last, with its tokenizer's path and fingerprint: `load` hands this very object to the
#: shards of the same run (and fork hands it to the workers), already loaded and warm from the check, instead of each
#: worker loading the tokenizer again and encoding its first shard cold. One slot: a process that prepares with many
#: tokenizers keeps only the last.
_CHOSEN: dict[str, tuple[str, str, str, tokenizers.Encoder]] = {}


def choose(
    path: str | Path, sample: list[str], threads: int = 1, meanwhile: Optional[Callable[[], None]] = None
) -> Choice:
    """The encoder `data prepare` uses for the tokenizer at `path`: the first of FASTER that passes `check` on
    `sample` (the reference encoding on `threads` threads, once for all), else the tokenizer's own library; with
    the reasons, in one line. `meanwhile` runs on this thread while the reference encodes, before any candidate."""
    from concurrent.futures import ThreadPoolExecutor

    _CHOSEN.clear()
    reference = tokenizers.load(path)
    fingerprint = tokenizers.fingerprint(path)
    reasons = []
    with ThreadPoolExecutor(1) as background:
        expected = background.submit(_on_threads, reference, list(sample), threads)
        # What holds the GIL (the shards' cut) goes here, beside the reference (which encodes without it), and not
        # beside a candidate: gigatoken takes the GIL back for every document, and next to a thread that held it,
        # it encoded the sample 60x slower (0.3 s -> 19 s, measured).
        if meanwhile is not None:
            meanwhile()
        for name in FASTER:
            candidate = _build(name, path, reference)
            if isinstance(candidate, str):
                reasons.append(f"no {name}: {candidate}")
                continue
            difference = check(reference, candidate, sample, added_tokens(path), threads, expected)
            if difference is None:
                _CHOSEN["last"] = (os.path.abspath(path), name, fingerprint, candidate)
                chars = sum(len(t) for t in sample)
                also = f" ({'; '.join(reasons)})" if reasons else ""
                why = f"encoding with {name}: the same ids as {reference.kind} on {chars:,} characters{also}"
                return Choice(name, why)
            reasons.append(f"{name} gives other ids ({difference})")
    _CHOSEN["last"] = (os.path.abspath(path), reference.kind, fingerprint, reference)
    return Choice(reference.kind, f"encoding with {reference.kind}: {'; '.join(reasons)}")


def load(path: str | Path, encoder: str, fingerprint: Optional[str] = None) -> tokenizers.Encoder:
    """The encoder `choose` chose for the tokenizer at `path`: the object `choose` checked when it was for this path,
    encoder and `fingerprint` (the plan's), else a new one."""
    chosen = _CHOSEN.get("last")
    if chosen is not None and fingerprint is not None and chosen[:3] == (os.path.abspath(path), encoder, fingerprint):
        return chosen[3]
    reference = tokenizers.load(path)
    if encoder not in FASTER:
        return reference
    built = _build(encoder, path, reference)
    if isinstance(built, str):  # the tokenizer changed since the choice; the plan's fingerprint stops that first
        raise RuntimeError(f"{encoder} was chosen for {path} but cannot be built: {built}")
    return built
