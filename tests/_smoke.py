"""What the smoke-training tests print when a run does not do what they expect: the report, the lines of each phase
log that say why a process died, and each log's tail."""

from __future__ import annotations

import re
from pathlib import Path

#: A process that aborts (gloo's enforce in its I/O thread, an allocation that fails) says why once, far above a tail
#: that the other ranks' tracebacks fill when torchrun stops them.
_FATAL = re.compile(r"terminate called|what\(\):|enforce fail|Fatal Python error|Signal \d+|Segmentation|Killed|Error:")


def explain(report, tail: int = 4000, fatal_lines: int = 40) -> str:
    parts = [report.format()]
    for phase, log in report.logs.items():
        if not Path(log).exists():
            continue
        text = Path(log).read_text(errors="replace")
        fatal = [line for line in text.splitlines() if _FATAL.search(line)][:fatal_lines]
        if fatal:
            parts.append(f"--- {phase} log (why processes died) ---\n" + "\n".join(fatal))
        parts.append(f"--- {phase} log (tail) ---\n" + text[-tail:])
    return "\n".join(parts)
