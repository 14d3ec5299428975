"""The generated pages of the docs, drawn from the code when the docs build, so that no table is typed twice.

Each page is read from a public name of the package (the catalog's `RECIPES`, `recipe_names()` and `source()`, the
CLI's parser, the exit codes and error classes, the planner's `GPUS`), never from a copy, so a recipe, a verb, an
option or a GPU that the code has is in the docs, and one it loses leaves them. `write_pages(out)` writes every
page; Sphinx calls it through `setup` before reading the sources; `tests/test_docs.py` checks its output. Run as a
script, it prints the recipe table for README.md (`python docs/_ext/reference.py readme-table`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # Sphinx loads this file by path; the package is the checkout's
    sys.path.insert(0, str(REPO))

#: The generated Markdown pages (under docs/reference/generated/) and the plots (under docs/_generated/).
PAGES = ("recipes", "fields", "cli", "errors", "gpus")
PLOTS = {
    "plan_gpt_70b.png": ["plan", "gpt_70b", "--plot"],
    "smoke_loss.png": ["watch", "tests/data/watch/smoke_gpt_1_3b", "--plot"],
}


def cell(text: Any) -> str:
    """A value as it reads in a Markdown table cell: no line breaks, `|` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def recipe_table() -> str:
    """The table `nemo-recipes ls` prints, as Markdown (README.md's and the docs' front page's)."""
    from nemo_recipes.catalog import RECIPES
    from nemo_recipes.cli.ls import table as ls_table

    headers, rows = ls_table(list(RECIPES.values()))
    return table(headers, [[f"`{row[0]}`", *row[1:]] for row in rows])


def recipes_page() -> str:
    """Every recipe: every field with its value and source (as `show` prints them), every derived value and how."""
    from nemo_recipes.catalog import DERIVED_SOURCES, FAMILIES, field_names, get_recipe, recipe_names, source
    from nemo_recipes.cli.show import sources_once
    from nemo_recipes.plan.layout import derived_values
    from nemo_recipes.text_table import human_value

    out = [
        "# Recipes",
        "",
        "Generated from the catalog when the docs build (`nemo_recipes.catalog.RECIPES` and `catalog.source`): the "
        "same values and sources as `nemo-recipes show NAME`, whose `--json` gives them as data. A source that covers "
        "several fields is written once, on the first of them.",
        "",
        recipe_table(),
    ]
    for name in recipe_names():
        spec = get_recipe(name)
        fields = {f: {"source": source(spec, f)} for f in field_names() if f not in ("name", "size_label")}
        values = derived_values(spec)
        out += [
            "",
            f"## `{name}`",
            "",
            f"{FAMILIES[spec.family]} {spec.size_label}: {spec.num_parameters:,} parameters; default cluster "
            f"{spec.num_nodes} x {spec.num_gpus_per_node} {spec.default_gpu}. In Python: "
            f"`nemo_recipes.{name}(...)`; on NeMo's CLI: `nemo llm pretrain --factory {name}`.",
            "",
            table(
                ["field", "value", "source"],
                [
                    [f"`{f}`", f"`{human_value(getattr(spec, f))}`", src]
                    for f, src in zip(fields, sources_once(fields), strict=True)
                ],
            ),
            "",
            table(
                ["derived", "value", "how"],
                [[f"`{d}`", f"`{human_value(values[d])}`", how] for d, how in DERIVED_SOURCES.items()],
            ),
        ]
    return "\n".join(out) + "\n"


