"""Pretrain a GPT recipe on any cluster: the executor is one word.

    python examples/pretrain_gpt.py --recipe gpt_7b --executor local --devices 8 --dryrun
    python examples/pretrain_gpt.py --recipe gpt_70b --executor slurm --account my_acct --nodes 4 --gpu h100
    python examples/pretrain_gpt.py --recipe gpt_70b --executor kubernetes --nodes 4 --dryrun
    python examples/pretrain_gpt.py --recipe gpt_70b --executor my_slurm          # a profile in clusters.yaml

--dryrun prints what would be submitted (sbatch script, TrainJob manifest or torchrun command) and submits nothing.
--check submits examples/dist_check.py under torchrun instead of training, on the same executor, after validating
the recipe on that hardware: a CPU-friendly way to prove a cluster setup (NeMo's training loop needs CUDA).
--set KEY=VALUE overrides a recipe field (e.g. --set global_batch_size=2048), read as `nemo-recipes show NAME
KEY=VALUE` reads it; repeat it for more. A flag the executor does not take (--devices for Slurm) is refused.
A Slurm job is followed through Slurm's own states (PENDING, RUNNING, requeued n times, SUCCEEDED, FAILED,
CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED) and the path of its logs is printed; the exit status is 0 only for a job
that COMPLETED (--detach: once submitted). A job sbatch refuses leaves no experiment directory behind and exits 2.
"""

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="gpt_7b", help="gpt_1_3b, gpt_7b, gpt_13b, gpt_70b or gpt_175b")
    p.add_argument("--executor", default="local", help="local, slurm, kubernetes, or a cluster profile name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe field override")
    p.add_argument("--gpu", help="GPU type to plan memory against (default: the profile's, or none)")
    p.add_argument("--devices", type=int, help="local: processes on this machine")
    p.add_argument("--nodes", type=int, help="slurm/kubernetes: nodes")
    p.add_argument("--gpus-per-node", type=int, help="slurm/kubernetes: GPUs per node (0: CPU-only Slurm)")
    p.add_argument("--processes-per-node", type=int, help="slurm/kubernetes: ranks per node (default: GPUs)")
    p.add_argument("--account", help="slurm: account (default: $SBATCH_ACCOUNT)")
    p.add_argument("--partition", help="slurm: partition")
    p.add_argument("--time", help="slurm: time limit")
    p.add_argument("--no-container", action="store_true", help="slurm: run on the nodes' own Python")
    p.add_argument("--namespace", help="kubernetes: namespace")
    p.add_argument(
        "--trainer-version",
        help="kubernetes: the cluster's Kubeflow Trainer release, v2.1, v2.2 or v2.3 "
        "(default v2.3; see examples/README.md)",
    )
    p.add_argument("--name", default=None, help="experiment name (default: the recipe name)")
    p.add_argument("--dryrun", action="store_true", help="print what would be submitted, submit nothing")
    p.add_argument("--check", action="store_true", help="run examples/dist_check.py instead of training")
    p.add_argument("--detach", action="store_true", help="submit and return without following the job")
    return p.parse_args(argv)


# The executor flags each preset takes: flag attribute -> preset argument.
PRESET_FLAGS = {
    "local": {"devices": "devices", "gpu": "gpu"},
    "slurm": {
        "nodes": "nodes",
        "gpus_per_node": "gpus_per_node",
        "processes_per_node": "processes_per_node",
        "account": "account",
        "partition": "partition",
        "time": "time",
        "gpu": "gpu",
        "no_container": "container_image",
    },
    "kubernetes": {
        "nodes": "nodes",
        "gpus_per_node": "gpus_per_node",
        "processes_per_node": "processes_per_node",
        "namespace": "namespace",
        "gpu": "gpu",
        "trainer_version": "trainer_version",
    },
}


def executor_arguments(args: argparse.Namespace) -> dict:
    """The preset arguments the flags give. A flag the executor's preset does not take is refused rather than
    dropped (`--devices 8` means nothing to Slurm), and Slurm's account comes from --account, $SBATCH_ACCOUNT or
    the profile, or is reported missing."""
    from nemo_recipes.errors import InvalidRecipeError, Problem
    from nemo_recipes.executors.profiles import PRESET_NAMES, get_profile

    profile = None if args.executor in PRESET_NAMES else get_profile(args.executor)
    preset = profile.preset if profile else args.executor
    names = PRESET_FLAGS[preset]
    where = f" (profile {args.executor})" if profile else ""
    problems = [
        Problem(
            f"--{attr.replace('_', '-')}",
            value,
            f"does not apply to the {preset} executor{where}.",
            f"drop it; the {preset} executor takes {', '.join('--' + a.replace('_', '-') for a in names)}.",
        )
        for attr, value in vars(args).items()
        if attr in _EXECUTOR_FLAGS and attr not in names and value is not None and value is not False
    ]
    kwargs = {
        key: getattr(args, attr)
        for attr, key in names.items()
        if attr != "no_container" and getattr(args, attr) is not None
    }
    if preset == "slurm":
        if args.no_container:
            kwargs["container_image"] = None
        if "account" not in kwargs and os.environ.get("SBATCH_ACCOUNT"):
            kwargs["account"] = os.environ["SBATCH_ACCOUNT"]
        if "account" not in kwargs and not (profile and "account" in profile.args):
            problems.append(
                Problem(
                    "--account",
                    None,
                    "the slurm executor needs a Slurm account.",
                    "give --account NAME or export SBATCH_ACCOUNT=NAME (sacctmgr show assoc user=$USER lists yours).",
                )
            )
        if args.check:  # the job must find this Python (and its torchrun)
            kwargs["env"] = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if problems:
        raise InvalidRecipeError(problems, context="executor flags")
    return kwargs


