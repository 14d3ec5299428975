"""`nemo-recipes plan --calibrate CARD...`: refit the throughput model's efficiencies on the user's run cards (`watch
RUN --gpu GPU --card FILE`) and write the calibration file `plan` uses from then on; and which calibration a plan
uses (`chosen`) and whether it applies to that plan (`applied`).

Every card is read and checked before anything is fitted; the problems of all of them come back at once (exit 2).
The fit is `plan.calibration.refit`, the one `benchmarks/planner_accuracy.py` runs on the published rows.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any, Optional

from nemo_recipes.cli import _output
from nemo_recipes.errors import InvalidConfigError, InvalidInputError, Problem
from nemo_recipes.user_paths import output_problems

#: Options that plan a recipe: meaningless while calibrating, so refused rather than ignored.
_PLAN_OPTIONS = (
    ("recipe", "NAME"),
    ("overrides", "key=value"),
    ("fit", "--fit"),
    ("best", "--best"),
    ("plot", "--plot"),
    ("custom", "--custom"),
    ("tokens", "--tokens"),
    ("no_calibration", "--no-calibration"),
    ("nodes", "--nodes"),
    ("gpus_per_node", "--gpus-per-node"),
    ("gpu", "--gpu"),
)


def run(args: argparse.Namespace) -> int:
    from nemo_recipes import yaml_files
    from nemo_recipes.plan.calibration import (
        LEAVE_ONE_OUT_UP_TO,
        calibrate,
        case_from_card,
        default_calibration_path,
        replaced_error,
        run_identities,
        write_calibration,
    )
    from nemo_recipes.plan.stack import DEFAULT_STACK

    problems = [
        Problem(
            name.replace("_", "-") if flag.startswith("--") else name,
            getattr(args, name),
            "cannot be combined with --calibrate (which fits on the cards' own plans).",
            f"calibrate first, then plan: `nemo-recipes plan ... --calibration FILE`; leave {flag} out here.",
        )
        for name, flag in _PLAN_OPTIONS
        if getattr(args, name, None) not in (None, False, [])
    ]
    stack = args.stack or DEFAULT_STACK
    target = args.calibration or str(default_calibration_path())
    # The calibration written must not replace a card it is fitted on, nor be a pipe that blocks the write.
    problems += output_problems(target, [("calibrate", card) for card in args.calibrate], "calibration")
    cases = []
    seen: dict[str, str] = {}  # what makes a card one run (run_identities) -> the first card found with it
    for path in args.calibrate:
        if "\0" in path:  # no file has this name; `open` would raise ValueError, not OSError
            problems.append(Problem("calibrate", path, "is not a file name (it holds a NUL byte).", "give a card."))
            continue
        try:
            card = yaml_files.read_file(
                path, field="calibrate", fix="give a card written by `nemo-recipes watch RUN --gpu GPU --card FILE`."
            )
        except InvalidConfigError as error:
            problems += error.problems
            continue
        same = next((seen[key] for key in run_identities(card) if key in seen), None)
        if same is not None:
            twice = "is given twice" if same == path else f"records the same run as {same}"
            why = f"{twice}: fitted twice, one run would weigh as two."
            problems.append(Problem("calibrate", path, why, "give each run's card once."))
            continue
        seen.update(dict.fromkeys(run_identities(card), path))
        found, wrong = case_from_card(card, path, stack)
        problems += wrong
        if found is not None:
            cases.append(found)
    if not problems and len(cases) < 2:
        problems.append(
            Problem(
                "calibrate",
                list(args.calibrate),
                "needs at least two runs (one to fit on while the other is left out to score the fit).",
                "give the cards of two or more runs; more runs, and more varied ones, fit better.",
            )
        )
    if problems:
        raise InvalidConfigError(problems, context="plan --calibrate")

    calibration, held_out = calibrate(cases, stack=stack)
    path = target
    replaced, what = _in_use(path)
    baseline = replaced_error(cases, replaced)
    _refuse_if_no_better(calibration.errors["held_out"] or 0.0, baseline, what, list(args.calibrate))
    try:
        written = write_calibration(path, calibration)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = getattr(error, "strerror", None) or error
        raise _output.CLIError(f"cannot write the calibration {path}: {reason}") from None
    errors = calibration.errors
    if args.json:
        payload = calibration.to_dict()
        payload["file"] = str(written)
        payload["held_out_error_pct"] = held_out
        payload["replaced"] = {"what": what, "mean_abs_error_pct": baseline}
        _output.print_json(payload)
        return _output.EXIT_OK
    from nemo_recipes.plan.throughput import CONSTANTS

    folds = "one run left out at a time" if len(cases) <= LEAVE_ONE_OUT_UP_TO else f"in {LEAVE_ONE_OUT_UP_TO} folds"
    print(f"calibrated on {len(cases)} run(s) of {', '.join(calibration.gpus)}, {stack}:")
    print(f"  mean |error| of the step time on them: {errors['before']:.1f} % with the shipped constants")
    print(f"  {'':38s}{errors['after']:.1f} % refitted")
    print(f"  {'':38s}{errors['held_out']:.1f} % left out ({folds}: the honest figure)")
    print(f"  {'':38s}{baseline:.1f} % with {what}, which it replaces")
    changed = [
        f"{f.name} {getattr(CONSTANTS, f.name):g} -> {getattr(calibration.constants, f.name):g}"
        for f in fields(CONSTANTS)
        if getattr(CONSTANTS, f.name) != getattr(calibration.constants, f.name)
    ]
    print(f"  constants: {', '.join(changed) or 'unchanged (the shipped ones fit best)'}")
    print(f"calibration written to {written}; `plan` uses it for plans on {', '.join(calibration.gpus)}")
    held_out_error, shipped_error = errors["held_out"], errors["before"]  # both set by `calibrate`
    if held_out_error is not None and shipped_error is not None and held_out_error >= shipped_error:
        # The in-sample figure always improves; only the left-out one says whether the refit generalises. Written
        # all the same (it was asked for), with the way back.
        print(
            f"  ! left out, the refit does worse than the shipped constants ({held_out_error:.1f} % against "
            f"{shipped_error:.1f} %): these runs do not pin the constants down (too few, or too alike); add more "
            f"varied runs, or plan without it (--no-calibration, or remove {written})"
        )
    return _output.EXIT_OK


def _in_use(path: str) -> tuple[Any, str]:
    """The calibration the file `path` holds now, which a new one would replace (None when there is none or it
    does not read: plans use the shipped constants then), and its name in messages."""
    from pathlib import Path

    from nemo_recipes.plan.calibration import read_calibration

    if Path(path).is_file():
        try:
            return read_calibration(path, field="calibration"), f"the calibration in {path}"
        except InvalidConfigError:
            pass
    return None, "the shipped constants"


def _refuse_if_no_better(held_out: float, baseline: float, what: str, cards: list[str]) -> None:
    """A refit that does no better, on runs it did not see, than what plans use now would make the plans worse:
    refused (exit 2) and nothing written, so what is in use stays in use. The in-sample error always improves;
    only the left-out one says whether the refit holds for a run it was not fitted on."""
    if held_out < baseline:
        return
    raise InvalidConfigError(
        [
            Problem(
                "calibrate",
                cards,
                f"gives a refit that, left out, is off by {held_out:.1f} % on these runs against {baseline:.1f} % "
                f"for {what}: it would make plans worse, so nothing is written and plans keep {what}.",
                "add cards of more, and more varied, runs (other sizes, layouts, node counts), so that the refit "
                "holds on runs it was not fitted on.",
            )
        ],
        context="plan --calibrate",
    )


def chosen(args: argparse.Namespace) -> Any:
    """The calibration to plan with: --calibration FILE, else the default file when it exists, checked before it is
    trusted (exit 2 with field, value and fix); None with --no-calibration or when there is none."""
    if args.no_calibration:
        if args.calibration is not None:
            raise InvalidInputError(
                [
                    Problem(
                        "no_calibration",
                        True,
                        "cannot be combined with --calibration.",
                        "give --calibration FILE to plan with it, or --no-calibration to plan without any.",
                    )
                ]
            )
        return None
    from nemo_recipes.plan.calibration_path import default_calibration_path

    path = args.calibration
    if path is None:
        path = default_calibration_path()
        if not path.exists():  # anything else there (a pipe, a directory) is refused by the reader, never opened
            return None
    from nemo_recipes.plan.calibration import read_calibration  # json and the fitted constants: only with a file

    return read_calibration(path, field="calibration")


def applied(calibration: Any, spec: Any, cluster: Any, stack: Optional[str]) -> "dict | None":
    """Whether `calibration` applies to this plan, and why (or why not): its constants were measured on some GPUs,
    one stack and some precisions, and say nothing about others, whose plans keep the shipped constants."""
    if calibration is None:
        return None
    gpu = cluster.gpu.name if cluster.gpu is not None else None
    from nemo_recipes.plan.stack import DEFAULT_STACK

    wanted = stack or DEFAULT_STACK
    reasons = []
    if not calibration.applies_to(gpu):
        reasons.append(f"GPU {gpu} (fitted on {', '.join(calibration.gpus)})")
    if spec.precision not in calibration.precisions:
        reasons.append(f"precision {spec.precision} (fitted on {', '.join(calibration.precisions)})")
    if wanted != calibration.stack:
        reasons.append(f"stack {wanted} (fitted on {calibration.stack})")
    errors = calibration.errors
    if reasons:
        note = f"calibration {calibration.source} not applied: another " + "; another ".join(reasons)
    else:
        note = (
            f"step time calibrated on {len(calibration.runs)} run(s) ({calibration.source}): mean |error| on them "
            f"{_pct(errors.get('before'))} with the shipped constants, {_pct(errors.get('after'))} refitted, "
            f"{_pct(errors.get('held_out'))} left out"
        )
    return {"file": calibration.source, "applied": not reasons, "note": note}


def _pct(value: object) -> str:
    return f"{value:.1f} %" if isinstance(value, (int, float)) else "?"
