"""`nemo-recipes data prepare|inspect`: your own text as Megatron training data, and a look inside it.

Imports nothing heavy until a sub-verb runs (prepare imports Megatron-Core, NumPy and the tokenizer library).
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from nemo_recipes.cli import _output, data_executor
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import InvalidConfigError, Problem

HELP = VERBS["data"].help
EXAMPLES = """\
  nemo-recipes data prepare corpus.jsonl.gz --out data/ --train-tokenizer          # tokenizer trained, then data
  nemo-recipes data prepare wiki/ books=shelf/*.txt --out data/ --tokenizer tok/    # two sources, a local tokenizer
  nemo-recipes data prepare dump.jsonl --key meta.content --skip-bad-lines --out data/ --tokenizer tok.model
  nemo-recipes data inspect data/corpus                                             # counts, manifest, a sample
  nemo-recipes data prepare corpus.jsonl --out data/ --tokenizer tok/ --json | jq '.[].tokens'"""
PREPARE_EXAMPLES = """\
  nemo-recipes data prepare corpus.jsonl.gz --out data/ --train-tokenizer --vocab-size 32000
  nemo-recipes data prepare wiki/ books=shelf/*.txt --out data/ --tokenizer path/to/hf-tokenizer-dir
  nemo-recipes data prepare dump.jsonl.zst --key meta.content --skip-bad-lines --out data/ --tokenizer tok.model
  nemo-recipes data prepare corpus.jsonl --out data/ --tokenizer tok/ --workers 8 --json"""
INSPECT_EXAMPLES = """\
  nemo-recipes data inspect data/corpus
  nemo-recipes data inspect data/wiki data/books --tokenizer data/tokenizer --json"""
EXIT_CODES = """\
exit codes:
  0  success
  1  failure outside the input (a bug, a worker that died)
  2  invalid input: a file that is empty, not UTF-8, malformed JSON, a missing key, a document over the length
     guard, an output directory that cannot be written or whose disk is full, two inputs with one prefix, a path
     that is not a tokenizer; for inspect, a token id not below the tokenizer's vocabulary"""
DOCUMENTS = """\
A document is one JSON line (its --key field) of a .jsonl/.json/.ndjson file, or one paragraph of a .txt/.md
file: lines up to a blank line. Files may be gzip (.gz) or zstd (.zst) compressed. A directory or glob is one
source of its files in sorted order; each source becomes one prefix, OUT/NAME (NAME: the input's stem, or
NAME=INPUT)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "data",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ".\n\n" + DOCUMENTS,
        epilog=f"examples:\n{EXAMPLES}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="data_verb", metavar="SUBVERB", parser_class=type(parser))
    verbs.required = True

    prepare = verbs.add_parser(
        "prepare",
        help="tokenize inputs into one Megatron indexed dataset per source, with its manifest",
        description=textwrap.fill(
            "Tokenize INPUTs into OUT/NAME.bin/.idx (Megatron-Core's indexed dataset format, one sequence per "
            "document, end-of-document token appended, uint16 when the vocabulary allows) and "
            "OUT/NAME.manifest.json, written last. Worker processes tokenize deterministic shards; each finished "
            "shard leaves a receipt, so a run that was killed resumes where it stopped, and an unchanged re-run does "
            "nothing (and says so). The output is byte-identical whatever the number of workers.",
            width=116,
        )
        + "\n\n"
        + DOCUMENTS,
        epilog=f"examples:\n{PREPARE_EXAMPLES}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prepare.add_argument("inputs", metavar="INPUT", nargs="+", help="a file, directory or glob; NAME=INPUT names it")
    prepare.add_argument("--out", required=True, metavar="DIR", help="the output directory (created)")
    which = prepare.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="a local tokenizer: a Hugging Face directory or tokenizer.json, or a SentencePiece .model (never "
        "downloaded)",
    )
    which.add_argument(
        "--train-tokenizer",
        action="store_true",
        help="train a byte-level BPE on a sample of the inputs, written to OUT/tokenizer/ (OUT/tokenizer.model "
        "with --tokenizer-kind sentencepiece)",
    )
    prepare.add_argument(
        "--vocab-size", type=int, metavar="N", help="vocabulary of the trained tokenizer (default 32000)"
    )
    prepare.add_argument(
        "--tokenizer-kind",
        choices=("huggingface", "sentencepiece"),
        default="huggingface",
        help="library of the trained tokenizer (default huggingface)",
    )
    prepare.add_argument(
        "--tokenizer-sample",
        type=_output.size_argument,
        default=None,
        metavar="SIZE",
        help="text sampled from the inputs to train the tokenizer (default 100M)",
    )
    prepare.add_argument("--key", default="text", help="the text's field of a JSON line; a dotted path for nested "
                         "fields (default text)")  # fmt: skip
    prepare.add_argument("--workers", type=int, metavar="N", help="worker processes (default: every core)")
    prepare.add_argument(
        "--max-document-chars",
        type=int,
        default=None,
        metavar="N",
        help="length guard: a longer document is an error, or skipped with --skip-bad-lines (default 10000000)",
    )
    prepare.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip (and count) lines that are not JSON or not UTF-8, lack the key, or exceed the length guard, "
        "instead of stopping at the first",
    )
    prepare.add_argument(
        "--shard-size",
        type=_output.size_argument,
        metavar="SIZE",
        help="input bytes per shard (default: about 1/8 of the input per worker, 1M to 64M)",
    )
    prepare.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "none"),
        default="auto",
        help="progress on stderr: a bar on a terminal, a line every 10 s otherwise (auto)",
    )
    prepare.add_argument("--json", action="store_true", help="print the manifests as a JSON list")
    data_executor.add_arguments(prepare)
    prepare.set_defaults(run=run_prepare)

    inspect = verbs.add_parser(
        "inspect",
        help="documents, tokens, dtype, manifest and a decoded sample of prepared datasets",
        description=textwrap.fill(
            "Show what each PREFIX holds (documents, tokens, dtype, the manifest, the start of its first document "
            "decoded) and check that every token id is below the tokenizer's vocabulary. The tokenizer is "
            "--tokenizer, else the manifest's when its files are unchanged.",
            width=116,
        ),
        epilog=f"examples:\n{INSPECT_EXAMPLES}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("prefixes", metavar="PREFIX", nargs="+", help="DIR/NAME as prepare printed it (no suffix)")
    inspect.add_argument("--tokenizer", metavar="PATH", help="check (and decode) with this tokenizer")
    inspect.add_argument("--sample-tokens", type=int, default=64, metavar="N", help="tokens of the sample (64)")
    inspect.add_argument("--json", action="store_true", help="print JSON: a list of {prefix, documents, ...}")
    inspect.set_defaults(run=run_inspect)


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def run_prepare(args: argparse.Namespace) -> int:
    from nemo_recipes.data import prepare

    if args.workers is not None and args.workers < 1:
        raise InvalidConfigError([Problem("workers", args.workers, "must be at least 1.", "give e.g. --workers 4.")])
    runner, ranks = data_executor.shard_runner(args)
    manifests = prepare.prepare(
        args.inputs,
        args.out,
        tokenizer_path=args.tokenizer,
        train_tokenizer=args.train_tokenizer,
        vocab_size=args.vocab_size,
        tokenizer_kind=args.tokenizer_kind,
        key=args.key,
        workers=ranks or args.workers,  # with --executor the ranks are the workers (the shards' size follows)
        shard_runner=runner,
        skip_bad_lines=args.skip_bad_lines,
        shard_bytes=args.shard_size,
        progress=args.progress,
        # 0 is refused there like any value below 1, not read as "the default".
        max_document_chars=_default(args.max_document_chars, prepare.DEFAULT_MAX_DOCUMENT_CHARS),
        tokenizer_sample_bytes=_default(args.tokenizer_sample, prepare.DEFAULT_TOKENIZER_SAMPLE_BYTES),
    )
    if args.json:
        _output.print_json([m.to_json() for m in manifests])
    else:
        for manifest in manifests:
            print(f"{args.out.rstrip('/')}/{manifest.prefix}")
    return _output.EXIT_OK


def run_inspect(args: argparse.Namespace) -> int:
    from nemo_recipes.data.inspect import errors, inspect

    if args.sample_tokens < 0:
        raise InvalidConfigError(
            [Problem("sample_tokens", args.sample_tokens, "must be 0 or more.", "give e.g. --sample-tokens 64.")]
        )
    results = [inspect(p, tokenizer_path=args.tokenizer, sample_tokens=args.sample_tokens) for p in args.prefixes]
    if args.json:
        _output.print_json([r.to_dict() for r in results])
    else:
        for result in results:
            print(
                f"{result.prefix}: {result.documents:,} documents, {result.tokens:,} tokens ({result.dtype}), "
                f"max token id {result.max_token_id:,}"  # fmt: skip
                + (f" of a vocabulary of {result.vocab_size:,}" if result.vocab_size else "")
            )
            if result.manifest:
                info = result.manifest.tokenizer
                print(f"  tokenizer: {info.kind} {info.path} ({info.fingerprint[:19]}...), EOD id {info.eod_id}")
                print(f"  inputs: {', '.join(i['path'] for i in result.manifest.inputs)}")
                print(f"  text: {result.manifest.text_bytes:,} bytes; written by {result.manifest.created_by}")
            if result.sample is not None:
                print(f"  sample: {result.sample!r}")
    problems = [p for r in results for p in r.problems]
    for problem in problems:
        print(f"{_output.PROG} data inspect: {problem}", file=sys.stderr)
    if any(errors(r) for r in results):
        return _output.EXIT_INVALID
    return _output.EXIT_OK
