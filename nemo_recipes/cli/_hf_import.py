"""`nemo-recipes hf import`: a Hugging Face model as a checkpoint a recipe's training starts from (`restore_from=`).

Imports nothing heavy until it runs (the import reads safetensors with torch and writes Megatron's checkpoint).
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from nemo_recipes.cli import _output
from nemo_recipes.families import REGISTRY

EXAMPLES = """\
  nemo-recipes hf import models/llama-1b llama_8b --out ckpt/llama-1b     # the shape from its config.json
  nemo-recipes hf import models/gpt2 gpt_1_3b tensor_parallel=2 --out ckpt/gpt2 --json
  nemo-recipes smoke llama_8b KEY=VALUE... restore_from=ckpt/llama-1b     # what the import prints: train from it"""


def families_as_classes() -> str:
    """Each family's rows and the Hugging Face class they convert to, from the families' registry."""
    return ", ".join(f"{f.display_name} rows as {f.hf.architecture}" for f in REGISTRY.values() if f.hf is not None)


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "import",
        help="write a Hugging Face model as a checkpoint a recipe starts from (restore_from=)",
        description=textwrap.fill(
            f"Write a Hugging Face model directory (the class of RECIPE's family: {families_as_classes()}) "
            "as a checkpoint of RECIPE in Megatron's format, which smoke, launch and plan start from with "
            "restore_from=CHECKPOINT (weights only: a fresh optimizer and schedule). The shape comes from the "
            "model's config.json, the rest (layout, optimizer, schedule) from the recipe and the key=value items. "
            "Every mismatch is reported before anything is written; written beside --out and renamed into place.",
            width=116,
        ),
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("hf_dir", metavar="HF_DIR", help="the Hugging Face model directory (config.json, safetensors)")
    parser.add_argument("recipe", metavar="RECIPE", help="the recipe whose training starts from the model")
    parser.add_argument(
        "overrides",
        metavar="key=value",
        nargs="*",
        default=[],
        help="recipe fields (layout such as tensor_parallel=2); a shape field must agree with config.json",
    )
    parser.add_argument("--out", required=True, metavar="CHECKPOINT", help="the checkpoint directory to write")
    parser.add_argument("--force", action="store_true", help="replace the content of a --out that is not empty")
    parser.add_argument("--json", action="store_true", help="print JSON: {out, recipe, overrides, ...}")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.conversion.hf_import import import_hf
    from nemo_recipes.conversion.write_errors import ExportWriteError
    from nemo_recipes.overrides import apply_overrides
    from nemo_recipes.quiet import library_notices_silenced

    spec, given = apply_overrides(get_recipe(args.recipe), args.overrides)
    try:
        with library_notices_silenced():  # torch's and Megatron-Core's import notices, on a command that succeeds
            report = import_hf(args.hf_dir, spec, args.out, given=given, force=args.force)
    except ExportWriteError as error:
        raise _output.CLIError(f"hf import: {str(error)}") from None
    if args.json:
        _output.print_json({**report.to_dict(), "continue_with": report.continue_with()})
        return _output.EXIT_OK
    print(f"hf import: {report.source} ({report.architecture}) as a {report.recipe} checkpoint in {report.out}")
    print(f"  parameters  {report.parameters:,} (the vocabulary padded as Megatron pads it)")
    for note in report.notes:
        print(f"  note        {note}")
    print(f"  train it    nemo-recipes smoke {report.recipe} {report.continue_with()}", file=sys.stdout)
    print(f"  plan it     nemo-recipes plan {report.recipe} {report.continue_with()}")
    return _output.EXIT_OK
