"""A plan as text: the one rendering of a planner report, printed by `nemo-recipes plan` and returned by
`PlanReport.summary()` (so `print(report)`) in the Python API.

It reads the report's JSON form (`PlanReport.to_dict()`, plus the keys `plan` adds: `calibration`, `plot`) and the
spec the report describes, so that the text and `--json` cannot say two things. The two callers differ only in how
they name the planner's actions: the CLI writes `--fit` and `--best`, the Python API `fit()` and `best()`.
Standard library only.
"""

from __future__ import annotations

import shutil
import textwrap
from typing import Any, Mapping, Sequence

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.counts import human_count
from nemo_recipes.text_table import human_value, render


def plan_text(
    report: Mapping[str, Any],
    spec: RecipeSpec,
    *,
    changed_by: str,
    faster: str,
    data: Sequence[str] = (),
) -> str:
    """The plan of `report` (its `to_dict()` form) for `spec`: verdict and layout, the data files, memory per GPU,
    throughput and time to train, assumptions, changes (made by `changed_by`), advice (a faster plan, as `faster`
    finds it), problems. `data` is what the data files say, one line each."""
    c, p = report["cluster"], report["parallelism"]
    verdict = "valid" if report["valid"] else "INVALID"
    gpu = c["gpu"] or "GPUs"
    lines = [
        f"{report['recipe']} on {c['nodes']} x {c['gpus_per_node']} {gpu} ({c['world_size']} GPUs): {verdict}",
        f"  {human_count(spec.num_parameters)} parameters; TP {p['tp']} x PP {p['pp']} x CP {p['cp']} "
        f"x DP {p['dp']}" + (f", VP {p['vp']}" if p["vp"] else "") + f", sequence parallel "
        f"{'on' if p['sp'] else 'off'}, recompute {spec.recompute}, {spec.precision}",
        f"  micro batch {p['micro_batch_size']}, global batch {p['global_batch_size']}, gradient accumulation "
        f"{p['grad_accumulation']}, sequence {spec.seq_length}",
    ]

    if data:
        lines += ["", "data"] + [_wrapped(text) for text in data]

    memory = report["memory_gib"]
    if memory:
        lines += ["", "memory per GPU (GiB, most loaded pipeline stage)"]
        rows = [[part, f"{memory[part]:.1f}"] for part in ("weights", "gradients", "optimizer", "activations", "other")]
        total = f"{memory['total']:.1f}"
        if memory.get("capacity"):
            cap = memory["capacity"]
            share = 100 * memory["total"] / cap
            total += f"  of {cap:.1f} ({share:.0f} %)" + ("" if memory["total"] <= cap else "  DOES NOT FIT")
        rows.append(["total", total])
        lines.append(render(["part", "GiB"], rows, right=[False, False], indent="  ").split("\n", 1)[1])

    t = report["throughput"]
    if t:
        lines += ["", "throughput (estimate)"]
        rows = [
            ["step time", f"{t['step_time_s']:.2f} s"],
            ["tokens/s", f"{t['tokens_per_s']:,.0f} ({t['tokens_per_s_per_gpu']:,.0f} per GPU)"],
            ["model TFLOP/s per GPU", f"{t['model_tflops_per_gpu']:.0f} (MFU {100 * t['mfu']:.1f} %)"],
        ]
        terms = t.get("terms_s") or {}
        if terms and t["step_time_s"] > 0:
            shares = [(name, 100 * seconds / t["step_time_s"]) for name, seconds in terms.items()]
            rows.append(["dominant term", f"{_term(shares[0][0])} ({shares[0][1]:.0f} % of the step)"])
            rows.append(
                ["step by term", ", ".join(f"{_term(name)} {share:.0f} %" for name, share in shares if share >= 0.5)]
            )
        timing = report.get("time_to_train")
        if timing:
            rows.append(
                [
                    f"time to train {human_count(timing['tokens'])} tokens",
                    f"{timing['days']:.1f} days, {timing['gpu_hours']:,.0f} GPU-hours",
                ]
            )
        lines.append(render(["what", "value"], rows, indent="  ").split("\n", 1)[1])
    elif report["valid"]:
        lines += ["", "throughput: no estimate available"]

    assumptions = _assumptions(report)
    if report.get("calibration"):
        assumptions = [report["calibration"]["note"], *assumptions]
    if assumptions:
        lines += ["", "assumptions"] + [_wrapped(text) for text in assumptions]

    if report["changes"]:
        lines += ["", f"changes made by {changed_by}"]
        lines += [_wrapped(f"{', '.join(moves)} ({why})") for why, moves in _grouped(report["changes"])]
    if report.get("advice"):
        lines += ["", "advice"] + [_wrapped(f"{advice_text(a)} (see {faster})") for a in report["advice"]]
    if report["problems"]:
        lines += ["", "problems"]
        lines += [
            _wrapped(f"{pr['severity']}: {pr['field']}={pr['value']!r}: {pr['message']} Fix: {pr['fix']}")
            for pr in report["problems"]
        ]
    if report.get("plot"):
        lines += ["", f"plot written to {report['plot']}"]
    return "\n".join(lines)


def change_move(change: Mapping[str, Any]) -> str:
    """One change (`Change.to_dict()`) without its reason: 'tensor_parallel: 8 -> 4'."""
    return f"{change['field']}: {human_value(change['from'])} -> {human_value(change['to'])}"


def advice_text(advice: Mapping[str, Any]) -> str:
    """One piece of advice (`Advice.to_dict()`): what to change, the predicted step times, and why."""
    changes = " ".join(f"{k}={human_value(v)}" for k, v in advice["changes"].items())
    memory = "" if advice.get("memory_gib") is None else f", {advice['memory_gib']:.1f} GiB per GPU"
    return (
        f"{changes} is predicted {advice['speedup']:.2f}x faster ({advice['current_step_time_s']:.3g} s -> "
        f"{advice['step_time_s']:.3g} s per step{memory}); {advice['why']}"
    )


def _grouped(changes: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """Changes that share one reason, together: 'tensor_parallel: 8 -> 4, micro_batch_size: 1 -> 2 (why)'."""
    groups: dict[str, list[str]] = {}
    for change in changes:
        groups.setdefault(change["why"], []).append(change_move(change))
    return list(groups.items())


def _term(name: str) -> str:
    """A step term (`throughput.STEP_TERMS`) as words."""
    return name.replace("_", " ").replace("per step", "per-step cost")


def _assumptions(report: Mapping[str, Any]) -> list[str]:
    """What the estimates take for granted, so a reader can judge them: the program both memory and throughput
    describe (stack, attention kernel, overlaps) and the rest of the throughput model's list."""
    program = report.get("program") or {}
    texts = list(program.get("notes", []))
    seen = set(texts)
    texts += [text for text in (report.get("throughput") or {}).get("assumptions", []) if text not in seen]
    return texts


def _wrapped(text: str) -> str:
    """One bullet folded to the terminal width, continuation lines indented under it."""
    width = max(60, shutil.get_terminal_size((100, 24)).columns - 1)
    return textwrap.fill(text, width, initial_indent="  - ", subsequent_indent="    ")
