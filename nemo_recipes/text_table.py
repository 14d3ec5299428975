"""Plain-text tables: aligned columns, numbers right-aligned, and values as they read in a cell; standard library
only (rich would cost import time). The CLI's tables and a plan's text (`plan/rendering.py`) are drawn with it."""

from __future__ import annotations

import shutil
import textwrap
from typing import Any, Sequence


def render(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[bool] = (),
    indent: str = "",
    wrap_last: bool = False,
) -> str:
    """Columns separated by two spaces; `right[i]` right-aligns column i (numbers).

    `wrap_last` folds the last column (long prose such as sources) to the terminal width, continuation lines
    aligned under it, so that tables stay readable in an 80-column terminal.
    """
    right = list(right) + [False] * (len(headers) - len(right))
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lead = len(indent) + sum(w + 2 for w in widths[:-1])
    width = shutil.get_terminal_size((100, 24)).columns
    last_width = max(30, width - lead - 1)
    lines = []
    for n, row in enumerate(cells):
        parts = [row[i].rjust(widths[i]) if right[i] else row[i].ljust(widths[i]) for i in range(len(row) - 1)]
        last = row[-1]
        if wrap_last and n and len(last) > last_width:
            folded = textwrap.wrap(last, last_width) or [""]
            lines.append(indent + "  ".join(parts + [folded[0]]))
            lines += [" " * lead + piece for piece in folded[1:]]
        else:
            lines.append((indent + "  ".join(parts + [last.rjust(widths[-1]) if right[-1] else last])).rstrip())
    return "\n".join(lines)


def human_value(value: Any) -> str:
    """How a recipe value reads in a table: no quotes around strings, lists comma-separated, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(human_value(v) for v in value) if value else "(none)"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and abs(value) >= 10**6:
        return f"{value:,}".replace(",", "_")
    return str(value)
