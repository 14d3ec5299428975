"""`nemo-recipes ls`: the recipes as a table. Catalog only, so it answers at once."""

from __future__ import annotations

import argparse
from typing import Any

from nemo_recipes.catalog import RECIPES, RecipeSpec
from nemo_recipes.cli import _output
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.text_table import render

HELP = VERBS["ls"].help
EXAMPLES = """\
  nemo-recipes ls                 # the table
  nemo-recipes ls --names         # one name per line, for scripts and shell completion
  nemo-recipes ls --json | jq '.recipes[] | select(.tensor_parallel > 1) | .name'"""

# (header, JSON key / spec attribute): the seed's columns plus size, context parallelism and default cluster.
COLUMNS = (
    ("parameters", "num_parameters"),
    ("layers", "num_layers"),
    ("hidden", "hidden_size"),
    ("heads", "num_attention_heads"),
    ("TP", "tensor_parallel"),
    ("PP", "pipeline_parallel"),
    ("CP", "context_parallel"),
    ("micro BS", "micro_batch_size"),
    ("global BS", "global_batch_size"),
    ("seq", "seq_length"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ls",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ".",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--names", action="store_true", help="print only the recipe names, one per line")
    parser.add_argument("--json", action="store_true", help='print JSON: {"recipes": [{name, num_parameters, ...}]}')
    parser.set_defaults(run=run)


def row(spec: RecipeSpec) -> dict:
    """One recipe as JSON: stable keys, the seed's columns under the catalog's field names."""
    out: dict[str, Any] = {"name": spec.name, "size_label": spec.size_label}
    out.update({key: getattr(spec, key) for _, key in COLUMNS})
    out.update(num_nodes=spec.num_nodes, num_gpus_per_node=spec.num_gpus_per_node, default_gpu=spec.default_gpu)
    if spec.num_moe_experts is not None:  # a Mixture of Experts: its active count and expert layout
        out.update({key: getattr(spec, key) for key in EXPERT_KEYS})
    return out


#: The JSON keys of a Mixture-of-Experts row beyond every row's (a dense row's keys stay as they were).
EXPERT_KEYS = ("active_parameters", "num_moe_experts", "moe_router_topk", "expert_parallel", "expert_tensor_parallel")


def experts_cell(spec: RecipeSpec) -> str:
    """A Mixture of Experts' routing and expert layout, `top-2 of 8, EP 8 x ETP 1`; `-` for a dense model."""
    if spec.num_moe_experts is None:
        return "-"
    return (
        f"top-{spec.moe_router_topk} of {spec.num_moe_experts}, EP {spec.expert_parallel} x ETP "
        f"{spec.expert_tensor_parallel_size}"
    )


def run(args: argparse.Namespace) -> int:
    specs = list(RECIPES.values())
    if args.json:
        _output.print_json({"recipes": [row(s) for s in specs]})
    elif args.names:
        print("\n".join(s.name for s in specs))
    else:
        headers, rows = table(specs)
        print(render(headers, rows, right=[False] + [True] * (len(COLUMNS) + 1) + [False, False]))
    return _output.EXIT_OK


def table(specs: list[RecipeSpec]) -> tuple[list[str], list[list[str]]]:
    """The table `ls` prints, as headers and cells: the docs' recipe tables (README's too) are drawn from it."""
    headers = ["recipe", COLUMNS[0][0], "active"] + [h for h, _ in COLUMNS[1:]] + ["experts", "default GPUs"]
    rows = [
        [s.name, _output.human_count(s.num_parameters), _output.human_count(s.active_parameters)]
        + [str(getattr(s, key)) for _, key in COLUMNS[1:]]
        + [experts_cell(s), f"{s.num_nodes} x {s.num_gpus_per_node} {s.default_gpu}"]
        for s in specs
    ]
    return headers, rows