def fields_page() -> str:
    """Every recipe field, from the one table of fields (`nemo_recipes.recipe_fields`): section, meaning, bounds,
    where NeMo keeps it, and where its default comes from."""
    from nemo_recipes.recipe_fields import RECIPE_FIELDS, SECTIONS

    def bounds(field: Any) -> str:
        return ", ".join(f"{limit.op} {limit.value:g}" for limit in field.limits) or "its type"

    def nemo(field: Any) -> str:
        if not field.nemo:
            return f"none: {field.not_in_nemo}"
        paths = ", ".join(f"`{path}`" for path in field.nemo)
        return paths + (f" (conversion `{field.conversion}`)" if field.conversion else "")

    out = [
        "# Recipe fields",
        "",
        "Generated from `nemo_recipes.recipe_fields.RECIPE_FIELDS` when the docs build: every field a recipe has, "
        "what it means, the range `plan` and the factories accept (a value outside is refused with the field, the "
        "value and the fix), the NeMo-Run configuration paths it is written to (and read back from), and the source "
        "of its default (a row's own value has its family's source: `nemo-recipes show NAME`). Set any of them as "
        "`KEY=VALUE` on the command line or as a keyword argument of the recipe's factory.",
    ]
    for section in SECTIONS:
        rows = [f for f in RECIPE_FIELDS if f.section == section]
        out += [
            "",
            f"## {section}",
            "",
            table(
                ["field", "meaning", "bounds", "NeMo", "default's source"],
                [[f"`{f.name}`", f.help, bounds(f), nemo(f), f.source or "each row's own"] for f in rows],
            ),
        ]
    return "\n".join(out) + "\n"


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command of `nemo-recipes` with its parser: the top level, each verb and each sub-verb (`hf export`)."""
    from nemo_recipes.cli.main import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(command: str, parser: argparse.ArgumentParser) -> None:
        found.append((command, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(f"{command} {name}", sub)

    walk("nemo-recipes", build_parser())
    return found


def options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(how the argument is written, its help with defaults expanded) for each argument but -h and sub-commands."""
    formatter = parser._get_formatter()
    out = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
            written = ", ".join(f"{o}{metavar}" for o in action.option_strings)
        else:
            written = formatter._format_args(action, action.dest)
        help_text = formatter._expand_help(action) if action.help else ""
        out.append((written, help_text))
    return out


def cli_page() -> str:
    """Every verb, sub-verb and option, from the parser `nemo-recipes` itself parses with."""
    out = [
        "# Command line",
        "",
        "Generated from the parser of `nemo-recipes` (`nemo_recipes.cli.main.build_parser`, verbs listed by "
        "`nemo_recipes.cli.verbs.VERBS`) when the docs build: the same text as each `--help`. Exit codes and errors: "
        "[](errors.md).",
    ]
    for command, parser in parsers():
        level = "#" * min(2 + command.count(" ") - 1, 3) if " " in command else "##"
        out += ["", f"{level} `{command}`", ""]
        if parser.description:
            out += [" ".join(parser.description.split()), ""]
        out += ["```text", parser.format_usage().strip(), "```", ""]
        rows = options(parser)
        if rows:
            out += [table(["argument", "what it does"], [[f"`{w}`", h] for w, h in rows]), ""]
        if parser.epilog:
            out += ["```text", parser.epilog.strip(), "```"]
    return "\n".join(out) + "\n"


def errors_page() -> str:
    """The exit codes every verb shares and the classes of error the package raises, with their exit codes."""
    import nemo_recipes.data.sources  # noqa: F401  (defines InvalidDataError, a kind of InvalidInputError)
    from nemo_recipes import errors
    from nemo_recipes.cli import _output

    def classes(base: type) -> list[type]:
        found = [base]
        for sub in sorted(base.__subclasses__(), key=lambda c: c.__name__):
            found += classes(sub)
        return found

    def first_paragraph(doc: str | None) -> str:
        return " ".join((doc or "").split("\n\n")[0].split())

    rows = []
    for cls in classes(errors.NemoRecipesError):
        code = _output.EXIT_INVALID if issubclass(cls, errors.InputError) else _output.EXIT_FAILURE
        rows.append([f"`{cls.__module__}.{cls.__qualname__}`", code, first_paragraph(cls.__doc__)])
    aliases = [
        [f"`errors.{name}`", f"`{value.__name__}`"]
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.NemoRecipesError) and name != value.__name__
    ]
    return "\n".join(
        [
            "# Exit codes and errors",
            "",
            "Generated from `nemo_recipes/cli/_output.py` and `nemo_recipes/errors.py` when the docs build.",
            "",
            "## Exit codes",
            "",
            "Every verb ends with one of these (the end of each `--help` says the same):",
            "",
            "```text",
            _output.EXIT_CODES_EPILOG.strip(),
            "```",
            "",
            "A refused input prints one message with the field, the value and the fix, never a traceback "
            "(`nemo-recipes --debug ...` or `NEMO_RECIPES_DEBUG=1` shows it, with the same exit code).",
            "",
            "## The errors",
            "",
            "```text",
            (errors.__doc__ or "").strip(),
            "```",
            "",
            "Each class the package defines under `NemoRecipesError` (those of the CPU compatibility layer and of "
            "the smoke launcher are kinds of `InputError` too, defined beside the code that raises them):",
            "",
            table(["class", "exit code", "what it means"], rows),
            "",
            "Deprecated names, the same classes:",
            "",
            table(["name", "is"], aliases),
        ]
    )


