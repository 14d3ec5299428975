"""Local tokenizers: recognise one (kind, fingerprint, vocabulary, end-of-document id), load it for fast batch
encoding, or train one offline.

Nothing is ever downloaded: a tokenizer is a path on disk (a Hugging Face tokenizer directory or its
`tokenizer.json`, or a SentencePiece `.model`). `tokenizers`, `sentencepiece` and `transformers` are imported inside
the functions that need them, so that the planner can call `fingerprint` on the fast path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional

from nemo_recipes.data.manifest import TokenizerInfo, umask
from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.user_paths import not_regular

FIELD = "tokenizer_path"
HUGGINGFACE = "huggingface"
SENTENCEPIECE = "sentencepiece"
KINDS = (HUGGINGFACE, SENTENCEPIECE)

#: The files of a Hugging Face tokenizer directory that decide how it tokenizes; the fingerprint covers these and
#: nothing else (a model's weights in the same directory do not change the tokenizer).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
)
#: End-of-document tokens by the names common tokenizers give them, tried in this order when no configuration names
#: an `eos_token` (a bare tokenizer.json).
EOD_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eos|>", "[SEP]", "<|im_end|>")

#: The token our trained Hugging Face tokenizers end documents with (GPT-2's name for it).
TRAINED_EOD = "<|endoftext|>"
#: Default vocabulary of `--train-tokenizer`: 32,000 is what Llama 1/2 and Mistral train with, large enough for
#: English and code at a reasonable compression, small enough for uint16 tokens (half the disk of int32) and a modest
#: embedding. On a small corpus BPE stops earlier, when no pair is left to merge.
DEFAULT_VOCAB_SIZE = 32000
#: The smallest trained vocabulary: the 256 bytes, the special tokens and some merges.
MIN_VOCAB_SIZE = 260
#: The largest: far above any vocabulary in use (256K); the Rust trainer aborts the whole process (SIGABRT) near 10^12.
MAX_VOCAB_SIZE = 1 << 22

_HF_FIX = (
    "give a Hugging Face tokenizer directory (with tokenizer.json, or tokenizer_config.json and its vocabulary "
    "files), a tokenizer.json, or a SentencePiece .model file; or drop tokenizer_path and use --train-tokenizer."
)


def _error(path: Any, why: str, fix: str = _HF_FIX) -> InvalidConfigError:
    return InvalidConfigError([Problem(FIELD, str(path), why, fix)], context="tokenizer")


def _offline() -> None:
    # A local directory needs no hub, and a slip (a name instead of a path) must fail here, not download.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def tokenizer_files(path: str | Path) -> list[Path]:
    """The files that make the tokenizer at `path`: itself when a file, else its TOKENIZER_FILES present."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise _error(path, "no such file or directory.")
    problem = None if path.is_dir() else not_regular(path, FIELD, _HF_FIX)
    if problem is not None:  # a pipe, a socket, a device: never opened
        raise InvalidConfigError([problem], context="tokenizer")
    wrong = [p for p in (not_regular(path / name, FIELD, _HF_FIX) for name in TOKENIZER_FILES) if p is not None]
    if wrong:  # a pipe named tokenizer.json would block the tokenizer library's open()
        raise InvalidConfigError(wrong, context="tokenizer")
    files = [path / name for name in TOKENIZER_FILES if (path / name).is_file()]
    if not files:
        raise _error(path, f"the directory holds none of a tokenizer's files ({', '.join(TOKENIZER_FILES)}).")
    return files


def canonical(path: str | Path) -> Path:
    """`path` as recipes give it to NeMo: absolute (against this process's working directory, `~` expanded), and a
    Hugging Face `tokenizer.json` named by itself becomes its directory, since NeMo's AutoTokenizer loads a
    directory (the own-data guide allows either). Anything else, unreadable paths included, is only made absolute."""
    absolute = Path(path).expanduser().absolute()
    try:
        if absolute.name == "tokenizer.json" and absolute.is_file():
            return absolute.parent
    except OSError:  # too long a name, a loop: the checks that follow report it
        pass
    return absolute


def wrote(written: TokenizerInfo, info: TokenizerInfo) -> bool:
    """Whether `info` encodes as the tokenizer a manifest records (`written`) did: the same fingerprint; or data
    prepared from DIR/tokenizer.json read with DIR (or the reverse), that file unchanged since, with the same
    vocabulary and end-of-document id."""
    if written.fingerprint == info.fingerprint:
        return True
    if canonical(written.path) != canonical(info.path) or (written.vocab_size, written.eod_id) != (
        info.vocab_size,
        info.eod_id,
    ):
        return False
    try:
        return fingerprint(written.path) == written.fingerprint
    except (InvalidConfigError, OSError):
        return False


