"""What the smoke-training tests print when a run does not do what they expect: the report and each phase log's tail."""

from __future__ import annotations

from pathlib import Path


def explain(report, tail: int = 4000) -> str:
    tails = [
        f"--- {phase} log (tail) ---\n" + Path(log).read_text(errors="replace")[-tail:]
        for phase, log in report.logs.items()
        if Path(log).exists()
    ]
    return "\n".join([report.format(), *tails])