_EXECUTOR_FLAGS = {attr for names in PRESET_FLAGS.values() for attr in names}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return pretrain(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # one message, never a traceback (NEMO_RECIPES_DEBUG=1 shows it)
        if os.environ.get("NEMO_RECIPES_DEBUG", "") not in ("", "0"):
            raise
        print(
            f"{Path(__file__).name}: internal error ({type(error).__name__}: {error}); run again with "
            "NEMO_RECIPES_DEBUG=1 for the traceback.",
            file=sys.stderr,
        )
        return 1


def pretrain(args: argparse.Namespace) -> int:
    import nemo_run as run

    import nemo_recipes
    from nemo_recipes.catalog import get_recipe, plain_name_problems
    from nemo_recipes.errors import InvalidRecipeError, RecipeError
    from nemo_recipes.executors import RecipePlugin, executor_for
    from nemo_recipes.overrides import apply_overrides, parse_overrides

    try:
        problems = plain_name_problems("name", args.name) if args.name is not None else []
        try:
            spec, _ = apply_overrides(get_recipe(args.recipe), args.set)
        except InvalidRecipeError as error:
            problems, spec = problems + error.problems, None
            if error.problems[0].field == "recipe":  # the items were not read: no recipe to apply them to
                problems += parse_overrides(args.set)[1]
        try:
            executor_kwargs = executor_arguments(args)
        except InvalidRecipeError as error:
            problems, executor_kwargs = problems + error.problems, {}
        if problems:
            raise InvalidRecipeError(problems, context=f"{Path(__file__).name}")
        recipe = nemo_recipes.build_recipe(spec)
        executor, gpu = executor_for(args.executor, **executor_kwargs)
        plugin = RecipePlugin(gpu=gpu)
        if args.check:
            # Validate the recipe on this hardware exactly as a training submission would, then run the CPU check.
            plugin.setup(recipe, executor.clone())
            print(
                f"{args.recipe}: plan valid on {executor.nnodes()} node(s) x {executor.nproc_per_node()} "
                f"process(es); running the torch.distributed check instead of training",
                flush=True,
            )
            task, plugins = run.Script(path=str(HERE / "dist_check.py"), entrypoint="python"), [RecipePlugin()]
        else:
            task, plugins = recipe, [plugin]
        if args.dryrun:  # NeMo-Run's own dry run, printing the sbatch script / TrainJob manifest / torchrun command
            from nemo_recipes.executors.render import artifact

            print(artifact(task, executor, name=args.recipe, plugins=plugins))
            return 0
        exp = None
        try:
            with run.Experiment(args.name or args.recipe, executor=executor) as exp:
                job = exp.add(task, executor=executor, name=args.recipe, plugins=plugins)
                exp.run(detach=True)
        except Exception as error:  # the scheduler refusing the job (account, partition, ...), in its words
            from nemo_recipes.executors.submission import discard_unsubmitted, refusal_problems

            discard_unsubmitted(exp)  # no half-made experiment for a job that never existed
            problems = refusal_problems(error, executor)
            if problems:
                raise InvalidRecipeError(problems, context=f"{args.executor}: the job was not submitted") from None
            print(
                f"{args.executor}: the job was not submitted: {type(error).__name__}: {error}\nFix: check the "
                "account, partition, QoS and time limit the cluster accepts (sinfo -s; sacctmgr show assoc "
                "user=$USER).",
                file=sys.stderr,
            )
            return 1
    except RecipeError as error:
        print(error, file=sys.stderr)
        return 2
    if isinstance(executor, run.SlurmExecutor):
        return follow_slurm(exp, job, executor, once=args.detach)
    if args.detach or isinstance(executor, run.LocalExecutor):
        return 0
    return follow(exp, job)


def follow_slurm(exp, job_id: str, executor, once: bool = False, timeout: float = 3600.0) -> int:
    """Slurm's own word for each state the job goes through (NeMo-Run would say FAILED for TIMEOUT, NODE_FAIL or
    PREEMPTED, and PENDING for a requeue), then where its logs are: 0 once it COMPLETED, 1 for any other end."""
    from nemo_recipes.executors.slurm_executor import state as slurm_state

    state = slurm_state.watch(
        exp, job_id, executor, follow_job=not once, timeout=timeout, out=lambda line: print(line, flush=True)
    )
    if once:
        return 0
    exp.logs(job_id)
    return 0 if state is not None and state.succeeded else 1


def follow(exp, job_id: str, timeout: float = 3600.0) -> int:
    """Follow the job through run.Experiment status until it ends, then print its logs."""
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        state = str(exp.status(return_dict=True)[job_id]["status"])
        if state != last:
            print(f"status: {state}", flush=True)
            last = state
        if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(2)
    exp.logs(job_id)
    return 0 if last == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
