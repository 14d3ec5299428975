"""Signals that end a command (SIGINT from Ctrl-C, SIGTERM from `timeout`, `kill`, `scancel` or a CI runner, SIGHUP
from a closed terminal) become one exception in the main thread, so that every verb unwinds: a smoke run stops its
training processes and waits for them (smoke_training/launchers.py), a followed job is cancelled. The command then
exits with the shell's code for that signal, 128 + its number.

Standard library only: every verb runs under it, `ls` too.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

#: The signals that stop a command; SIGKILL cannot be caught (the smoke launcher's children stop with it anyway).
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The command was asked to stop by `signum`. A KeyboardInterrupt, so that code which cleans up after Ctrl-C
    (ours, NeMo-Run's) cleans up after SIGTERM and SIGHUP alike."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within it, the first of `STOPPING` raises `Stopped`; later ones are ignored while the first is being handled
    (a second Ctrl-C or `timeout`'s repeated SIGTERM must not cut short the stopping of the processes). The previous
    handlers come back afterwards. Outside the main thread Python allows no handler: nothing changes there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Stopped(signum)

    previous = {signum: signal.signal(signum, handler) for signum in STOPPING}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
