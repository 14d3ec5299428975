"""Progress of `data prepare` on stderr: a tqdm bar with MB/s, ETA, documents/s and tokens/s on a terminal, plain
lines otherwise."""

from __future__ import annotations

import io

from nemo_recipes.data import progress
from nemo_recipes.data.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_with_every_rate_and_an_eta():
    stream = Terminal()
    bar = Progress(10_000_000, stream=stream)
    assert bar.mode == "bar"
    bar.update(100, 2_500_000, 50_000)
    bar._bar.refresh()
    bar.close()
    text = stream.getvalue()
    # tqdm scales the bytes per second (kB/s, MB/s, ...); the ETA follows the elapsed time after "<".
    assert "25%" in text and "B/s" in text and "docs/s" in text and " tokens/s" in text and "<" in text


def test_a_pipe_gets_plain_lines_with_the_same_figures(monkeypatch):
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)
    stream = io.StringIO()
    bar = Progress(4_000_000, stream=stream)
    assert bar.mode == "lines"
    bar.update(10, 1_000_000, 2_000)
    bar.close()
    [line] = stream.getvalue().splitlines()
    assert line.startswith("prepare: 25% (1.0/4.0 MB), ") and "documents/s" in line and "MB/s" in line
    assert "tokens/s" in line and "ETA " in line
    # After close the clock stops: the rates are those of the work counted.
    assert bar.rates() == bar.rates()


def test_silenced_progress_writes_nothing():
    stream = Terminal()
    bar = Progress(100, stream=stream, mode="none")
    bar.update(1, 100, 1)
    bar.close()
    assert stream.getvalue() == ""
