"""`nemo-recipes show NAME [key=value ...]`: every value of one recipe, derived ones too, with the source of each."""

from __future__ import annotations

import argparse

from nemo_recipes.catalog import DERIVED_SOURCES, FAMILIES, RecipeSpec, fields_of, get_recipe
from nemo_recipes.catalog import source as source_of
from nemo_recipes.cli import _output
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.overrides import apply_overrides
from nemo_recipes.plan.layout import Layout, derived_values
from nemo_recipes.text_table import human_value, render

HELP = VERBS["show"].help
EXAMPLES = """\
  nemo-recipes show gpt_70b
  nemo-recipes show gpt_70b tensor_parallel=4 pipeline_parallel=8 num_nodes=8   # overridden values are marked
  nemo-recipes show gpt_7b --json | jq .derived.grad_accumulation_steps.value"""

# Shown in the title line rather than as rows: they name the recipe, they are not choices.
_TITLE_FIELDS = ("name", "size_label")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "show",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ".",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", metavar="NAME", help="a recipe name, as listed by `nemo-recipes ls`")
    parser.add_argument(
        "overrides",
        metavar="key=value",
        nargs="*",
        default=[],
        help="change fields before showing, e.g. tensor_parallel=4 (names as in this table)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON: {recipe, size_label, overrides, fields{name: {value, source, overridden}}, "
        "derived{name: {value, how}}}",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    base = get_recipe(args.recipe)
    spec, overrides = apply_overrides(base, args.overrides)

    fields = {}
    for name in fields_of(spec):
        if name in _TITLE_FIELDS:
            continue
        value, original = getattr(spec, name), getattr(base, name)
        overridden = name in overrides
        source = f"override (recipe: {human_value(original)})" if overridden else source_of(base, name)
        fields[name] = {"value": value, "source": source, "overridden": overridden}
    values = derived_values(spec)
    derived = {name: {"value": values[name], "how": how} for name, how in DERIVED_SOURCES.items()}

    if args.json:
        _output.print_json(
            {
                "recipe": spec.name,
                "size_label": spec.size_label,
                "overrides": overrides,
                "fields": fields,
                "derived": derived,
            }
        )
        return _output.EXIT_OK

    print(
        f"{spec.name}: {FAMILIES[spec.family]} {spec.size_label}, "
        f"{_output.human_count(spec.num_parameters)} parameters "
        f"({spec.num_parameters:,}), default cluster {spec.num_nodes} x {spec.num_gpus_per_node} "
        f"{spec.default_gpu}"
    )
    if spec.num_moe_experts is not None:
        print(f"{experts_line(spec)}")
    print()
    print(
        render(
            ["field", "value", "source"],
            [
                [("* " if f["overridden"] else "") + name, human_value(f["value"]), source]
                for (name, f), source in zip(fields.items(), sources_once(fields), strict=True)
            ],
            wrap_last=True,
        )
    )
    print()
    print(
        render(
            ["derived", "value", "how"],
            [[name, human_value(d["value"]), d["how"]] for name, d in derived.items()],
            wrap_last=True,
        )
    )
    if overrides:
        print("\n* overridden on the command line")
    return _output.EXIT_OK


def experts_line(spec: RecipeSpec) -> str:
    """A Mixture of Experts' active count and expert layout, under `show`'s title line."""
    layout, experts, ep = Layout.of(spec), spec.num_moe_experts or 0, spec.expert_parallel
    held = (
        f"{experts // ep} expert{'s' if experts // ep > 1 else ''} per GPU"
        if experts % ep == 0
        else "experts do not divide over EP"
    )
    return (
        f"  Mixture of Experts: {_output.human_count(spec.active_parameters)} active parameters a token "
        f"({spec.active_parameters:,}), top-{spec.moe_router_topk} of {experts} experts; "
        f"EP {spec.expert_parallel} x ETP {spec.expert_tensor_parallel_size} ({held}), expert-data-parallel "
        f"{layout.expert_data_parallel}"
    )


def sources_once(fields: dict[str, dict]) -> list[str]:
    """The source column (of `show`, and of the docs' recipe reference) with each source written out once, on the
    first field it covers: a source that covers several fields (a paper's table gives the whole shape) would
    otherwise fill the screen with the same lines."""
    first: dict[str, str] = {}
    column = []
    for name, f in fields.items():
        source = f["source"]
        column.append(f"same as {first[source]}" if source in first else source)
        first.setdefault(source, name)
    return column