def gpus_page() -> str:
    """The GPUs the planner knows, every figure it plans with, and the aliases accepted for them."""
    from nemo_recipes.plan.hardware import ALIASES, GPUS

    def shown(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, tuple):
            return ".".join(map(str, value))
        return f"{value:g}" if isinstance(value, float) else str(value)

    columns = [
        ("GPU", "name"),
        ("memory GiB", "memory_gib"),
        ("BF16 TFLOP/s", "bf16_tflops"),
        ("FP8 TFLOP/s", "fp8_tflops"),
        ("HBM TB/s", "hbm_tb_s"),
        ("NVLink GB/s", "nvlink_gb_s"),
        ("network GB/s", "network_gb_s"),
        ("NVLink domain", "nvlink_domain"),
        ("compute capability", "compute_capability"),
        ("TDP W", "tdp_w"),
        ("SMs", "sm_count"),
    ]
    rows = [[f"`{gpu.name}`"] + [shown(getattr(gpu, key)) for _, key in columns[1:]] for gpu in GPUS.values()]
    return "\n".join(
        [
            "# GPUs",
            "",
            "Generated from the planner's table (`nemo_recipes/plan/hardware.py`, `GPUS`) when the docs build. "
            "`--gpu NAME` takes a name or an alias; describe your own with `nemo_recipes.plan.GPU(...)` "
            "(adding one to the table: [](../../design/extending.md)).",
            "",
            table([h for h, _ in columns], rows),
            "",
            table(
                ["GPU", "description"],
                [[f"`{gpu.name}`", gpu.description or "-"] for gpu in GPUS.values()],
            ),
            "",
            "Aliases:",
            "",
            table(["alias", "GPU"], [[f"`{a}`", f"`{g}`"] for a, g in ALIASES.items()]),
        ]
    )


def write_pages(out: Path) -> list[Path]:
    """Write every generated page into `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    makers = {"recipes": recipes_page, "fields": fields_page, "cli": cli_page, "errors": errors_page, "gpus": gpus_page}
    written = []
    for name in PAGES:
        path = out / f"{name}.md"
        path.write_text(makers[name]())
        written.append(path)
    (out / "recipe_table.md").write_text(recipe_table() + "\n")  # a fragment the front page includes
    return written


def draw_plots(out: Path) -> list[Path]:
    """The docs' pictures, drawn by the CLI's own `--plot` (plan's memory and tokens/s against GPUs; the loss curve
    of the smoke run kept in tests/data/watch/smoke_gpt_1_3b/, whose README says where it comes from)."""
    from nemo_recipes.cli.main import main

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, argv in PLOTS.items():
        path = out / name
        with contextlib.chdir(REPO), contextlib.redirect_stdout(io.StringIO()):
            code = main([*argv, str(path)])
        if code != 0 or not path.is_file():
            raise RuntimeError(f"nemo-recipes {' '.join(argv)} {path} exited {code} and drew nothing")
        written.append(path)
    return written


def _generate(app: Any) -> None:
    source = Path(app.srcdir)
    write_pages(source / "reference" / "generated")
    draw_plots(source / "_generated")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    if sys.argv[1:] != ["readme-table"]:
        sys.exit("usage: python docs/_ext/reference.py readme-table")
    print(recipe_table())
