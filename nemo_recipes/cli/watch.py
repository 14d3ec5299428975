"""`nemo-recipes watch RUN`: what a finished or running job's log says: step, loss, steady step time, tokens/s, model
TFLOP/s per GPU, peak memory, ETA, and flags (restart and the step it resumed from, a resume from step 0, non-finite
loss, loss spike). Reads text only: no NeMo, torch or NeMo-Run import."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from nemo_recipes.cli import _output
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.plan.stack import DEFAULT_STACK, STACK_CHOICES
from nemo_recipes.user_paths import output_problems

HELP = VERBS["watch"].help
EXAMPLES = """\
  nemo-recipes watch runs/smoke1                      # the directory `smoke --dir runs/smoke1` kept
  nemo-recipes watch job/log-train_1234_0.out          # the log of global rank 0 of a job
  nemo-recipes watch gpt_7b_1765432109876543210 --follow   # the experiment id `launch` printed (or its title)
  nemo-recipes watch runs/smoke1 --json | jq .figures.step_time_s
  nemo-recipes watch runs/smoke1 --follow              # while `smoke --dir runs/smoke1` trains: steps as they land
  nemo-recipes watch runs/job1 --gpu h100 --card cards/job1.yaml   # the run's record, for plan --calibrate
  nemo-recipes watch runs/job1 --gpu h100 --plot job1.png       # loss and tokens/s per GPU against the plan"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "watch",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Reads the lines NeMo's ProgressPrinter prints on global rank "
        "0; the step time is the median over the logged steps that leave out the first steps of every process "
        "and the steps that saved a checkpoint and the step after each; tokens/s, GPUs and TFLOP/s need the "
        "recipe, which a `smoke --dir` "
        "run directory records.",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="RUN",
        help="a log file, the directory of a run (`smoke --dir`, a job's), the id or title of a NeMo-Run experiment "
        "as `launch` printed it (its logs under NEMORUN_HOME), or a Slurm job id (its output file)",
    )
    parser.add_argument(
        "--skip-first",
        type=int,
        default=None,
        metavar="N",
        help="steps of every (re)started process left out of the step time (default 1)",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        metavar="GPU",
        help="the GPU the run ran on: shows the plan's step time, tokens/s and TFLOP/s per GPU and MFU beside the "
        "measured ones, with the deviation (needs the recipe: a `smoke --dir` directory)",
    )
    parser.add_argument(
        "--stack",
        choices=STACK_CHOICES,
        default=None,
        help=f"the software the run trained on, for the plan beside it and the card (default: {DEFAULT_STACK}, the "
        "NeMo container)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON: {run, logs, recipe, figures{step, max_steps, loss, step_time_s, window_steps, "
        "tokens_per_s, ..., segments, flags}, plan, card, follow{state, flags}, plot}; with --follow the steps go to "
        "standard error",
    )
    parser.add_argument(
        "--card",
        default=None,
        metavar="FILE",
        help="also write the run's record as YAML: recipe and overrides, layout, cluster, software versions, "
        "measured figures and (with --gpu) the plan's; `plan --calibrate` reads it. An existing FILE is kept "
        "unless --overwrite",
    )
    parser.add_argument("--overwrite", action="store_true", help="with --card: replace an existing FILE")
    parser.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="also draw loss and throughput against step, each process its own line, with --gpu the plan's "
        "tokens/s per GPU beside (.png or .svg; needs matplotlib: pip install 'nemo-recipes[plot]')",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="follow a live run until it ends: each step as it lands, each flag as it arises, then the report. "
        "Ends at the last step (exit 0), or after a stall when no process on this machine holds the run's log "
        "(failed, exit 1); Ctrl-C stops the watch, not the job (exit 130). Without it, the logs are read once",
    )
    parser.add_argument(
        "--stall-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --follow: no new step for this long is a stall (default: 10 x the step time, at least 600 s; "
        "1800 s before the first step)",
    )
    parser.set_defaults(run=run)


def _skip_first(value: object) -> int:
    from nemo_recipes.watching.figures import SKIP_FIRST_STEPS

    if value is None:
        return SKIP_FIRST_STEPS
    if not isinstance(value, int) or value < 0:
        raise InvalidConfigError(
            [Problem("--skip-first", value, "must be 0 or a positive number of steps.", "e.g. --skip-first 5.")],
            context="watch",
        )
    return value


def _check_follow(args: argparse.Namespace) -> None:
    problems = []
    if args.stall_after is not None and not (args.stall_after > 0 and args.stall_after < float("inf")):
        problems.append(
            Problem(
                "--stall-after",
                args.stall_after,
                "must be a positive number of seconds.",
                "e.g. --stall-after 900, or leave it out for 10 x the step time (at least 600 s).",
            )
        )
    if args.plot is not None:
        from nemo_recipes.plan.plot import image_problems

        problems += image_problems("--plot", args.plot, "run")
    if args.stall_after is not None and not args.follow:
        problems.append(
            Problem(
                "--stall-after", args.stall_after, "changes nothing without --follow.", "add --follow, or leave it out."
            )
        )
    if problems:
        raise InvalidConfigError(problems, context="watch")


