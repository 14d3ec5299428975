"""Progress of `data prepare` on stderr: a tqdm bar (MB/s, ETA, documents/s, tokens/s) on a terminal, a plain line
every few seconds otherwise (CI logs, files), nothing when silenced."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

from nemo_recipes.counts import human_count

#: Seconds between plain progress lines.
LINE_INTERVAL = 10.0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _rate(value: float) -> str:
    return human_count(value) if value >= 1000 else f"{value:.0f}"


class Progress:
    """Counts documents, input bytes and tokens as shards report them, and shows the rates."""

    def __init__(self, total_bytes: int, *, stream: Optional[TextIO] = None, mode: str = "auto", label: str = ""):
        self.stream = stream or sys.stderr
        self.total = max(total_bytes, 1)
        self.documents = self.bytes = self.tokens = 0
        self.label = label or "prepare"
        self.start = self._last_line = time.monotonic()
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self._bar: Any = None
        self._stopped: Optional[float] = None
        if mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, unit="B", unit_scale=True, desc=self.label, file=self.stream, dynamic_ncols=True
            )

    def update(self, documents: int, size: int, tokens: int) -> None:
        self.documents += documents
        self.bytes += size
        self.tokens += tokens
        now = time.monotonic()
        if self._bar is not None:
            self._bar.update(size)
            elapsed = max(now - self.start, 1e-9)
            self._bar.set_postfix_str(
                f"{_rate(self.documents / elapsed)} docs/s, {_rate(self.tokens / elapsed)} tokens/s",
                refresh=False,
            )
        elif self.mode == "lines" and now - self._last_line >= LINE_INTERVAL:
            self._last_line = now
            print(self.line(), file=self.stream, flush=True)

    def rates(self) -> dict[str, float]:
        elapsed = max((self._stopped or time.monotonic()) - self.start, 1e-9)
        return {
            "seconds": elapsed,
            "documents_per_s": self.documents / elapsed,
            "mb_per_s": self.bytes / elapsed / 1e6,
            "tokens_per_s": self.tokens / elapsed,
        }

    def line(self) -> str:
        rates = self.rates()
        done = min(self.bytes / self.total, 1.0)
        eta = rates["seconds"] * (1 - done) / done if done > 0 else 0.0
        return (
            f"{self.label}: {100 * done:.0f}% ({self.bytes / 1e6:,.1f}/{self.total / 1e6:,.1f} MB), "
            f"{rates['documents_per_s']:,.0f} documents/s, {rates['mb_per_s']:,.2f} MB/s, "
            f"{rates['tokens_per_s']:,.0f} tokens/s, ETA {_duration(eta)}"
        )

    def close(self) -> None:
        """Stop the clock (the rates are those of the work counted) and the bar."""
        self._stopped = self._stopped or time.monotonic()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
