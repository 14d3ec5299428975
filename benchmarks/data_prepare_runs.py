"""One measured run of each tool for `benchmarks/data_prepare.py`: `data prepare`, Megatron-LM's
`tools/preprocess_data.py` and its fast path (`tools/preprocess_data_fast.py`, or `megatron_fast_path.py` where that
cannot run here).

Every run is pinned to the same cores (`taskset -c 0..N-1`), so a tool that threads inside (gigatoken's rayon pool)
gets N cores like a tool with N worker processes; RAYON_NUM_THREADS=N as well. Wall seconds, CPU seconds and peak
RSS come from the kernel's resource usage of the finished process (`os.wait4`: its own and its reaped children's);
the peak of the whole process tree (the sum over processes, sampled every 0.2 s) is shown beside it, and the
processes' CPU seconds are sampled too, for children their parent never reaps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SAMPLE_S = 0.2
EXIT_POLL_S = 0.005
TIMEOUT_S = 3600.0


def _env(cores: int, *path: str | Path) -> dict[str, str]:
    extra = [str(p) for p in path] + [os.environ.get("PYTHONPATH", "")]
    threads = str(cores)
    return {
        **os.environ,
        **OFFLINE,
        "RAYON_NUM_THREADS": threads,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in extra if p),
    }


def _sample(process: psutil.Process, cpu: dict[int, float]) -> int:
    """The tree's RSS now, in bytes; each process's CPU seconds so far into `cpu`."""
    total = 0
    try:
        tree = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in tree:
        try:
            with p.oneshot():
                total += p.memory_info().rss
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
        except psutil.Error:
            pass
    return total


def measured(command: list[str], env: dict[str, str], log: Path, cores: int) -> dict:
    """Runs `command` on cores 0..cores-1; wall and CPU seconds, peak RSS (largest process; whole tree sampled)."""
    pinned = ["taskset", "-c", f"0-{cores - 1}", *command]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        child = subprocess.Popen(pinned, stdout=out, stderr=subprocess.STDOUT, env=env)
        watched = psutil.Process(child.pid)
        tree_peak = 0
        sampled_cpu: dict[int, float] = {}
        next_sample = start
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter()
            if now - start > TIMEOUT_S:
                child.kill()
                raise SystemExit(f"{command[1]}: still running after {TIMEOUT_S:.0f} s; stopped (log: {log})")
            if now >= next_sample:
                tree_peak = max(tree_peak, _sample(watched, sampled_cpu))
                next_sample = now + SAMPLE_S
            # The end is seen within EXIT_POLL_S: sleeping SAMPLE_S here added up to 0.2 s to every wall time
            # (10 % of a 2 s run).
            time.sleep(EXIT_POLL_S)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({child.returncode}):\n{log.read_text()[-3000:]}")
    return {
        "wall_s": wall,
        # A child that its parent never reaps (a pool's workers at exit) is missing from wait4's figure; the
        # sampled sum (which misses each process's last 0.2 s) catches it.
        "cpu_s": max(usage.ru_utime + usage.ru_stime, sum(sampled_cpu.values())),
        "cpu_reaped_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # kilobytes on Linux
        "tree_rss_mb": tree_peak / 2**20,
        "load_before": load,
        "load_after": os.getloadavg()[0],
    }


def run_ours(corpus: Path, tokenizer: Path, workers: int, out: Path, log: Path) -> tuple[dict, Path]:
    """The installed console script, as a user runs it (start-up and exit included, like the other tools' scripts)."""
    shutil.rmtree(out, ignore_errors=True)  # receipts of an earlier run would make this one a no-op
    command = [
        str(Path(sys.executable).with_name("nemo-recipes")),
        *("data", "prepare", str(corpus), "--out", str(out), "--tokenizer", str(tokenizer)),
        *("--workers", str(workers)),
    ]
    figures = measured(command, _env(workers, REPO), log, workers)
    lines = log.read_text(errors="replace").splitlines()
    said = [line for line in lines if line.startswith("tokenizer: encoding with")]
    figures["encoder"] = said[0].split()[3].rstrip(":") if said else "unknown"
    return figures, out / corpus.stem


def run_ceiling(out: Path, processes: int, log: Path) -> dict:
    """data_prepare_ceiling.py on the plan in `out` (the last `data prepare` run's) with `processes` processes: the
    shard work alone; its wall time is the shards' (from the first fork to the last exit), not the command's."""
    command = [sys.executable, str(HERE / "data_prepare_ceiling.py"), str(out), str(processes)]
    figures = measured(command, _env(processes, REPO), log, processes)
    said = json.loads(log.read_text().strip().splitlines()[-1])
    return {**figures, "wall_s": said["wall_s"], "shards": said["shards"]}


def run_preprocess(megatron_lm: Path, corpus: Path, tokenizer: Path, workers: int, out: Path, log: Path):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = [
        sys.executable,
        str(megatron_lm / "tools" / "preprocess_data.py"),
        *("--input", str(corpus), "--output-prefix", str(out / "corpus")),
        *("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer)),
        *("--append-eod", "--workers", str(workers), "--log-interval", "2000"),
    ]
    return measured(command, _env(workers, megatron_lm), log, workers), out / "corpus_text_document"


def fast_command(script: Path, corpus: Path, tokenizer: Path, prefix: Path, real: bool) -> list[str]:
    command = [sys.executable, str(script), "--input", str(corpus), "--output-prefix", str(prefix)]
    command += ["--tokenizer-model", str(tokenizer), "--append-eod"]
    if real:
        command += ["--tokenizer-type", "HuggingFaceTokenizer", "--use-gigatoken"]
    return command


def probe_fast_script(megatron_main: Path | None, gigatoken_site: Path, corpus: Path, tokenizer: Path, work: Path):
    """Whether Megatron-LM main's own tools/preprocess_data_fast.py runs here (on a 1,000-line piece of the corpus):
    (True, "") or (False, why)."""
    if megatron_main is None:
        return False, "no --megatron-lm-main given"
    script = megatron_main / "tools" / "preprocess_data_fast.py"
    if not script.exists():
        return False, f"{script} does not exist"
    piece = work / "probe.jsonl"
    with open(corpus, encoding="utf-8") as src, open(piece, "w", encoding="utf-8") as dst:
        for _, line in zip(range(1000), src, strict=False):
            dst.write(line)
    command = fast_command(script, piece, tokenizer, work / "probe", real=True)
    try:
        done = subprocess.run(
            command, env=_env(1, megatron_main, gigatoken_site), capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        return False, "it did not finish within 600 s on 1,000 documents"
    if done.returncode == 0:
        return True, ""
    last = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()][-1:] or ["no output"]
    return False, f"exit {done.returncode}: {last[0].strip()}"


def run_fast(
    real: bool,
    megatron_main: Path | None,
    gigatoken_site: Path,
    corpus: Path,
    tokenizer: Path,
    cores: int,
    out: Path,
    log: Path,
):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    script = megatron_main / "tools" / "preprocess_data_fast.py" if real else HERE / "megatron_fast_path.py"
    path = [megatron_main, gigatoken_site] if real else [gigatoken_site]
    command = fast_command(script, corpus, tokenizer, out / "corpus", real)
    return measured(command, _env(cores, *path), log, cores), out / "corpus_text_document"
