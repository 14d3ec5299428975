"""Training and the ends of jobs on the real single-node Slurm cluster (`.ci/start-slurm.sh`), through the project's
own Slurm preset: the smoke training with a preemption in it, a job over its time limit, a job sbatch refuses, and
the preset's requeue settings as Slurm holds them.

The job over its time limit sleeps on one of the node's two CPUs while the training uses the other: it is submitted
by a module fixture before the training test and judged after it, so that its minute of waiting costs no CI time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
DIST_CHECK = REPO / "examples" / "dist_check.py"
ACCOUNT = os.environ.get("SLURM_ACCOUNT", "ci")
PARTITION = os.environ.get("SLURM_PARTITION") or None


def executor(**overrides):
    from nemo_recipes.executors import slurm

    args = dict(
        account=ACCOUNT,
        partition=PARTITION,
        gpus_per_node=0,
        processes_per_node=1,
        container_image=None,
        time="00:10:00",
        mem="3G",
        env={"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    return slurm(**{**args, **overrides})


def scontrol(job: str) -> dict[str, str]:
    from nemo_recipes.executors.slurm_executor.state import parse_scontrol

    return parse_scontrol(subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout)


def submit_script(args: list[str], ex, name: str):
    import nemo_run as run

    with run.Experiment(f"slurm-{name}", log_level="WARN") as exp:
        job_id = exp.add(run.Script(path=str(DIST_CHECK), entrypoint="python", args=args), executor=ex, name=name)
        exp.run(detach=True)
    from nemo_recipes.executors.slurm_executor.state import slurm_job_id

    return exp, job_id, slurm_job_id(exp, job_id)


@pytest.fixture(scope="module")
def overtime_job(slurm_cluster, nemorun_home):
    """A job that sleeps past its one-minute limit (Slurm's smallest), submitted once for the module."""
    with open(os.devnull) as devnull:
        stdin, sys.stdin = sys.stdin, devnull
        try:
            submitted = submit_script(["--sleep", "600"], executor(time="00:01:00", mem="512M"), "overtime")
        finally:
            sys.stdin = stdin
    yield submitted + (time.monotonic(),)
    subprocess.run(["scancel", submitted[2]], capture_output=True)


class Preemption:
    """Watches the smoke run and, once the first run of `phase` has a finished checkpoint holding at least
    `checkpoint` steps and has trained two steps past it, preempts the job as an operator or a higher-priority job
    would: `scontrol requeue`. Slurm holds a requeued job back (BeginTime, ~2 min); when it shows PENDING again the
    watcher starts it now, as `test_retries_requeue_the_job` does, to keep CI short.

    "Finished": the recipes save asynchronously, and NeMo marks a checkpoint `-unfinished` until the background
    write is done; a job killed inside that window cannot resume (see docs/guides/launching.md, Slurm jobs)."""

    def __init__(self, root: Path, phase: str, checkpoint: int):
        self.root, self.metrics, self.phase, self.checkpoint = root, root / "metrics.jsonl", phase, checkpoint
        self.job = None
        self.killed_after = None  # the last step the first run had recorded when it was requeued
        self.released = False
        self.pending_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        from nemo_recipes.smoke_training import record

        while not self._stop.wait(0.05):
            records = [r for r in record.read(self.metrics) if r.get("phase") == self.phase]
            if self.job is None:
                steps = [r["step"] for r in records if r.get("event") == "step" and r.get("attempt") == 0]
                if steps and steps[-1] >= self.checkpoint + 2 and self.finished_checkpoint() >= self.checkpoint:
                    self.job = next(r["slurm_job"] for r in records if r.get("event") == "start")
                    subprocess.run(["scontrol", "requeue", self.job], check=True, capture_output=True)
                    self.killed_after = steps[-1]
            elif not self.released:
                info = scontrol(self.job)
                if info.get("JobState") == "PENDING" and info.get("Restarts") == "1":
                    # Not in the requeue's own second: slurmd refuses a credential of the second it revoked the job's.
                    self.pending_since = self.pending_since or time.time()
                    if time.time() - self.pending_since >= 2:
                        release = ["scontrol", "update", f"JobId={self.job}", "StartTime=now"]
                        subprocess.run(release, capture_output=True)
                        self.released = True

    def finished_checkpoint(self) -> int:
        """The most steps a finished checkpoint holds (0: none yet)."""
        from nemo_recipes.smoke_training.judge import checkpoint_step

        held = [
            checkpoint_step(d.name) or 0
            for d in self.root.glob("**/checkpoints/*")
            if d.is_dir() and not d.name.endswith("-unfinished") and not Path(f"{d}-unfinished").exists()
        ]
        return max(held, default=0)


def test_smoke_training_through_slurm_survives_a_preemption(cluster, overtime_job, tmp_path):
    """`smoke(..., launch=executor_launcher(slurm preset))`: each phase one Slurm job. The first phase's job is
    requeued mid-run (after its checkpoint at step 25 is finished, before the one at 50); the new run resumes from
    step 25, the steps the killed run trained past it are discarded, and the run still passes every check: steps
    1-100 each committed once, consumed samples = step x global batch throughout, loss falling, final checkpoint
    at 100. (Steps are cheap, ~0.15 s; the long stretch between checkpoints leaves room for the preemption.)"""
    from nemo_recipes.executors.slurm_executor.state import query
    from nemo_recipes.smoke_training import smoke
    from nemo_recipes.smoke_training.launchers import executor_launcher

    started = time.monotonic()
    with Preemption(tmp_path, "train", checkpoint=25) as preemption:
        report = smoke(
            "gpt_1_3b",
            steps=100,
            stop_step=50,
            dir=str(tmp_path),
            progress=None,
            launch=executor_launcher(executor(retries=1), experiment="slurm-smoke"),
        )
    seconds = time.monotonic() - started
    explain = (
        report.format()
        + "\n"
        + "\n".join(Path(log).read_text(errors="replace")[-2000:] for log in report.logs.values() if Path(log).exists())
    )
    assert preemption.job is not None, "the first run was never past a finished checkpoint at 25\n" + explain
    runs = report.verdict.attempts
    print(f"\nsmoke through Slurm with a preemption: {seconds:.0f} s\n{report.format()}")
    for run in runs:
        print(
            f"  {run.phase} run {run.attempt}: started at step {run.started_at}, trained "
            f"{run.steps[0] if run.steps else '-'}-{run.steps[-1] if run.steps else '-'}, lost {run.lost}"
        )
    assert report.passed, explain

    first, requeued, resumed = runs  # train run 0 (killed), train run 1 (requeued), the resume phase
    assert (first.phase, first.attempt, requeued.phase, requeued.attempt) == ("train", 0, "train", 1)
    assert (resumed.phase, resumed.attempt) == ("resume", 0)
    # The killed run trained past its checkpoint at step 25; the requeued run resumed exactly there.
    assert first.steps[-1] >= preemption.killed_after >= 27
    assert requeued.started_at == 25 and "step=24" in requeued.resumed_from
    assert first.lost == list(range(26, first.steps[-1] + 1)) and requeued.steps == list(range(26, 51))
    assert resumed.started_at == 50 and resumed.steps == list(range(51, 101))
    assert report.verdict.checkpoint["step"] == 99 and report.verdict.checkpoint["optimizer"] is True
    # Slurm's account of the first phase's job: one requeue, then it completed.
    state = query(preemption.job)
    assert state is not None and state.state == "SUCCEEDED" and state.requeues == 1, state
    assert "requeued 1 time" in Path(report.logs["train"]).read_text()


def test_a_job_over_its_time_limit_is_reported_timeout(cluster, overtime_job, capsys):
    """NeMo-Run says FAILED (torchx has no TIMEOUT); Slurm, and so the example and `nemo-recipes launch`, say
    TIMEOUT, with the node and the batch output file."""
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import pretrain_gpt
    finally:
        sys.path.remove(str(REPO / "examples"))
    exp, job_id, slurm_id = overtime_job[:3]
    ex = next(j for j in exp.jobs if j.id == job_id).executor
    code = pretrain_gpt.follow_slurm(exp, job_id, ex, timeout=240)
    out = capsys.readouterr().out
    waited = time.monotonic() - overtime_job[3]
    print(out, f"\nsubmitted {waited:.0f} s ago")
    assert code == 1
    assert f"Slurm job {slurm_id}: TIMEOUT" in out and "on " in out
    assert "batch output: " in out and f"log-*_{slurm_id}_<requeue count>.out" in out
    assert str(exp.status(return_dict=True)[job_id]["status"]) == "FAILED"  # what NeMo-Run alone would say
    sacct = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State,Timelimit", "-j", slurm_id], capture_output=True, text=True, check=True
    ).stdout
    assert sacct.startswith("TIMEOUT|00:01:00"), sacct


