"""`nemo-recipes watch RUN --follow` on live runs: a real `smoke --dir` run followed while it trains, one killed with
SIGKILL (stalled, then failed), a Slurm job requeued mid-run, a stall whose writer lives (hung), Ctrl-C, and what
is not a run. One smoke run at a time (the default 20 steps of the scaled-down gpt_1_3b)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from _cli import ENV, SCRIPT, cli


def _start_smoke(run: Path) -> subprocess.Popen:
    # Its own session, so that the test can kill the whole tree as a machine's crash or the OOM killer would.
    return subprocess.Popen(
        [SCRIPT, "smoke", "gpt_1_3b", "--dir", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
        start_new_session=True,
    )


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _watch(run: Path, *args: str, seconds: float = 300):
    """`watch --follow` started now; yields (line, seconds since start) as it prints, then its exit code."""
    watch = subprocess.Popen(
        [SCRIPT, "watch", str(run), "--follow", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    timer = threading.Timer(seconds, watch.kill)  # a bounded wait even if the watcher never ends
    timer.start()
    return watch, timer


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.mark.nemo
@pytest.mark.slow
def test_watch_follows_a_smoke_run_while_it_trains(tmp_path):
    run = tmp_path / "run"
    smoke = _start_smoke(run)
    try:
        _wait_for(lambda: (run / "train.log").exists(), 120, "the smoke run's first log")
        watch, timer = _watch(run)
        shown, live = [], []
        for line in watch.stdout:
            if line.startswith("step "):
                shown.append(int(line.split()[1].split("/")[0]))
                live.append(smoke.poll() is None)  # the run still training when the step was shown
        code = watch.wait()
        timer.cancel()
        assert code == 0, watch.stderr.read()
        assert smoke.wait(timeout=300) == 0
    finally:
        _kill(smoke)
    trained = [
        r["step"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if line.strip()
        for r in [json.loads(line)]
        if r.get("event") == "step"
    ]
    assert shown == sorted(set(trained)) == list(range(1, 21))  # every step trained, shown once, in order
    # Shown as they landed: the first phase's steps appeared while the run was still going (its resume phase alone
    # takes 15 s or more of start-up). A phase's 10 steps take under a second, shorter than the watcher's 2 s poll,
    # so "before the phase logged its 10th step" was a race the CI lost once under load.
    assert live[0] and sum(live) >= 10, live


@pytest.mark.nemo
@pytest.mark.slow
def test_a_run_killed_with_sigkill_shows_as_stalled_then_failed(tmp_path):
    run = tmp_path / "run"
    smoke = _start_smoke(run)
    try:
        # --stall-after counts from the watch's start too: begin once the first step is logged.
        _wait_for(lambda: "global_step" in _text(run / "train.log"), 180, "the smoke run's first step")
        watch, timer = _watch(run, "--stall-after", "3", seconds=240)
        lines = []
        for line in watch.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("step ") and smoke.poll() is None:
                _kill(smoke)  # at the first step shown: the run dies mid-training
        code = watch.wait()
        timer.cancel()
    finally:
        _kill(smoke)
    flags = [line.strip() for line in lines if line.startswith("  ! ")]
    stalled = next(i for i, f in enumerate(flags) if f.startswith("! stalled: no new step for"))
    failed = next(i for i, f in enumerate(flags) if f.startswith("! failed: stalled after step"))
    assert stalled < failed and "no process on this machine holds its log" in flags[failed]
    assert code == 1
    last = max(int(line.split()[1].split("/")[0]) for line in lines if line.startswith("step "))
    assert any(line.startswith(f"watch {run} (gpt_1_3b): step {last}/20 (failed)") for line in lines), lines


@pytest.mark.parametrize(
    "args", [["--follow", "--stall-after", "0"], ["--follow", "--stall-after", "nan"], ["--stall-after", "60"]]
)
def test_a_bad_stall_bound_is_refused(args, tmp_path):
    (tmp_path / "train.log").write_text("")
    result = cli("watch", str(tmp_path), *args)
    assert result.returncode == 2 and "--stall-after" in result.stderr, result.stderr


def test_following_what_is_not_a_run_exits_2(tmp_path):
    """A directory without a log, a missing path and a job id Slurm does not know are refused at once; a log of
    another format once its stall bound passes with no process writing it."""
    (tmp_path / "notes.txt").write_text("not a log\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "job.log").write_text("epoch 1 loss 2.3\n" * 5)
    started = time.monotonic()
    for target in (tmp_path, tmp_path / "missing", tmp_path / "other" / "job.log"):
        result = cli("watch", str(target), "--follow", "--stall-after", "1")
        assert result.returncode == 2, result.stderr
        assert "run" in result.stderr and "give the" in result.stderr, result.stderr
    assert "holds no NeMo progress line" in result.stderr
    # A job id that no job has: with Slurm here, Slurm's answer; without it, no such path (exit 2 either way).
    for args in (["999999999"], ["999999999", "--follow"]):
        result = cli("watch", *args)
        assert result.returncode == 2 and "run='999999999'" in result.stderr and "Fix:" in result.stderr
    # Bounded, not instant: Slurm's lookups of an unknown id take about 18 s on a loaded 2-core machine.
    assert time.monotonic() - started < 120


# The job replays, at a training run's pace, the progress lines NeMo 2.7.3 printed in the kept smoke run
# (tests/data/watch): real lines through a real Slurm job, its requeue and its output file, without another training
# run's minute in CI. A requeued run prints as a process resumed after step 2 would: steps 3 to 20.
REPLAY = """#!/bin/bash
#SBATCH --requeue
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then first=1; pace=1; else first=3; pace=0.2; fi
grep -h "Training epoch" {logs} | tail -n +$first | while IFS= read -r line; do echo "$line"; sleep $pace; done
"""


@pytest.mark.slurm
@pytest.mark.slow
def test_watch_follows_a_slurm_job_through_a_requeue(slurm_cluster, tmp_path):
    kept = Path(__file__).parent / "data" / "watch" / "smoke_gpt_1_3b"
    script = tmp_path / "replay.sh"
    script.write_text(REPLAY.format(logs=f"{kept / 'train.log'} {kept / 'resume.log'}"))
    account = os.environ.get("SLURM_ACCOUNT", "ci")
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--account={account}",
            "--mem=200M",
            "--time=5",
            f"--chdir={tmp_path}",
            f"--output={tmp_path / 'job.out'}",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        watch, timer = _watch(Path(job), seconds=240)
        lines, requeued = [], False
        for line in watch.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("step 4/") and not requeued:
                subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True)
                requeued = True
                # Slurm holds a requeued job back (BeginTime, ~2 min); start it now, not in the requeue's own
                # second (slurmd refuses a credential of the second it revoked the job's), as test_slurm_training.
                time.sleep(2.5)
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True)
        code = watch.wait()
        timer.cancel()
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    assert code == 0, (lines, watch.stderr.read())
    steps = [int(line.split()[1].split("/")[0]) for line in lines if line.startswith("step ")]
    flags = [line.strip() for line in lines if line.startswith("  ! ")]
    assert steps[0] == 1 and steps[-1] == 20 and 3 in steps[steps.index(4) + 1 :], steps  # resumed after step 2
    assert any(f.startswith("! requeued by Slurm after step") and f"of job {job}" in f for f in flags), flags
    assert any(f.startswith("! restart: the run had reached step") and "resumed after step 2" in f for f in flags)
    assert any(line.startswith(f"watch {job}: step 20/20 (finished)") for line in lines), lines


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_stops_the_watch_cleanly(signum, code, tmp_path):
    kept = Path(__file__).parent / "data" / "watch" / "smoke_gpt_1_3b" / "train.log"
    log = tmp_path / "train.log"
    with open(log, "w") as writer:  # this process holds the log: a live run for the watcher
        writer.write(kept.read_text())
        writer.flush()
        watch, timer = _watch(log, seconds=60)
        shown = [watch.stdout.readline() for _ in range(10)]
        assert shown[0].startswith("step 1/20") and shown[-1].startswith("step 10/20"), shown
        time.sleep(1)  # waiting for the next step, as a watch spends nearly all its time
        watch.send_signal(signum)
        assert watch.wait(timeout=30) == code
        timer.cancel()
    err = watch.stderr.read()
    assert f"stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err, err


KEPT = Path(__file__).parent / "data" / "watch" / "smoke_gpt_1_3b"


def test_a_log_is_read_in_whole_lines_and_again_from_its_start_when_rewritten(tmp_path):
    from nemo_recipes.watching.follow import Tail

    lines = [line + "\n" for line in (KEPT / "train.log").read_text().splitlines() if "Training epoch" in line]
    log = tmp_path / "job.out"
    log.write_text(lines[0] + lines[1][:40])  # the second line half written
    tail = Tail(log)
    assert [line.step for line in tail.read()] == [1]
    with open(log, "a") as handle:
        handle.write(lines[1][40:])
    assert [line.step for line in tail.read()] == [2] and tail.read() == []
    # A requeue truncates the file and the new run writes past the old offset before the next look.
    log.write_text("".join(lines[2:6]))
    assert [line.step for line in tail.read()] == [3, 4, 5, 6]
    assert [[line.step for line in process] for process in tail.processes()] == [[1, 2], [3, 4, 5, 6]]


def test_a_finished_run_followed_ends_at_once_and_json_keeps_stdout_for_the_report(tmp_path):
    result = cli("watch", str(KEPT), "--follow", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["follow"] == {"state": "finished", "flags": []} and report["figures"]["step"] == 20
    assert [line.split()[1] for line in result.stderr.splitlines() if line.startswith("step ")] == [
        f"{n}/20" for n in range(1, 21)
    ]


def test_a_stall_whose_writer_lives_is_followed_then_reported_hung(tmp_path):
    log = tmp_path / "train.log"
    with open(log, "w") as writer:  # this process holds the log and writes no further step
        writer.write((KEPT / "train.log").read_text())
        writer.flush()
        started = time.monotonic()
        watch, timer = _watch(log, "--stall-after", "0.5", seconds=60)
        out, err = watch.communicate()
        timer.cancel()
    flags = [line.strip() for line in out.splitlines() if line.startswith("  ! ")]
    assert watch.returncode == 1, err
    assert flags[0].startswith("! stalled: no new step for") and "after step 10/20" in flags[0]
    assert flags[1].startswith("! hung: stalled after step 10/20") and "stopped watching" in flags[1]
    assert time.monotonic() - started < 30  # 4 bounds of 0.5 s, and the start
