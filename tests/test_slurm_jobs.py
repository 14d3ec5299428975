"""Real jobs on the real single-node Slurm cluster that `.ci/start-slurm.sh` starts, submitted through our Slurm
preset with NeMo-Run's LocalTunnel and followed through `run.Experiment` status and logs to the end.

Each job is examples/dist_check.py under torchrun: every rank joins torch.distributed (gloo, CPU) and prints its rank
and world size, which are checked against the plan. Without `sinfo` the tests skip, unless CI is set: then they fail.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
DIST_CHECK = REPO / "examples" / "dist_check.py"
ACCOUNT = os.environ.get("SLURM_ACCOUNT", "ci")
PARTITION = os.environ.get("SLURM_PARTITION") or None
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
TRICKY = {
    "SPACES": "two  words and a tab\there",
    "QUOTES": 'it\'s "quoted"',
    "DOLLAR": "$HOME ${PATH} $(id -u) $((1+1))",
    "BACKTICKS": "`touch /tmp/nemo-recipes-injected` `id`",
    "NEWLINES": "line one\nline two\n",
    "mixedCase": "keeps its case",
    "EMPTY": "",
    "GLOB": "* ? [a-z] ~ ; & | < > #",
}


def executor(**overrides):
    from nemo_recipes.executors import slurm

    args = dict(
        account=ACCOUNT,
        partition=PARTITION,
        gpus_per_node=0,
        processes_per_node=2,
        container_image=None,
        time="00:05:00",
        env={"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    env = {**args["env"], **overrides.pop("env", {})}
    return slurm(**{**args, **overrides, "env": env})


def check_task(*args: str):
    import nemo_run as run

    return run.Script(path=str(DIST_CHECK), entrypoint="python", args=list(args))


class Submitted:
    def __init__(self, exp, job_id):
        self.exp, self.job_id = exp, job_id

    @property
    def job(self):
        return next(j for j in self.exp.jobs if j.id == self.job_id)

    @property
    def slurm_id(self) -> str:
        return self.job.handle.partition("://")[2].split("/")[1]

    def status(self) -> str:
        return str(self.exp.status(return_dict=True)[self.job_id]["status"])

    def wait(self, states=TERMINAL, timeout=120.0) -> str:
        deadline, seen = time.time() + timeout, []
        while time.time() < deadline:
            state = self.status()
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in states:
                return state
            time.sleep(1.0)
        raise AssertionError(f"job {self.slurm_id} did not reach {states} in {timeout}s; states seen: {seen}")

    def logs(self) -> str:
        buffer = io.StringIO()
        with contextlib.redirect_stderr(buffer):
            self.exp.logs(self.job_id)
        return buffer.getvalue()

    def reports(self) -> list[dict]:
        return [
            json.loads(line.split("DIST_CHECK ", 1)[1]) for line in self.logs().splitlines() if "DIST_CHECK " in line
        ]

    def sbatch_script(self) -> str:
        return (Path(self.exp._exp_dir) / f"{self.job_id}_sbatch.sh").read_text()


def submit(task, ex, name="check", plugins=None) -> Submitted:
    import nemo_run as run

    from nemo_recipes.executors import RecipePlugin

    with run.Experiment(f"slurm-{name}", log_level="WARN") as exp:
        job_id = exp.add(task, executor=ex, name=name, plugins=plugins if plugins is not None else [RecipePlugin()])
        exp.run(detach=True)
    return Submitted(exp, job_id)


def test_torchrun_starts_the_planned_ranks(cluster):
    """The plugin plans a recipe on the executor's hardware; the job's ranks are exactly that plan."""
    from nemo_recipes.executors import RecipePlugin

    ex = executor(gpus_per_node=2)  # the CI node's count-only GPUs (.ci/start-slurm.sh): a GPU recipe asks for some
    plugin = RecipePlugin()
    plan = ex.nnodes() * ex.nproc_per_node()
    try:
        import nemo_recipes
        from nemo_recipes.training.introspect import spec_from_partial

        recipe = nemo_recipes.gpt_1_3b(num_gpus_per_node=2, global_batch_size=8)
        plugin.setup(recipe, ex.clone())
        spec = spec_from_partial(recipe)
        assert (spec.num_nodes, spec.num_gpus_per_node) == (1, 2)
        plan = spec.world_size
    except ImportError:  # NeMo is optional for this test; the executor's own count is the plan then
        pass
    assert plan == 2

    job = submit(check_task(), ex)
    assert job.wait() == "SUCCEEDED", job.logs()[-3000:]
    reports = job.reports()
    assert sorted(r["rank"] for r in reports) == list(range(plan))
    assert {r["world_size"] for r in reports} == {plan}
    assert {r["rank_sum"] for r in reports} == {sum(range(plan))}
    assert sorted(r["local_rank"] for r in reports) == list(range(plan))
    script = job.sbatch_script()
    assert "--nproc-per-node 2" in script and "--nnodes 1" in script
    assert "#SBATCH --ntasks-per-node=1" in script  # one torchrun per node, which starts one rank per GPU


def test_failing_job_is_reported_failed(cluster):
    job = submit(check_task("--fail"), executor(), name="fails")
    assert job.wait() == "FAILED"
    reports = job.reports()
    assert len(reports) == 2  # both ranks ran; the job failed afterwards with exit status 3
    batch_output = "".join(p.read_text() for p in Path(job.job.executor.job_dir).glob("sbatch_*.out"))
    assert "job exited with code 1" in batch_output  # torchrun's status when a rank fails


def test_cancelled_job_is_reported_cancelled(cluster):
    job = submit(check_task("--sleep", "300"), executor(), name="cancelled")
    job.wait({"RUNNING"}, timeout=60)
    job.exp.cancel(job.job_id)
    assert job.wait() == "CANCELLED"
    sacct = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job.slurm_id], capture_output=True, text=True, check=True
    ).stdout
    assert sacct.startswith("CANCELLED")


def test_retries_requeue_the_job(cluster):
    job = submit(check_task("--fail"), executor(retries=1), name="retried")
    # The job fails, requeues itself (scontrol requeue, Restarts=1) and runs again. Slurm holds a requeued job back
    # for a while (BeginTime); each time we see it pending after the requeue we start it now, to keep this short.
    deadline, pending_since = time.time() + 150, None
    while True:
        info = _scontrol_job(job.slurm_id)
        # Restarts=1 appears while the first run is still COMPLETING, before the requeued run is even pending: only
        # the final FAILED of the second run ends the wait (a requeue BeginTime is released each time it shows).
        # Not in the requeue's own second: slurmd refuses a credential issued in the second it revoked the job's
        # ("Killing non-startable batch JobId: Job credential revoked", which CI hit), and the job ends FAILED unrun.
        if "Restarts=1" in info and "JobState=PENDING" in info:
            pending_since = pending_since or time.time()
            if time.time() - pending_since >= 2:
                subprocess.run(["scontrol", "update", f"JobId={job.slurm_id}", "StartTime=now"], check=False)
        # FAILED with Restarts=1 can also show for an instant between the first run's end and the requeue (CI saw
        # it once, with only the first run's log): the second run's log must be there too.
        logs = list(Path(job.job.executor.job_dir).glob("log-*_1.out"))
        if "Restarts=1" in info and "JobState=FAILED" in info and logs:
            break
        assert time.time() < deadline, info
        time.sleep(0.5)
    assert job.wait(timeout=120) == "FAILED"  # one retry, then it gives up
    assert job.reports()  # NeMo-Run's logs show a run
    logs = sorted(Path(job.job.executor.job_dir).glob("log-*.out"))  # one file per run: ..._<restart count>.out
    assert [p.name.rsplit("_", 1)[1] for p in logs] == ["0.out", "1.out"]
    for restart, path in enumerate(logs):
        lines = [
            json.loads(line.split("DIST_CHECK ", 1)[1])
            for line in path.read_text().splitlines()
            if "DIST_CHECK " in line
        ]
        assert sorted(r["rank"] for r in lines) == [0, 1]
        assert {r["restart_count"] for r in lines} == {restart}


def _scontrol_job(slurm_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", slurm_id], capture_output=True, text=True).stdout


def test_env_values_arrive_unchanged_and_secrets_stay_off_disk(cluster, monkeypatch):
    secret = "s3cr3t-'quoted' $HOME `id` value"
    wandb = "wandb-key-0123456789abcdef"
    monkeypatch.setenv("MY_TOKEN", secret)
    monkeypatch.setenv("WANDB_API_KEY", wandb)
    ex = executor(env=TRICKY, secrets=["MY_TOKEN"])
    # What NeMo's WandbPlugin does: copy the key into the executor's env (it would land in the sbatch script).
    ex.env_vars["WANDB_API_KEY"] = wandb
    args = [a for name in TRICKY for a in ("--echo", name)] + ["--digest", "MY_TOKEN", "--digest", "WANDB_API_KEY"]
    job = submit(check_task(*args), ex, name="env")
    assert job.wait() == "SUCCEEDED", job.logs()[-3000:]
    reports = job.reports()
    assert len(reports) == 2
    import hashlib

    for report in reports:
        assert report["echo"] == TRICKY
        assert report["sha256"] == {
            "MY_TOKEN": hashlib.sha256(secret.encode()).hexdigest(),
            "WANDB_API_KEY": hashlib.sha256(wandb.encode()).hexdigest(),
        }
    assert not Path("/tmp/nemo-recipes-injected").exists()
    script = job.sbatch_script()
    assert "#SBATCH --export=ALL,MY_TOKEN,WANDB_API_KEY" in script
    for path in [Path(job.exp._exp_dir), Path(job.job.executor.job_dir)]:
        for file in path.rglob("*"):
            if file.is_file():
                text = file.read_text(errors="replace")
                assert secret not in text and wandb not in text, f"secret written to {file}"
    assert secret not in job.logs() and wandb not in job.logs()