def test_the_presets_requeue_settings_are_what_slurm_holds(cluster):
    """The preset documents: every job is submitted requeueable (a preemption or a lost node puts it back in the
    queue), and `retries` is how often a job that fails is requeued by its own script."""
    from nemo_recipes.executors.slurm_executor.state import follow

    exp, job_id, slurm_id = submit_script([], executor(retries=2, processes_per_node=1), "settings")
    info = scontrol(slurm_id)
    assert info["Requeue"] == "1" and info["Restarts"] == "0" and info["TimeLimit"] == "00:10:00"
    script = (Path(exp._exp_dir) / f"{job_id}_sbatch.sh").read_text()
    assert "export TORCHX_MAX_RETRIES=2" in script
    assert 'if [ "$TORCHX_MAX_RETRIES" -gt "${SLURM_RESTART_COUNT:-0}" ]; then' in script
    assert "#SBATCH --time=00:10:00" in script and "#SBATCH --mem=3G" in script
    state = follow(slurm_id, timeout=120, interval=1.0)
    assert state is not None and state.state == "SUCCEEDED" and state.requeues == 0, state


def launch(capsys, *args: str) -> tuple[int, str, str]:
    """`nemo-recipes launch ...` in this process: NeMo is imported once for both launch tests (a subprocess
    each would import it again, ~20 s apiece on the CI machine)."""
    from nemo_recipes.cli.main import main

    capsys.readouterr()
    code = main(["launch", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_refused_submission_leaves_nothing_behind(cluster, capsys):
    """sbatch refuses an unknown partition: `nemo-recipes launch` exits 2 naming the field, the value and the fix,
    and no experiment directory is left under NEMORUN_HOME."""
    code, out, err = launch(
        capsys,
        "gpt_1_3b",
        "--executor",
        "slurm",
        "--json",
        "--name",
        "refused",
        "-E",
        f"account={ACCOUNT}",
        "-E",
        "partition=no_such_partition",
        "-E",
        "gpus_per_node=1",  # the CI cluster's GPUs are count-only GRES (.ci/start-slurm.sh)
        "-E",
        "container_image=null",
    )
    assert code == 2, out[-2000:] + err[-3000:]
    problems = json.loads(out)["problems"]
    assert [(p["field"], p["value"]) for p in problems] == [("partition", "no_such_partition")], problems
    assert "invalid partition" in problems[0]["message"] and "sinfo" in problems[0]["fix"]
    assert "nothing was submitted" in problems[0]["fix"]
    assert not (cluster / "experiments" / "refused").exists(), list((cluster / "experiments").rglob("*"))


def test_launch_reports_the_slurm_state_and_the_logs(cluster, capsys):
    """`nemo-recipes launch --detach --json` on the real cluster: Slurm's state of the submitted job (not NeMo-Run's
    SUBMITTED), in the JSON and on stderr, and where its logs will be. The job (a full-size recipe, which cannot
    train on this CPU) is cancelled at once."""
    code, out, err = launch(
        capsys,
        "gpt_1_3b",
        "--executor",
        "slurm",
        "--json",
        "--detach",
        "--name",
        "detached",
        "-E",
        f"account={ACCOUNT}",
        "-E",
        "gpus_per_node=1",  # the CI cluster's GPUs are count-only GRES (.ci/start-slurm.sh)
        "-E",
        "container_image=null",
        "-E",
        "time=00:02:00",
    )
    report = json.loads(out) if out.strip().startswith("{") else {}
    slurm = report.get("slurm") or {}
    if slurm.get("job_id"):
        subprocess.run(["scancel", slurm["job_id"]], capture_output=True)
    assert code == 0, out[-2000:] + err[-3000:]
    assert slurm["state"] in ("PENDING", "RUNNING") and slurm["requeues"] == 0 and not slurm["terminal"], slurm
    assert f"Slurm job {slurm['job_id']}: {slurm['state']}" in err
    logs = next(line for line in err.splitlines() if line.startswith("logs: "))
    where = str(cluster / "experiments" / "detached")
    assert logs.startswith(f"logs: {where}") and logs.endswith(f"_{slurm['job_id']}_<requeue count>.out"), logs
    assert slurm["stdout"] and slurm["stdout"].startswith(where)


def test_launch_of_a_job_that_fails_exits_1_with_the_state_and_the_logs(cluster, capsys, tmp_path):
    """`nemo-recipes launch` following a real Slurm job whose command fails at once (the job's Python cannot
    start): exit 1, Slurm's FAILED with its exit code, the batch output and where the logs are."""
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        f"broken:\n  preset: slurm\n  account: {ACCOUNT}\n  gpus_per_node: 1\n  container_image: null\n"
        "  time: '00:02:00'\n  mem: 512M\n  env:\n    PYTHONHOME: /nonexistent\n"
    )
    code, out, err = launch(capsys, "gpt_1_3b", "--executor", "broken", "--clusters", str(clusters), "--json")
    slurm = json.loads(out)["slurm"]
    assert code == 1, err[-3000:]
    assert slurm["state"] == "FAILED" and slurm["terminal"] and slurm["exit_code"] != "0:0", slurm
    assert f"Slurm job {slurm['job_id']}: FAILED" in err and "batch output: " in err
    assert f"logs: {cluster / 'experiments' / 'gpt_1_3b'}" in err


def test_a_job_slurm_does_not_know_is_reported_lost(cluster):
    """An id neither scontrol nor sacct knows (a job the controller forgot, without accounting): following it
    ends after `lost_after` with no state, and the report says LOST instead of waiting out the hour."""
    from nemo_recipes.executors.slurm_executor.state import follow

    unknown = "999999999"
    started = time.monotonic()
    assert follow(unknown, timeout=60, interval=0.5, lost_after=2.0) is None
    assert time.monotonic() - started < 20
