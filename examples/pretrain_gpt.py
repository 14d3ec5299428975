"""Pretrain a GPT recipe on any cluster: the executor is one word.

    python examples/pretrain_gpt.py --recipe gpt_7b --executor local --devices 8 --dryrun
    python examples/pretrain_gpt.py --recipe gpt_70b --executor slurm --account my_acct --nodes 4 --gpu h100
    python examples/pretrain_gpt.py --recipe gpt_70b --executor kubernetes --nodes 4 --dryrun
    python examples/pretrain_gpt.py --recipe gpt_70b --executor my_slurm          # a profile in clusters.yaml

--dryrun prints what would be submitted (sbatch script, TrainJob manifest or torchrun command) and submits nothing.
--check submits examples/dist_check.py under torchrun instead of training, on the same executor, after validating
the recipe on that hardware: a CPU-friendly way to prove a cluster setup (NeMo's training loop needs CUDA).
--set KEY=VALUE overrides a recipe field (e.g. --set global_batch_size=2048); repeat it for more.
"""

import argparse
import ast
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
    p.add_argument("--account", default=os.environ.get("SBATCH_ACCOUNT"), help="slurm: account")
    p.add_argument("--partition", help="slurm: partition")
    p.add_argument("--time", help="slurm: time limit")
    p.add_argument("--no-container", action="store_true", help="slurm: run on the nodes' own Python")
    p.add_argument("--namespace", help="kubernetes: namespace")
    p.add_argument("--trainer-version", help="kubernetes: the cluster's Kubeflow Trainer release, v2.1, v2.2 or v2.3 "
                                             "(default v2.3; see examples/README.md)")
    p.add_argument("--name", default=None, help="experiment name (default: the recipe name)")
    p.add_argument("--dryrun", action="store_true", help="print what would be submitted, submit nothing")
    p.add_argument("--check", action="store_true", help="run examples/dist_check.py instead of training")
    p.add_argument("--detach", action="store_true", help="submit and return without following the job")
    return p.parse_args(argv)


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def executor_arguments(args: argparse.Namespace) -> dict:
    names = {
        "local": {"devices": "devices", "gpu": "gpu"},
        "slurm": {"nodes": "nodes", "gpus_per_node": "gpus_per_node", "processes_per_node": "processes_per_node",
                  "account": "account", "partition": "partition", "time": "time", "gpu": "gpu"},
        "kubernetes": {"nodes": "nodes", "gpus_per_node": "gpus_per_node", "processes_per_node": "processes_per_node",
                       "namespace": "namespace", "gpu": "gpu", "trainer_version": "trainer_version"},
    }
    from nemo_recipes.executors.profiles import PRESET_NAMES, get_profile

    preset = args.executor if args.executor in PRESET_NAMES else get_profile(args.executor).preset
    kwargs = {key: getattr(args, attr) for attr, key in names[preset].items() if getattr(args, attr) is not None}
    if preset == "slurm" and args.no_container:
        kwargs["container_image"] = None
    if preset == "slurm" and args.check:  # the job must find this Python (and its torchrun)
        kwargs["env"] = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return kwargs


def main(argv=None) -> int:
    args = parse_args(argv)
    import nemo_run as run

    import nemo_recipes
    from nemo_recipes.errors import RecipeError
    from nemo_recipes.executors import RecipePlugin, executor_for

    try:
        overrides = dict(item.split("=", 1) for item in args.set)
        recipe = getattr(nemo_recipes, args.recipe)(**{k: _value(v) for k, v in overrides.items()})
        executor, gpu = executor_for(args.executor, **executor_arguments(args))
        plugin = RecipePlugin(gpu=gpu)
        if args.check:
            # Validate the recipe on this hardware exactly as a training submission would, then run the CPU check.
            plugin.setup(recipe, executor.clone())
            print(f"{args.recipe}: plan valid on {executor.nnodes()} node(s) x {executor.nproc_per_node()} "
                  f"process(es); running the torch.distributed check instead of training", flush=True)
            task, plugins = run.Script(path=str(HERE / "dist_check.py"), entrypoint="python"), [RecipePlugin()]
        else:
            task, plugins = recipe, [plugin]
        if args.dryrun:  # NeMo-Run's own dry run, printing the sbatch script / TrainJob manifest / torchrun command
            from nemo_recipes.executors.render import artifact

            print(artifact(task, executor, name=args.recipe, plugins=plugins))
            return 0
        with run.Experiment(args.name or args.recipe, executor=executor) as exp:
            job = exp.add(task, executor=executor, name=args.recipe, plugins=plugins)
            exp.run(detach=True)
    except RecipeError as error:
        print(error, file=sys.stderr)
        return 2
    if args.detach or isinstance(executor, run.LocalExecutor):
        return 0
    return follow(exp, job)


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
