"""The picture of `watch RUN --plot FILE`: loss against step, and throughput against step beside the plan's.

matplotlib, as `plan --plot` draws (plan/plot.py): the `plot` extra, imported only when called (Agg backend), so
`watch` without --plot stays text only on a login node. Each process (a restart, a requeue, a smoke phase) is its own
line, so that a resume shows where it began; every line carries an SVG id (`loss-process-N`,
`throughput-process-N`, `throughput-plan`) for a reader, and a test, to find it."""

from __future__ import annotations

from typing import Any, Optional

from nemo_recipes.plan.plot import image_suffix, pyplot


def plot_run(path: str, title: str, figures: dict[str, Any], plan: Optional[dict[str, Any]], dpi: int = 120) -> str:
    """Write the picture of `figures` (Figures.to_dict()) and, where given, the plan beside it (against_plan's
    dict) to `path` (PNG or SVG, by extension); return the path."""
    image_suffix(path)
    plt = pyplot()
    fig, (loss_axis, rate_axis) = plt.subplots(1, 2, figsize=(13.0, 5.0))
    tokens = figures.get("tokens_per_step")
    gpus = figures.get("num_gpus") or 1
    processes = _processes(figures)
    for number, rows in enumerate(processes, 1):
        label = f"process {number} (steps {rows[0]['step']}-{rows[-1]['step']})"
        losses = [(r["step"], r["loss"]) for r in rows if r["loss"] is not None]
        if losses:
            (line,) = loss_axis.plot(*zip(*losses, strict=True), marker=".", label=label)
            line.set_gid(f"loss-process-{number}")
        rates = [(r["step"], _rate(r["step_time_s"], tokens, gpus)) for r in rows if r["step_time_s"]]
        if rates:
            (line,) = rate_axis.plot(*zip(*rates, strict=True), marker=".", label=label)
            line.set_gid(f"throughput-process-{number}")
    loss_axis.set(xlabel="step", ylabel="loss", title="loss (logged, mean over each interval)")
    rate_axis.set(
        xlabel="step",
        ylabel="tokens/s per GPU" if tokens else "step time (s)",
        title="throughput" if tokens else "step time (no recipe: no tokens/s)",
    )
    planned = _planned(plan, bool(tokens))
    if planned is not None:
        line = rate_axis.axhline(planned, linestyle="--", color="black", label=f"plan on {plan['gpu']}")  # type: ignore[index]
        line.set_gid("throughput-plan")
    for axis in (loss_axis, rate_axis):
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
    return path


def _processes(figures: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The logged rows of each process, by the segments' line counts (figures keeps them in that order)."""
    rows, out, start = figures["logged"], [], 0
    for segment in figures["segments"]:
        out.append(rows[start : start + segment["lines"]])
        start += segment["lines"]
    return [p for p in out if p]


def _rate(step_time_s: float, tokens: Optional[int], gpus: int) -> float:
    return tokens / step_time_s / gpus if tokens else step_time_s


def _planned(plan: Optional[dict[str, Any]], per_gpu: bool) -> Optional[float]:
    if plan is None:
        return None
    row = plan["figures"]["tokens_per_s_per_gpu" if per_gpu else "step_time_s"]
    return row["planned"]
