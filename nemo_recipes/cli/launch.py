"""`nemo-recipes launch NAME --executor PROFILE`: hand the recipe, the executor and the recipe plugin to NeMo-Run.

The executor is a preset (`local`, `slurm`, `kubernetes`) or a cluster profile from the profiles file; the plugin
sets the trainer's nodes and devices from the executor and refuses an invalid plan before anything is submitted.
Imports NeMo and NeMo-Run inside `run` only.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from nemo_recipes.catalog import get_recipe, plain_name_problems
from nemo_recipes.cli import _output
from nemo_recipes.cli._executor_options import add_executor_arguments, executor_args
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import InvalidConfigError, InvalidInputError, Problem, known
from nemo_recipes.overrides import apply_overrides

HELP = VERBS["launch"].help
EXAMPLES = """\
  nemo-recipes launch gpt_1_3b --executor local --dryrun
  nemo-recipes launch gpt_1_3b --executor local -E devices=8 --dryrun
  nemo-recipes launch gpt_70b --executor my_slurm   # a profile of ~/.config/nemo-recipes/clusters.yaml
  nemo-recipes launch gpt_70b --executor slurm -E account=proj -E partition=batch -E nodes=4 -E gpu=h100 --detach
  nemo-recipes launch gpt_7b --executor my_k8s train_tokens=1T --name gpt7b-1t"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Imports NeMo "
        "(several seconds). An invalid plan for the executor's hardware exits 2 before "
        "anything is submitted. A Slurm job is followed through Slurm's own states "
        "(PENDING, RUNNING, requeued n times, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, "
        "NODE_FAIL, PREEMPTED) and where its logs are is printed; it exits 1 unless the "
        "job completed (--detach: the state once). Any other executor's job is reported in NeMo-Run's state with "
        "its log files; it exits 1 unless the job succeeded (lost: UNKNOWN), --detach unless it failed or was "
        "cancelled. A job sbatch refuses exits 2 and "
        "leaves no experiment directory.",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _output.recipe_arguments(
        parser, "change recipe fields first, e.g. train_tokens=1T (names as in `nemo-recipes show`)"
    )
    parser.add_argument(
        "--executor",
        required=True,
        metavar="PROFILE",
        help="a preset (local, slurm, kubernetes) or a cluster profile name",
    )
    add_executor_arguments(
        parser,
        example="nodes=8",
        clusters_help="cluster profiles file "
        "(default: $NEMO_RECIPES_CLUSTERS, else ~/.config/nemo-recipes/clusters.yaml)",
    )
    parser.add_argument("--dryrun", action="store_true", help="show what would run; submit nothing")
    parser.add_argument("--detach", action="store_true", help="return once submitted instead of following the job")
    parser.add_argument("--name", default=None, help="experiment name (default: NAME)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON: {recipe, executor, executor_class, gpu, nodes, devices, dryrun, "
        "experiment_id, overrides, slurm, job}",
    )
    parser.set_defaults(run=run)


def _hardware_problems(overrides: dict[str, Any], executor: Any, name: str) -> list[Problem]:
    """The recipe plugin sets the trainer's nodes and devices from the executor, so a recipe override of either
    that the executor does not match would be dropped without a word."""
    problems = []
    for field, actual, option in (
        ("num_nodes", executor.nnodes(), "nodes"),
        ("num_gpus_per_node", executor.nproc_per_node(), "devices or gpus_per_node"),
    ):
        if field in overrides and overrides[field] != actual:
            problems.append(
                Problem(
                    field,
                    overrides[field],
                    f"differs from the {actual} the {name} executor gives, and the executor "
                    "decides the job's hardware (the recipe plugin sets the trainer from it).",
                    f"set it on the executor instead (-E {option.split()[0]}=...), or drop {field}=...",
                )
            )
    return problems


