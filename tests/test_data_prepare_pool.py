"""`data prepare`'s pool of workers under the command's signal handling (cli/_signals.py): runs with several workers
end with no traceback and no hang, many times over; SIGTERM and SIGINT mid-run stop every worker, and the next run
completes byte-identical. Real processes, real signals. benchmarks/data_prepare_pool.py runs the 50 repetitions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _cli import ENV, SCRIPT
from test_data_prepare import _files, documents, write_jsonl

from nemo_recipes.data import shard_plan, tokenizers
from nemo_recipes.smoke_training.launchers import alive, descendants

pytestmark = [pytest.mark.nemo, pytest.mark.serial]  # Megatron-Core writes the datasets

# Many prepares in one process (Megatron-Core imported once): each through main(), the CLI's signal handler installed
# as a user's command has it, with 2 workers over 4 shards. Prints one line per run; a hang is caught by the timeout.
REPEAT = r"""
import sys
from nemo_recipes.cli.main import main
source, tokenizer, root, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for run in range(runs):
    code = main(["data", "prepare", source, "--tokenizer", tokenizer, "--out", f"{root}/{run}", "--workers", "2",
                 "--shard-size", "16K", "--progress", "none"])
    print(run, code, flush=True)
"""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return tokenizers.train(documents(0, 300), tmp_path_factory.mktemp("tok"), vocab_size=600)


def test_runs_with_two_workers_end_without_traceback_or_hang(tokenizer, tmp_path):
    # ~60 s on 2 cores. Before the workers reset the signals they inherited, about 1 run in 5 hung after its last
    # shard, and most printed a worker's traceback.
    source = write_jsonl(tmp_path / "small.jsonl", documents(3, 200))
    runs = 8
    result = subprocess.run([sys.executable, "-c", REPEAT, str(source), str(tokenizer), str(tmp_path / "out"),
                             str(runs)], env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    finished = [line for line in result.stdout.splitlines() if not line.startswith("/")]  # not the printed prefixes
    assert finished == [f"{run} 0" for run in range(runs)]
    assert "Traceback" not in result.stderr and "Stopped" not in result.stderr, result.stderr[-3000:]
    assert all(_files(tmp_path / "out" / str(run)) == _files(tmp_path / "out" / "0") for run in range(runs))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_stops_every_worker_and_the_next_run_completes_byte_identical(signum, tokenizer, tmp_path):
    # ~30 s each: a corpus of about 40 shards, stopped after the third receipt.
    source = write_jsonl(tmp_path / "big.jsonl", documents(7, 12000))
    command = [SCRIPT, "data", "prepare", str(source), "--tokenizer", str(tokenizer), "--shard-size", "64K"]
    reference = subprocess.run([*command, "--out", str(tmp_path / "ref"), "--workers", "1"], env=ENV,
                               capture_output=True, text=True, timeout=600)  # fmt: skip
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "out"
    process = subprocess.Popen(
        [*command, "--out", str(out), "--workers", "2", "--progress", "none"],
        env=ENV,
        start_new_session=True,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    receipts = out / shard_plan.WORK_DIR / "receipts"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if receipts.is_dir() and len(list(receipts.glob("[!.]*.json"))) >= 3:
            break
        time.sleep(0.05)
    workers = descendants(process.pid)
    assert len(workers) == 2, "the pool is not running"
    # SIGINT to the process group, as Ctrl-C in a terminal sends it; SIGTERM to the command alone, as `timeout` does.
    if signum == signal.SIGINT:
        os.killpg(process.pid, signum)
    else:
        os.kill(process.pid, signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip().endswith(f"stopped by {signal.Signals(signum).name}") and "Traceback" not in stderr, stderr
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers):
        assert time.monotonic() < deadline, "a worker outlived the command"
        time.sleep(0.05)
    assert not list(out.glob("big*")), "nothing carries a final name before the run completes"

    again = subprocess.run([*command, "--out", str(out), "--workers", "2"], env=ENV, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "shards already done" in again.stderr
    assert _files(out) == _files(tmp_path / "ref")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
