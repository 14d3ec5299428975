"""`nemo-recipes hf export`: a checkpoint a recipe trained, as a Hugging Face model directory.

Imports nothing heavy until the sub-verb runs (export reads the checkpoint with torch and writes with transformers).
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from nemo_recipes.cli import _hf_import, _output
from nemo_recipes.cli._hf_import import families_as_classes
from nemo_recipes.cli.verbs import VERBS

HELP = VERBS["hf"].help
EXPORT_EXAMPLES = """\
  nemo-recipes hf export runs/smoke1 --out models/smoke1           # a `smoke --dir` run: its last checkpoint
  nemo-recipes hf export CKPT_DIR --out hf/ --recipe gpt_7b hidden_size=2048   # a job's: the recipe it trained
  nemo-recipes hf export runs/smoke1 --out models/smoke1 --force --json
  nemo-recipes hf import models/llama-1b llama_8b --out ckpt/llama-1b   # and back: restore_from=ckpt/llama-1b"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hf",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ".",
        epilog=_output.epilog(EXPORT_EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="hf_verb", metavar="SUBVERB", parser_class=type(parser))
    verbs.required = True
    export = verbs.add_parser(
        "export",
        help="write a trained checkpoint as a Hugging Face model (safetensors, config.json, tokenizer)",
        description=textwrap.fill(
            "Write the checkpoint a recipe trained (any TP/PP/VP/DP layout) as a directory that transformers "
            f"loads offline with AutoModelForCausalLM.from_pretrained(DIR): {families_as_classes()}; the weights "
            "as safetensors, the vocabulary without Megatron's padding rows, "
            "and the tokenizer the data was prepared with. Read one layer at a time; written beside --out and "
            "renamed into place at the end.",
            width=116,
        ),
        epilog=_output.epilog(EXPORT_EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="a checkpoint directory (holding weights/), its weights/, or a run directory (its last checkpoint)",
    )
    export.add_argument("--out", required=True, metavar="DIR", help="the Hugging Face model directory to write")
    export.add_argument(
        "--recipe",
        metavar="NAME",
        default=None,
        help="the recipe the checkpoint trained (default: the one a `smoke --dir` run or `hf import` records)",
    )
    export.add_argument(
        "overrides",
        metavar="key=value",
        nargs="*",
        default=[],
        help="with --recipe: the overrides it trained with (shape fields such as hidden_size=2048)",
    )
    export.add_argument("--force", action="store_true", help="replace the content of a --out that is not empty")
    export.add_argument(
        "--shard-size",
        type=_shard_size,
        default=None,
        metavar="SIZE",
        help="split the weights into safetensors files of at most this size (default 5G)",
    )
    export.add_argument("--json", action="store_true", help="print JSON: {out, recipe, architecture, files, ...}")
    export.set_defaults(run=run)
    _hf_import.register(verbs)


def _shard_size(text: str) -> int:
    value = _output.size_argument(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a shard holds at least one byte")
    return value


def run(args: argparse.Namespace) -> int:
    from nemo_recipes.conversion.hf_export import DEFAULT_SHARD_BYTES, export_hf
    from nemo_recipes.conversion.write_errors import ExportWriteError

    spec = None
    if args.recipe is not None:
        from nemo_recipes.catalog import get_recipe
        from nemo_recipes.overrides import apply_overrides

        spec, _ = apply_overrides(get_recipe(args.recipe), args.overrides)
    elif args.overrides:
        from nemo_recipes.errors import InvalidConfigError, Problem

        raise InvalidConfigError(
            [
                Problem(
                    "key=value",
                    " ".join(args.overrides),
                    "overrides apply to a recipe named with --recipe.",
                    "add --recipe NAME (the recipe the checkpoint trained), or leave the overrides out.",
                )
            ],
            context="hf export",
        )
    try:
        report = export_hf(
            args.checkpoint,
            args.out,
            spec,
            force=args.force,
            shard_bytes=args.shard_size or DEFAULT_SHARD_BYTES,
            progress=None if args.json else (lambda line: print(line, file=sys.stderr, flush=True)),
        )
    except ExportWriteError as error:
        raise _output.CLIError(f"hf export: {error}") from None
    if args.json:
        _output.print_json(report.to_dict())
        return _output.EXIT_OK
    print(f"hf export: {report.recipe} as {report.architecture} ({report.parameters:,} parameters) in {report.out}")
    print(f"  from      {report.checkpoint}")
    print(
        f"  files     {', '.join(report.files)}" + (", config.json, tokenizer" if report.tokenizer else ", config.json")
    )
    for note in report.notes:
        print(f"  note      {note}")
    print(f"  load it   AutoModelForCausalLM.from_pretrained({report.out!r})")
    return _output.EXIT_OK