def fingerprint(path: str | Path) -> str:
    """ "sha256:<hex>" over the tokenizer's files: a file's bytes; for a directory the sorted names and bytes of its
    tokenizer files (TOKENIZER_FILES). Standard library only."""
    path = Path(path)
    digest = hashlib.sha256()
    files = tokenizer_files(path)
    for file in sorted(files, key=lambda f: f.name):
        if path.is_dir():
            digest.update(file.name.encode("utf-8") + b"\0")
        with open(file, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return f"sha256:{digest.hexdigest()}"


def kind_of(path: str | Path) -> str:
    """HUGGINGFACE or SENTENCEPIECE, from the files at `path`."""
    path = Path(path)
    if path.is_file():
        return SENTENCEPIECE if path.suffix == ".model" else HUGGINGFACE
    files = {f.name for f in tokenizer_files(path)}
    hf = {"tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt"}
    if files & hf:
        return HUGGINGFACE
    return SENTENCEPIECE  # only tokenizer.model / spiece.model


class Encoder:
    """A loaded tokenizer: `encode_batch`, `decode`, `vocab_size`, `eod_id`, whatever its library."""

    kind: str
    vocab_size: int
    eod_id: int

    def encode_batch(self, texts: list[str]) -> list[list[int]]:  # pragma: no cover  (abstract)
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:  # pragma: no cover  (abstract)
        raise NotImplementedError


class _HuggingFace(Encoder):
    kind = HUGGINGFACE

    def __init__(self, backend: Any, eod_id: int):
        self._backend = backend
        self.vocab_size = int(backend.get_vocab_size(with_added_tokens=True))
        self.eod_id = eod_id

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # No BOS/EOS from the tokenizer's template: documents are separated by the EOD we append, as Megatron's
        # GPT datasets expect (and as NeMo's AutoTokenizer.text_to_ids encodes).
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return str(self._backend.decode(list(ids), skip_special_tokens=False))


class _SentencePiece(Encoder):
    kind = SENTENCEPIECE

    def __init__(self, processor: Any, eod_id: int):
        self._processor = processor
        self.vocab_size = int(processor.get_piece_size())
        self.eod_id = eod_id

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # One thread: the parallelism is the worker processes'.
        return self._processor.encode(texts, out_type=int, num_threads=1)

    def decode(self, ids: Iterable[int]) -> str:
        return str(self._processor.decode([int(i) for i in ids]))


def _token_name(value: Any) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _configured_eos(directory: Path) -> Optional[str]:
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        file = directory / name
        if file.is_file():
            try:
                token = _token_name(json.loads(file.read_text(encoding="utf-8")).get("eos_token"))
            except (ValueError, AttributeError):
                raise _error(directory, f"{name} is not a JSON object.") from None
            if token:
                return token
    return None


def _load_huggingface(path: Path) -> _HuggingFace:
    _offline()
    from tokenizers import Tokenizer

    file = path if path.is_file() else path / "tokenizer.json"
    try:
        if file.is_file():
            backend = Tokenizer.from_file(str(file))
        else:
            # A directory of vocabulary files without tokenizer.json (a "slow" tokenizer): transformers converts it
            # to the fast backend, locally.
            from transformers import AutoTokenizer

            backend = AutoTokenizer.from_pretrained(str(path), use_fast=True, local_files_only=True).backend_tokenizer
    except Exception as error:  # every library has its own exception for a file it cannot parse
        raise _error(path, f"not a Hugging Face tokenizer: {type(error).__name__}: {str(error)[:200]}") from None
    eos = _configured_eos(path) if path.is_dir() else None
    candidates = [eos] if eos else list(EOD_NAMES)
    for name in candidates:
        token_id = backend.token_to_id(name)
        if token_id is not None:
            return _HuggingFace(backend, int(token_id))
    raise _error(
        path,
        f"no end-of-document token: {'eos_token ' + repr(eos) + ' is not in the vocabulary' if eos else 'none of ' + ', '.join(EOD_NAMES) + ' is in the vocabulary, and no tokenizer_config.json names an eos_token'}.",  # noqa: E501
        "use a tokenizer with an end-of-sequence token (set eos_token in its tokenizer_config.json), or "
        "--train-tokenizer.",
    )


def _load_sentencepiece(path: Path) -> _SentencePiece:
    import sentencepiece

    file = path if path.is_file() else next(f for f in tokenizer_files(path) if f.suffix == ".model")
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.Load(str(file))
    except Exception as error:  # sentencepiece raises OSError or RuntimeError depending on the damage
        raise _error(path, f"not a SentencePiece model: {str(error)[:200]}") from None
    if processor.eos_id() < 0:
        raise _error(
            path,
            "the SentencePiece model has no end-of-sentence piece (eos_id is -1), so documents cannot be ended.",
            "train it with eos_id set (SentencePiece's default is 2), or use --train-tokenizer.",
        )
    return _SentencePiece(processor, int(processor.eos_id()))


def load(path: str | Path) -> Encoder:
    """The tokenizer at `path`, ready to encode; InvalidConfigError (field tokenizer_path) when it is not one."""
    path = Path(path)
    kind = kind_of(path)
    return _load_huggingface(path) if kind == HUGGINGFACE else _load_sentencepiece(path)


def describe(path: str | Path) -> TokenizerInfo:
    """Kind, fingerprint, full vocabulary and end-of-document id of the local tokenizer at `path`."""
    path = Path(path).absolute()
    encoder = load(path)
    return TokenizerInfo(
        path=str(path),
        kind=encoder.kind,
        fingerprint=fingerprint(path),
        vocab_size=encoder.vocab_size,
        eod_id=encoder.eod_id,
    )


def train(
    texts: Iterable[str], out_dir: str | Path, *, vocab_size: int = DEFAULT_VOCAB_SIZE, kind: str = HUGGINGFACE
) -> Path:
    """Train a tokenizer on `texts`, offline, and write it into `out_dir`; return the path to give as
    tokenizer_path: `out_dir/tokenizer/` (a Hugging Face directory that transformers' and NeMo's AutoTokenizer load)
    or `out_dir/tokenizer.model` (SentencePiece). Written under a temporary name and renamed: a tokenizer that is
    there is complete. The same texts give the same files."""
    if kind not in KINDS:
        raise InvalidConfigError(
            [Problem("tokenizer_kind", kind, "unknown tokenizer kind.", f"use one of {', '.join(KINDS)}.")]
        )
    whole = isinstance(vocab_size, int) and not isinstance(vocab_size, bool)
    if not whole or not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise InvalidConfigError(
            [
                Problem(
                    "vocab_size",
                    vocab_size,
                    f"a trained vocabulary holds {MIN_VOCAB_SIZE:,} to {MAX_VOCAB_SIZE:,} entries (the 256 bytes, "
                    "the special tokens and some merges, at least).",
                    f"give e.g. {DEFAULT_VOCAB_SIZE}.",
                )
            ]
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if kind == HUGGINGFACE:
        return _train_huggingface(texts, out_dir, vocab_size)
    return _train_sentencepiece(texts, out_dir, vocab_size)


def _train_huggingface(texts: Iterable[str], out_dir: Path, vocab_size: int) -> Path:
    _offline()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Byte-level BPE (GPT-2's scheme): every string encodes, with no unknown token and no normalisation, so
    # decode(encode(text)) == text.
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[TRAINED_EOD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    # The two small files transformers' AutoTokenizer reads besides tokenizer.json, written here rather than through
    # transformers (whose import costs seconds): the class to build and which token ends a document.
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": TRAINED_EOD,
        "eos_token": TRAINED_EOD,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 30,
    }
    final = out_dir / "tokenizer"
    staging = Path(tempfile.mkdtemp(prefix=".tokenizer.", dir=out_dir))
    staging.chmod(0o777 & ~umask())  # mkdtemp's directory is private; the tokenizer is not
    try:
        backend.save(str(staging / "tokenizer.json"))
        (staging / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        specials = {"bos_token": TRAINED_EOD, "eos_token": TRAINED_EOD}
        (staging / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _train_sentencepiece(texts: Iterable[str], out_dir: Path, vocab_size: int) -> Path:
    import io

    import sentencepiece

    from nemo_recipes.data.manifest import write_atomic

    model = io.BytesIO()
    try:
        _sentencepiece_train(sentencepiece, texts, model, vocab_size)
    except RuntimeError as error:  # SentencePiece reports a vocabulary below its alphabet this way
        raise InvalidConfigError(
            [Problem("vocab_size", vocab_size, f"SentencePiece refused it: {str(error)[-160:]}", "give a larger one.")]
        ) from None
    return write_atomic(out_dir / "tokenizer.model", model.getvalue())


def _sentencepiece_train(sentencepiece: Any, texts: Iterable[str], model: Any, vocab_size: int) -> None:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,  # no unknown token: any byte encodes
        character_coverage=1.0,
        # Text as it is: no NFKC, newlines and runs of spaces kept (poetry, code), so decode(encode(text)) == text.
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        user_defined_symbols=["\n"],
        hard_vocab_limit=False,  # a small corpus gets a smaller vocabulary instead of an error
        num_threads=1,  # deterministic
        minloglevel=2,
        max_sentence_length=1 << 16,
    )
