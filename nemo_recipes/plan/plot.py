"""Pictures of a plan for `nemo-recipes plan --plot FILE`: memory per GPU against capacity, tokens/s against GPUs.

Imports matplotlib (with the non-interactive Agg backend) only when called, so the planner and the CLI stay light;
matplotlib is the `plot` extra (`pip install 'nemo-recipes[plot]'`). Plain numbers in, a file out: the CLI passes
the planner's report as data, so this module does not depend on the planner's classes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nemo_recipes.errors import Problem

#: The pictures `plan --plot` and `watch --plot` (watching/plot.py) draw; matplotlib picks the format by suffix.
IMAGE_SUFFIXES = (".png", ".svg")

# Bottom to top, as a user reads them: what the model is, then what training adds.
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other")
_COLOURS = {
    "weights": "#4C72B0",
    "gradients": "#55A868",
    "optimizer": "#C44E52",
    "activations": "#8172B2",
    "other": "#937860",
}


def image_suffix(path: str) -> str:
    """The suffix of a picture file we draw (lower case); a ValueError for any other."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in IMAGE_SUFFIXES:
        raise ValueError(f"plot file must end in .png or .svg, not {suffix or 'nothing'!r}")
    return suffix


def image_problems(field: str, path: str, example: str) -> list[Problem]:
    """What is wrong with `path` as a --plot file (named `field`), checked before anything is computed: nothing for
    a picture we draw; `example` names the file in the fix."""
    if os.path.splitext(path)[1].lower() in IMAGE_SUFFIXES:
        return []
    return [Problem(field, path, "must be a .png or .svg file.", f"name the file {example}.png or {example}.svg.")]


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend, SVG text kept as text: imported here, when a picture
    is drawn, so that the planner and `watch` stay light."""
    import matplotlib

    matplotlib.use("Agg")  # no display on clusters and CI; must precede pyplot
    from matplotlib import pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # SVG text stays text: searchable, and checkable by tests
    return plt


@dataclass(frozen=True)
class ScalingPoint:
    """One cluster size of the tokens/s curve."""

    gpus: int
    tokens_per_s: float
    planned: bool = False  # the cluster of the plan itself, highlighted


def plot_plan(
    path: str, *, title: str, memory_gib: dict, scaling: Optional[Sequence[ScalingPoint]] = None, dpi: int = 120
) -> str:
    """Write the picture to `path` (PNG or SVG, by extension) and return the path.

    `memory_gib` holds the parts in MEMORY_PARTS plus `capacity` (None when no GPU is known). `scaling`, when
    given, adds a second panel: total tokens/s against GPU count, with linear scaling from the smallest point
    drawn dashed for comparison.
    """
    suffix = image_suffix(path)
    plt = pyplot()
    panels = 2 if scaling else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 5.0), squeeze=False)
    _memory_panel(axes[0][0], memory_gib)
    if scaling:
        _scaling_panel(axes[0][1], list(scaling))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    # Without a date in the SVG metadata, the same plan draws the same file.
    metadata = {"Date": None} if suffix == ".svg" else {}
    fig.savefig(path, dpi=dpi, format=suffix[1:], metadata=metadata)
    plt.close(fig)
    return path


def _memory_panel(ax, memory_gib: dict) -> None:
    # One stacked bar on the left, its legend in the free space to its right, the capacity as a line across both.
    total = float(memory_gib.get("total") or sum(float(memory_gib.get(p) or 0.0) for p in MEMORY_PARTS))
    capacity = memory_gib.get("capacity")
    top = max(total, float(capacity or 0.0)) * 1.1
    bottom = 0.0
    for part in MEMORY_PARTS:
        value = float(memory_gib.get(part) or 0.0)
        ax.bar([0], [value], bottom=bottom, color=_COLOURS[part], width=0.6, label=f"{part}: {value:.1f} GiB")
        if value >= 0.06 * top:  # label only the parts drawn tall enough to hold it (the legend has every value)
            ax.text(0, bottom + value / 2, f"{value:.1f}", ha="center", va="center", color="white", fontsize=9)
        bottom += value
    fits = capacity is None or total <= capacity
    if capacity:
        ax.axhline(
            capacity,
            color="black" if fits else "red",
            linestyle="--",
            linewidth=1.5,
            label=f"GPU capacity: {capacity:.1f} GiB",
        )
        verdict = f"{total:.1f} of {capacity:.1f} GiB ({100 * total / capacity:.0f} %)" + ("" if fits else ", OOM")
    else:
        verdict = f"{total:.1f} GiB (no GPU given)"
    ax.set_xlim(-0.5, 2.0)
    ax.set_xticks([0], ["per GPU"])
    ax.set_ylim(0, top)
    ax.set_ylabel("GiB per GPU")
    ax.set_title(f"memory per GPU: {verdict}", fontsize=10, color="black" if fits else "red")
    ax.legend(loc="center right", fontsize=8)


def _scaling_panel(ax, points: list[ScalingPoint]) -> None:
    points.sort(key=lambda p: p.gpus)
    gpus = [p.gpus for p in points]
    tokens = [p.tokens_per_s for p in points]
    ax.plot(gpus, tokens, marker="o", color="#4C72B0", label="estimated tokens/s")
    ideal = [tokens[0] * g / gpus[0] for g in gpus]
    ax.plot(gpus, ideal, linestyle=":", color="grey", label=f"linear from {gpus[0]} GPUs")
    for point in points:
        if point.planned:
            ax.plot(
                [point.gpus],
                [point.tokens_per_s],
                marker="*",
                markersize=16,
                color="#C44E52",
                linestyle="",
                label=f"this plan: {point.gpus} GPUs, {point.tokens_per_s:,.0f} tokens/s",
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus, [str(g) for g in gpus])
    ax.set_xlabel("GPUs (same global batch; data parallelism grows)")
    ax.set_ylabel("tokens/s (whole cluster)")
    ax.yaxis.set_major_formatter(_count_formatter())
    ax.set_title("throughput against cluster size", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)


def _count_formatter():
    from matplotlib.ticker import FuncFormatter

    def short(value: float, _position: int) -> str:
        for suffix, scale in (("M", 1e6), ("k", 1e3)):
            if abs(value) >= scale:
                return f"{value / scale:g}{suffix}"
        return f"{value:g}"

    return FuncFormatter(short)