def run(args: argparse.Namespace) -> int:
    from nemo_recipes.cli._recipe_config import build_partial

    # Everything the command line says is checked before NeMo and NeMo-Run are imported (seconds).
    problems = plain_name_problems("name", args.name) if args.name is not None else []
    try:
        spec, overrides = apply_overrides(get_recipe(args.recipe), args.overrides)
    except InvalidInputError as error:
        problems, spec, overrides = problems + error.problems, None, {}
    try:
        executor_kwargs = executor_args(args.executor_arg)
    except InvalidInputError as error:
        problems, executor_kwargs = problems + error.problems, {}
    if problems:
        raise InvalidInputError(problems, context=f"launch {args.recipe}")
    # NeMo and NeMo-Run print progress on stdout; with --json, stdout must hold only the JSON.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        try:
            from nemo_recipes.executors import submission
            from nemo_recipes.executors.plugin import RecipePlugin
            from nemo_recipes.executors.profiles import executor_for
        except ImportError as error:
            raise _output.CLIError(
                f"launch needs NeMo-Run and the executor presets ({error}); install them with: pip install nemo-recipes"
            ) from None
        spec = known(spec, "apply_overrides gave a spec or a problem, raised above")
        executor, gpu = executor_for(args.executor, args.clusters, **executor_kwargs)
        problems = _hardware_problems(overrides, executor, args.executor)
        if problems:
            raise InvalidInputError(problems, context=f"launch {spec.name} on {args.executor}")
        # The recipe is built and validated once, on the executor's hardware: validated on the row's own nodes
        # first, a layout that fits the executor (gpt_70b with PP 8 on 8 nodes) was refused for the row's 4 nodes.
        try:
            spec = spec.replace(num_nodes=executor.nnodes(), num_gpus_per_node=executor.nproc_per_node())
            partial = build_partial(spec, name=args.name)
        except InvalidInputError as error:
            where = f" ({error.context})" if error.context else ""
            raise InvalidInputError(
                error.problems, context=f"launch {spec.name} on {args.executor}{where}: not submitted"
            ) from None
        name = args.name or spec.name
        unreachable = [] if args.dryrun else submission.api_server_problems(executor)
        if unreachable:
            raise _output.CLIError(f"launch {name} on {args.executor}: nothing was submitted", problems=unreachable)
        try:
            job = submission.submit(
                partial, executor, name=name, plugins=[RecipePlugin(gpu=gpu)], dryrun=args.dryrun, detach=args.detach
            )
        except InvalidConfigError as error:  # the scheduler refused what the user can fix
            raise InvalidConfigError(
                error.problems, context=f"launch {name} on {args.executor}: not submitted"
            ) from None
        except submission.SubmissionError as error:  # a scheduler refusing the job, a tunnel failing
            raise _output.CLIError(
                f"NeMo-Run could not {'dry-run' if args.dryrun else 'launch'} {name} on {args.executor}: {error}"
                + (f" (nothing was submitted; removed {error.removed})" if error.removed else ""),
                problems=error.problems,
            ) from None
        state, ended = None, None
        if job.slurm and not args.dryrun:
            # NeMo-Run folds TIMEOUT, NODE_FAIL and PREEMPTED into FAILED: Slurm's own states are followed here.
            state = _slurm_state(job.experiment, job.job_id, executor, follow=not args.detach)
        elif not args.dryrun:
            # Any other executor: NeMo-Run's own state, which `run` waited for unless --detach.
            ended = submission.outcome(job.experiment, job.job_id)
            print(ended.format(job.job_id, job.experiment_id), file=sys.stderr, flush=True)

    if args.json:
        _output.print_json(
            {
                "recipe": spec.name,
                "executor": args.executor,
                "executor_class": type(executor).__name__,
                "gpu": gpu,
                "nodes": executor.nnodes(),
                "devices": executor.nproc_per_node(),
                "dryrun": args.dryrun,
                "experiment_id": job.experiment_id,
                "overrides": overrides,
                "slurm": state.to_dict() if state else None,
                "job": ended.to_dict() if ended else None,
            }
        )
    if ended is not None and ended.failed(followed=not args.detach):
        return _output.EXIT_FAILURE
    if job.slurm and not args.dryrun and not args.detach and (state is None or not state.terminal):
        return _output.EXIT_FAILURE  # lost: neither scontrol nor sacct knows the job (said on stderr)
    if state is not None and state.terminal and not state.succeeded:
        return _output.EXIT_FAILURE
    return _output.EXIT_OK


def _slurm_state(experiment: Any, job_id: str, executor: Any, *, follow: bool) -> Any:
    """Slurm's state of the job (each change while following it) and where its logs are, on stderr."""
    from nemo_recipes.executors.slurm_executor import state as slurm_state

    return slurm_state.watch(
        experiment, job_id, executor, follow_job=follow, out=lambda line: print(line, file=sys.stderr, flush=True)
    )
