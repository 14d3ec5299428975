"""A stopped `nemo-recipes smoke` leaves nothing running: SIGTERM (`timeout`, `kill`, `scancel`, a CI runner),
SIGINT (Ctrl-C) and SIGHUP (a closed terminal) stop the whole process tree (torchrun and its workers, each in a
session of its own), the command waits for it and exits 128 + the signal; killed outright (SIGKILL), it takes the
tree with it. The run's `--dir` is in the command line of every process of the run: that is how they are found."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _cli import ENV, SCRIPT

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (the workers import it)")

pytestmark = [pytest.mark.nemo, pytest.mark.slow, pytest.mark.serial]


def processes_of(marker: str) -> list[int]:
    """The processes whose command line names `marker`, this test's own excepted."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        pid = int(cmdline.parent.name)
        if marker in text and pid != os.getpid():
            try:
                if (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # dead, waiting to be reaped: it runs nothing
            except OSError:
                continue
            found.append(pid)
    return found


def start_smoke(directory: Path, processes: int, *extra: str) -> subprocess.Popen:
    # Its own session, as a CI runner or `timeout` would start it: a signal reaches the command, not the test.
    return subprocess.Popen(
        [SCRIPT, "smoke", "gpt_1_3b", "--processes", str(processes), "--dir", str(directory), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
    )


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)


def files_of(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*") if p.is_file()}


def test_sigterm_mid_training_stops_every_process_and_no_checkpoint_follows(tmp_path):
    """The case of the issue: `nemo-recipes smoke` (one worker) killed by SIGTERM while it trains (a step is
    recorded)."""
    directory = tmp_path / "run"
    smoke = start_smoke(directory, 1, "--steps", "400", "--stop-step", "300")
    metrics = directory / "metrics.jsonl"
    try:
        wait_for(lambda: metrics.exists() and '"step"' in metrics.read_text(), 400, "trained step")
        assert len(processes_of(str(directory))) >= 2  # the command and its worker
        smoke.send_signal(signal.SIGTERM)
        out, err = smoke.communicate(timeout=120)
    finally:
        if smoke.poll() is None:
            smoke.kill()
    assert smoke.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.rstrip().endswith("nemo-recipes smoke: stopped by SIGTERM") and out == ""
    assert processes_of(str(directory)) == []
    before = files_of(directory)
    time.sleep(5)
    assert files_of(directory) == before  # nothing trains or checkpoints after the command has ended
    assert not (directory / "resume.log").exists()  # the run stopped: no next phase was started


def test_sighup_while_torchrun_starts_stops_torchrun_and_its_workers(tmp_path):
    """torchrun starts each worker in a session of its own, out of reach of a signal to torchrun's group."""
    directory = tmp_path / "run"
    smoke = start_smoke(directory, 2)
    try:
        wait_for(lambda: len(processes_of(str(directory))) >= 4, 120, "torchrun with two workers")
        smoke.send_signal(signal.SIGHUP)
        _, err = smoke.communicate(timeout=120)
    finally:
        if smoke.poll() is None:
            smoke.kill()
    assert smoke.returncode == 128 + signal.SIGHUP, err[-3000:]
    assert err.rstrip().endswith("nemo-recipes smoke: stopped by SIGHUP")
    assert processes_of(str(directory)) == []


def test_a_killed_command_takes_its_training_processes_with_it(tmp_path):
    """SIGKILL reaches no handler: the kernel signals the launcher's child as its parent dies (parent-death signal;
    torchrun would pass it on to its workers)."""
    directory = tmp_path / "run"
    smoke = start_smoke(directory, 1, "--steps", "400", "--stop-step", "300")  # a phase of minutes
    try:
        wait_for(lambda: len(processes_of(str(directory))) >= 2, 120, "the worker")
        smoke.kill()
        smoke.communicate(timeout=30)
        wait_for(lambda: processes_of(str(directory)) == [], 20, "end of the orphaned processes")
    finally:
        for pid in processes_of(str(directory)):  # never leave them behind, even when the test fails
            os.kill(pid, signal.SIGKILL)
