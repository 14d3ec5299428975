"""Signals end every verb the same way (cli/_signals.py): the verb unwinds, the command says which signal stopped it
and exits 128 + its number; and the smoke launcher's `stop_tree` stops a process tree whose members sit in sessions
of their own (as torchrun's workers do), escalating to SIGKILL for a process that ignores SIGTERM. Real signals, real
processes; the training itself is stopped in tests/test_smoke_signals.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from nemo_recipes.cli import ls
from nemo_recipes.cli.main import main
from nemo_recipes.smoke_training.launchers import alive, descendants, stop_tree

pytestmark = pytest.mark.serial  # signals sent to this process, and stops timed


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopping_signal_unwinds_the_verb_and_exits_with_its_code(signum, monkeypatch, capsys):
    unwound = []

    def verb(args):
        try:
            os.kill(os.getpid(), signum)
            time.sleep(30)  # the signal arrives here
        finally:
            unwound.append(True)  # a launcher stops its processes at this point
        return 0

    monkeypatch.setattr(ls, "run", verb)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    started = time.monotonic()
    assert main(["ls"]) == 128 + signum
    assert time.monotonic() - started < 10 and unwound == [True]
    assert capsys.readouterr().err == f"nemo-recipes ls: stopped by {signal.Signals(signum).name}\n"
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers in place before come back


TREE = r"""
import os, signal, subprocess, sys, time
# Like torchrun: children in sessions of their own; the last one ignores SIGTERM, as a stuck worker may.
for ignore in ("0", "0", "1"):
    subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
        "if sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True); time.sleep(300)", ignore], start_new_session=True)
time.sleep(300)
"""


def test_stop_tree_stops_children_in_their_own_sessions_and_kills_the_stubborn():
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(descendants(root.pid)) < 3:
            assert time.monotonic() < deadline, "the tree did not start"
            time.sleep(0.1)
        time.sleep(1)  # the children's own signal handlers are in place
        tree = [root.pid, *descendants(root.pid)]
        assert len({os.getpgid(pid) for pid in tree}) == 4  # four process groups: one killpg reaches one of them
        started = time.monotonic()
        stop_tree([root.pid], grace=2.0)
        took = time.monotonic() - started
        root.wait(timeout=5)
        assert [pid for pid in tree if alive(pid)] == []
        assert 2.0 <= took < 8  # the stubborn one waited out the grace, then was killed
    finally:
        for pid in [root.pid, *descendants(root.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
