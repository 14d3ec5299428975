"""`nemo-recipes smoke NAME`: prove that a recipe trains. NeMo's own `llm.pretrain` trains the recipe scaled down in
shape (every other choice kept), stops, resumes from its checkpoint in fresh processes, and the run is judged.

On a machine without CUDA the CPU compatibility layer engages (gloo); with GPUs it is a real short run on them
(`--full-size` keeps the recipe's shape). Imports NeMo in the training processes only; this process stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Optional

from nemo_recipes.catalog import get_recipe
from nemo_recipes.cli import _output
from nemo_recipes.cli._executor_options import add_executor_arguments
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import InvalidInputError, Problem
from nemo_recipes.overrides import parse_overrides

if TYPE_CHECKING:  # this process stays light: the launchers are imported only with --executor
    from nemo_recipes.smoke_training.launchers import Launcher

HELP = VERBS["smoke"].help
EXAMPLES = """\
  nemo-recipes smoke gpt_1_3b                                  # 1 process, 20 steps: train 10, stop, resume to 20
  nemo-recipes smoke gpt_70b --processes 2                     # TP2, as far as two processes allow
  nemo-recipes smoke gpt_70b --processes 2 tensor_parallel=1 pipeline_parallel=2
  nemo-recipes smoke gpt_7b --executor local -E devices=2      # through NeMo-Run's local executor (torchrun)
  nemo-recipes smoke gpt_1_3b --full-size --steps 30 --json    # on a GPU: the real shape, tokens/s in the report
  nemo-recipes smoke gpt_7b data_paths=[d/hamlet,d/macbeth] tokenizer_path=d/tokenizer  # on `data prepare`d text"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "smoke",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". The report gives the steps, the loss "
        "curve, seconds per step, the checkpoint size and each check, PASS or FAIL (resumed at the right step, "
        "resume restored the exact state, learning rate follows the schedule, data position continuous, loss "
        "finite, model learned, last checkpoint resumable; with data parallelism, replicas identical; with "
        "--invariance, layout invariant). Exits 1 when a check fails.",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _output.recipe_arguments(
        parser, "recipe fields applied after scaling down, e.g. tensor_parallel=2 or hidden_dropout=0"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="training processes on this machine (default 1; with --executor: the executor's)",
    )
    parser.add_argument("--steps", type=int, default=20, metavar="N", help="steps in all (default 20)")
    parser.add_argument(
        "--stop-step",
        type=int,
        default=None,
        metavar="N",
        help="stop after this step and resume in fresh processes (default: half of --steps)",
    )
    parser.add_argument(
        "--full-size",
        action="store_true",
        help="keep the recipe's shape (for GPUs); only the layout and the schedule are fitted",
    )
    parser.add_argument(
        "--dir", default=None, help="keep the run's files here (default: a temporary directory, removed after a pass)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory after a pass")
    parser.add_argument(
        "--no-sample",
        dest="sample",
        action="store_false",
        help="with data_paths and tokenizer_path: skip sampling text from the last checkpoint (saves a minute)",
    )
    parser.add_argument(
        "--executor",
        metavar="PROFILE",
        default=None,
        help="run each phase through a NeMo-Run executor: a preset (local, slurm) or a profile",
    )
    parser.add_argument(
        "--invariance",
        action="store_true",
        help="also train the one-process model of the same shape straight through, in a process of its own, and "
        "check that the loss curve equals it (dropout off in both; about one more minute). With several processes "
        "it checks the layout; with one it works too, checking the stopped and resumed run against an independent "
        "uninterrupted run",
    )
    add_executor_arguments(parser, example="devices=2")
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON (progress goes to standard error)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from nemo_recipes.smoke_training import smoke

    spec = get_recipe(args.recipe)
    overrides, problems = parse_overrides(args.overrides)
    if problems:
        raise InvalidInputError(problems, context=f"smoke {spec.name}")
    launch: Optional[Launcher] = None
    processes = args.processes if args.processes is not None else 1
    # NeMo-Run prints its progress on stdout; with --json, stdout holds only the report.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        if args.executor:
            launch, processes = _executor_launch(args)
        report = smoke(
            spec,
            overrides,
            processes=processes,
            steps=args.steps,
            stop_step=args.stop_step,
            full_size=args.full_size,
            dir=args.dir,
            keep=args.keep,
            launch=launch,
            progress=sys.stderr,
            sample=args.sample,
            invariance=args.invariance,
        )
    if args.json:
        _output.print_json(report.to_dict())
    else:
        print(report.format())
    return _output.EXIT_OK if report.passed else _output.EXIT_FAILURE


def _executor_launch(args: argparse.Namespace) -> tuple[Launcher, int]:
    from nemo_recipes.cli._executor_options import executor_args
    from nemo_recipes.executors.profiles import executor_for
    from nemo_recipes.smoke_training.launchers import executor_launcher

    executor, _gpu = executor_for(args.executor, args.clusters, **executor_args(args.executor_arg))
    world = executor.nnodes() * executor.nproc_per_node()
    if args.processes is not None and args.processes != world:
        raise InvalidInputError(
            [
                Problem(
                    "processes",
                    args.processes,
                    f"differs from the executor's {world} process(es) (nodes x devices).",
                    "leave --processes out with --executor, or change the executor's devices or nodes with -E.",
                )
            ],
            context=f"smoke {args.recipe}",
        )
    import nemo_run as run

    from nemo_recipes.executors.submission import api_server_problems

    problems = api_server_problems(executor)
    if problems:  # a scheduler that cannot be reached is a failure outside the input: exit 1, as for launch
        raise _output.CLIError(f"smoke {args.recipe} on {args.executor}: nothing was started", problems=problems)
    if isinstance(executor, run.LocalExecutor):  # its processes run on this machine, which must hold them
        from nemo_recipes.smoke_training.runner import machine_problems

        problems = machine_problems(world, args.full_size, field="devices", option="-E devices=")
        if problems:
            raise InvalidInputError(problems, context=f"smoke {args.recipe} on this machine")
    return executor_launcher(executor, experiment=f"smoke-{args.recipe}"), world
