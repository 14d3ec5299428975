"""The options that name an executor's arguments and profiles file, shared by every verb that runs through one
(`launch`, `smoke`, `data prepare`), and the `-E` items read as the executor's arguments (`executor_args`), so that
`-E` and `--clusters` mean the same everywhere."""

from __future__ import annotations

from typing import Any

from nemo_recipes.overrides import read_yaml_values

CLUSTERS_HELP = "cluster profiles file (as for `launch`)"


def add_executor_arguments(parser: Any, *, example: str, clusters_help: str = CLUSTERS_HELP) -> None:
    """`-E key=value` (repeatable) and `--clusters FILE` on `parser` (a parser or an argument group)."""
    parser.add_argument(
        "-E",
        "--executor-arg",
        action="append",
        default=[],
        metavar="key=value",
        help=f"an argument of the preset or a change to the profile (repeatable), e.g. -E {example}",
    )
    parser.add_argument("--clusters", metavar="FILE", help=clusters_help)


def executor_args(items: list[str]) -> dict[str, Any]:
    """-E key=value items, values read as YAML scalars/lists (8 -> int, [a, b] -> list, true -> bool)."""
    return read_yaml_values(items, field="executor-arg", flag="-E ", example="nodes=4")
