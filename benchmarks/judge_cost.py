"""What the smoke judge adds to a smoke run's time (issue 46, item 7; target: at most 20 %), side by side.

    python benchmarks/judge_cost.py                          # gpt_1_3b scaled down, 1 process, 20 steps (10 + 10)
    python benchmarks/judge_cost.py --processes 2 --overrides tensor_parallel=2 --json out.json

One real smoke run, with a timer planted beside the judge's recorders (a Lightning callback loaded as the tests load
their planted faults): every hook of every recorder of `nemo_recipes.smoke_training` (the digests, what was built and
fed, every optimizer step, the causality probe; the step record too) is timed on rank 0, in each phase. Added to them:
the uninterrupted twin's steps (the first phase trains on past its stop without saving, for the resume-loss check:
the "reference step" records' own seconds) and `judge.judge` run again on the record in this process (the other
check modules' lines cost as little: milliseconds). Printed against the run's
whole time (both phases' processes, start-up included) and against its training steps alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: The callbacks that are not the judge's: the stop of the first phase, dropout's reseeding, the twin's own switch.
NOT_THE_JUDGES = ("StopAtStep", "ReseedAt", "TrainOnWithoutSaving")


def _timer_class() -> Any:
    """The timer callback (defined here, loaded in the training processes from this file's path)."""
    from lightning.pytorch.callbacks import Callback

    class JudgeTimer(Callback):
        """Wraps every hook of the judge's recorders with a clock; rank 0 appends the totals at teardown."""

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            self.seconds: dict[str, float] = {}
            self.path = None
            for callback in trainer.callbacks:
                name = type(callback).__name__
                if not type(callback).__module__.startswith("nemo_recipes.smoke_training") or name in NOT_THE_JUDGES:
                    continue
                self.path = getattr(callback, "path", self.path)
                for hook in [h for h in dir(Callback) if h.startswith("on_") or h in ("setup", "teardown")]:
                    if getattr(type(callback), hook) is not getattr(Callback, hook):
                        setattr(callback, hook, self._timed(name, getattr(callback, hook)))

        def _timed(self, name: str, hook: Any) -> Any:
            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return hook(*args, **kwargs)
                finally:
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

            return timed

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            from nemo_recipes.smoke_training.record import append

            if trainer.global_rank == 0 and self.path:
                append(self.path, {"event": "judge cost", "seconds": self.seconds})

    return JudgeTimer


def __getattr__(name: str) -> Any:  # the worker loads "this file:JudgeTimer"
    if name == "JudgeTimer":
        return _timer_class()
    raise AttributeError(name)


def main(argv: list[str]) -> int:
    from nemo_recipes.overrides import parse_overrides
    from nemo_recipes.smoke_training import smoke
    from nemo_recipes.smoke_training.record import read

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="gpt_1_3b")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--overrides", nargs="*", default=[])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    timer = f"{Path(__file__).resolve()}:JudgeTimer"
    with tempfile.TemporaryDirectory(prefix="judge-cost-") as root:
        report = smoke(
            args.recipe,
            parse_overrides(args.overrides) if args.overrides else None,
            processes=args.processes,
            steps=args.steps,
            dir=root,
            progress=None,
            faults={"train": timer, "resume": timer},
        )
        records = read(Path(root) / "metrics.jsonl")
    from nemo_recipes.smoke_training.judge import judge
    from nemo_recipes.smoke_training.runner import lr_schedule

    spec = report.plan.spec
    started = time.perf_counter()  # judged inside smoke(); timed again here on the same record
    judge(
        records,
        steps=report.plan.steps,
        stop_step=report.plan.stop_step,
        global_batch_size=spec.global_batch_size,
        schedule=lr_schedule(spec),
    )
    judging = time.perf_counter() - started
    recorders: dict[str, float] = {}
    for record in records:
        if record.get("event") == "judge cost":
            for name, seconds in record["seconds"].items():
                recorders[name] = recorders.get(name, 0.0) + seconds
    twin = sum(r.get("seconds") or 0.0 for r in records if r.get("event") == "reference step")
    steps = sum(r.get("seconds") or 0.0 for r in records if r.get("event") == "step")
    whole = sum(report.phase_seconds.values())
    rows = [*sorted(recorders.items(), key=lambda item: -item[1]), ("uninterrupted twin's steps", twin)]
    rows.append(("judge.judge on the record", judging))
    added = sum(seconds for _, seconds in rows)
    print(
        f"smoke {args.recipe}: {'PASS' if report.passed else 'FAIL'}, {report.plan.layout}, {report.plan.steps} steps"
    )
    print(f"  the run: {whole:.1f} s in its processes (start-up included), {steps:.1f} s in its training steps")
    print(f"  {'the judge':<34} {'seconds':>8} {'% of run':>9} {'% of steps':>11}")
    for name, seconds in rows:
        print(f"  {name:<34} {seconds:8.2f} {100 * seconds / whole:8.1f}% {100 * seconds / max(steps, 1e-9):10.1f}%")
    print(f"  {'added in all':<34} {added:8.2f} {100 * added / whole:8.1f}% {100 * added / max(steps, 1e-9):10.1f}%")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"run_seconds": whole, "step_seconds": steps, "judge": dict(rows), "added": added}, indent=1)
        )
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