def run(args: argparse.Namespace) -> int:
    from nemo_recipes.cli._watch_follow import follow_run, stream
    from nemo_recipes.cli._watch_slurm import job_of
    from nemo_recipes.watching.device import recorded_device
    from nemo_recipes.watching.figures import figures
    from nemo_recipes.watching.sources import read_run

    skip = _skip_first(args.skip_first)
    _check_follow(args)
    _check_card_path(args.card, args.overwrite)
    _check_outputs(args, [])  # before a run is followed for hours; its logs are known once it is read
    followed = None
    job = job_of(args.target)
    if args.follow:
        found, result, followed = follow_run(args.target, skip, args.stall_after, stream(args.json), job=job)
    else:
        found = read_run(str(job.stdout) if job else args.target)
        result = figures(found.lines, found.spec, skip)
    code = _output.EXIT_OK if followed is None or followed["state"] == "finished" else 1
    _check_outputs(args, found.logs)
    device = recorded_device(found.logs, Path(found.run) if Path(found.run).is_dir() else None)
    compared = _against_plan(args.gpu, result, found, args.stack, device)
    if args.card:
        _check_card_device(args.gpu, compared, device)
    card = _write_card(args.card, found, result, compared, args.stack or DEFAULT_STACK, device) if args.card else None
    plot = _plot(args.plot, found, result, compared) if args.plot else None
    if args.json:
        _output.print_json(
            {
                "run": found.run,
                "logs": [str(p) for p in found.logs],
                "recipe": found.spec.name if found.spec else None,
                "figures": result.to_dict(),
                "device": {"name": device.name, "recorded": device.evidence},
                "plan": compared,
                "card": card,
                "follow": followed,
                "plot": plot,
            }
        )
        return code
    name = f" ({found.spec.name})" if found.spec else ""
    state = f" ({followed['state']})" if followed else ""
    print(f"watch {found.run}{name}: step {result.step}/{result.max_steps}{state}")
    rows = [("loss", _fmt(result.loss, ".4g") + f" (first logged {_fmt(result.initial_loss, '.4g')})")]
    window = f" (median over {len(result.window_steps)} logged steps)" if result.window_steps else ""
    rows.append(("step time", _fmt(result.step_time_s, ".4g", " s") + window))
    if result.tokens_per_s is not None:
        rows.append(
            (
                "tokens/s",
                f"{result.tokens_per_s:,.0f} ({result.tokens_per_s_per_gpu:,.0f} per GPU; the recipe's "
                f"{result.tokens_per_step:,} tokens per step over the step time)",
            )
        )
    if result.model_tflops_per_gpu is not None:
        rows.append(("TFLOP/s/GPU", f"{result.model_tflops_per_gpu:.4g} (model FLOPs, from the recipe)"))
    if result.peak_memory_reserved_bytes is not None:
        reserved = result.peak_memory_reserved_bytes / 2**30
        rows.append(("peak memory", f"{reserved:.2f} GiB reserved (max_memory_reserved, logged by rank 0)"))
    if result.eta_s is not None:
        left = result.max_steps - result.step
        rows.append(("ETA", f"{_duration(result.eta_s)} ({left:,} steps left at the step time)"))
    if device.name is not None:
        rows.append(("device", f"{device.name} (as the run recorded it: {device.evidence[0]})"))
    for label, value in rows:
        print(f"  {label:<12}{value}")
    if not result.window_steps:
        why = ", ".join(f"{count} {reason}" for reason, count in result.left_out_steps.items())
        print(f"  (no step time: none of the {len(result.logged)} logged steps counts: {why})")
    if compared is not None:
        print(f"  against the plan on {compared['gpu']}:")
        for name, row in compared["figures"].items():
            deviation = "" if row["deviation"] is None else f" ({row['deviation']:+.0%})"
            print(f"    {name:<22}measured {_fmt(row['measured'], '.4g')}, planned {row['planned']:.4g}{deviation}")
    for flag in result.flags + (followed["flags"] if followed else []) + (compared["warnings"] if compared else []):
        print(f"  ! {flag}")
    if card:
        print(f"  card written to {card}")
    if plot:
        print(f"  plot written to {plot}")
    return code


def _plot(path: str, found: Any, result: Any, compared: "dict | None") -> str:
    from nemo_recipes.watching.plot import plot_run  # standard library only: matplotlib is imported when it draws

    try:
        import matplotlib  # noqa: F401  (checked here to give the install hint rather than a traceback)
    except ImportError:
        raise _output.CLIError("--plot needs matplotlib; install it with: pip install 'nemo-recipes[plot]'") from None
    name = f" ({found.spec.name})" if found.spec else ""
    try:
        return plot_run(path, f"{found.run}{name}: step {result.step}/{result.max_steps}", result.to_dict(), compared)
    except OSError as error:
        raise _output.CLIError(f"cannot write {path}: {error.strerror or error}") from None


def _check_card_path(path: "str | None", overwrite: bool) -> None:
    """Refuse, before reading the run, a card that would replace a file without --overwrite (a card is a
    measurement: replacing one by mistake loses it), or --overwrite without --card."""
    if path is None:
        if overwrite:
            raise InvalidConfigError(
                [Problem("--overwrite", True, "changes nothing without --card.", "add --card FILE, or leave it out.")],
                context="watch",
            )
        return
    if os.path.lexists(path) and not overwrite:
        raise InvalidConfigError(
            [
                Problem(
                    "--card",
                    path,
                    "already exists; a card is not replaced without asking.",
                    "give another FILE, or add --overwrite to replace it.",
                )
            ],
            context="watch",
        )


def _check_outputs(args: argparse.Namespace, logs: Iterable[Any]) -> None:
    """--card and --plot: regular files (or new: never a directory, or a pipe that would block the write), and
    none of them one of the run's logs."""
    inputs = [("run", str(log)) for log in logs]
    problems = [
        p
        for field, path in (("--card", args.card), ("--plot", args.plot))
        if path is not None
        for p in output_problems(path, inputs, field)
    ]
    if problems:
        raise InvalidConfigError(problems, context="watch")


def _write_card(path: str, found: Any, result: Any, compared: "dict | None", stack: str, device: Any) -> str:
    """Write the run's card to `path` (atomically); a path that cannot be written is a failure (exit 1) with the
    reason, not a traceback."""
    from nemo_recipes.watching.card import build_card, run_identity, write_card

    card = build_card(
        found.run,
        found.logs,
        found.spec,
        result,
        compared,
        gpu=compared["gpu"] if compared else None,
        stack=stack,  # the program `against_plan` timed, which `plan --calibrate` fits for
        written_by=["nemo-recipes", *sys.argv[1:]],
        device=device,
        run_id=run_identity(found.logs, found.lines),
    )
    try:
        return str(write_card(path, card))
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = getattr(error, "strerror", None) or error
        raise _output.CLIError(f"cannot write the card {path}: {reason}") from None


def _check_card_device(gpu: object, compared: "dict | None", device: Any) -> None:
    """Refuse (exit 2) a card that names a GPU the run did not train on: the run recorded another device (the CPU
    of a smoke run), so its step times would calibrate that GPU with another device's."""
    from nemo_recipes.watching.device import GPU

    if compared is None or device.name in (None, GPU):
        return
    raise InvalidConfigError(
        [
            Problem(
                "--gpu",
                gpu,
                f"is not where the run trained: it recorded device {device.name} ({device.evidence[0]}), so a card "
                f"of it would calibrate {compared['gpu']} with step times of the {device.name}.",
                "write cards only of runs trained on the GPU they name; leave out --card to see this run beside "
                "the plan.",
            )
        ],
        context="watch",
    )


def _against_plan(gpu: object, result: object, found: object, stack: "str | None", device: Any) -> "dict | None":
    from nemo_recipes.watching.against_plan import against_plan
    from nemo_recipes.watching.device import GPU

    if gpu is None:
        return None
    spec = getattr(found, "spec", None)
    if spec is None:
        raise InvalidConfigError(
            [
                Problem(
                    "--gpu",
                    gpu,
                    "needs the run's recipe, which this run does not record (a log file alone).",
                    "give the run's directory (`smoke --dir`), or leave out --gpu.",
                )
            ],
            context="watch",
        )
    compared = against_plan(result, spec, str(gpu), stack)  # type: ignore[arg-type]
    if device.name not in (None, GPU):
        compared["warnings"].append(
            f"the run trained on the {device.name}, not on {compared['gpu']} ({device.evidence[0]}): the deviations "
            "measure the device, not the plan"
        )
    elif device.name is None:
        compared["warnings"].append(
            "the run's logs do not say which device it trained on (no Lightning 'GPU available: ..., used: ...' "
            "line, no smoke metrics.jsonl): a card of it is refused by `plan --calibrate`"
        )
    return compared


def _duration(seconds: float) -> str:
    """`seconds` as days and h:mm:ss, or in days alone beyond what datetime.timedelta holds (a log's absurd
    step count or step time would make it raise OverflowError)."""
    if seconds < datetime.timedelta.max.total_seconds():
        return str(datetime.timedelta(seconds=round(seconds)))
    return f"{seconds / 86400:.3g} days"


def _fmt(value: object, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"
