"""Several recipes in one run.Experiment, each attached to the same cluster by the recipe plugin.

    python examples/multi_recipe.py --executor local --devices 8 --dryrun
    python examples/multi_recipe.py --executor my_slurm --recipes gpt_7b gpt_13b

The plugin sets each recipe's nodes/devices from the executor and refuses a recipe that does not fit before anything
is submitted; --skip-invalid leaves such recipes out and says why.
"""

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executor", default="local", help="local, slurm, kubernetes, or a cluster profile name")
    p.add_argument("--recipes", nargs="+", default=["gpt_1_3b", "gpt_7b", "gpt_13b"])
    p.add_argument("--devices", type=int, help="local: processes on this machine")
    p.add_argument("--nodes", type=int, help="slurm/kubernetes: nodes")
    p.add_argument("--gpu", help="GPU type to plan against")
    p.add_argument("--dryrun", action="store_true")
    p.add_argument("--skip-invalid", action="store_true")
    args = p.parse_args(argv)

    import nemo_run as run

    import nemo_recipes
    from nemo_recipes.errors import RecipeError
    from nemo_recipes.executors import RecipePlugin, executor_for

    overrides = {k: v for k, v in (("devices", args.devices), ("nodes", args.nodes), ("gpu", args.gpu)) if v}
    try:
        executor, gpu = executor_for(args.executor, **overrides)
    except RecipeError as error:
        print(error, file=sys.stderr)
        return 2
    with run.Experiment("gpt-sweep", executor=executor) as exp:
        for name in args.recipes:
            try:
                exp.add(getattr(nemo_recipes, name)(), executor=executor, name=name, plugins=[RecipePlugin(gpu=gpu)])
            except RecipeError as error:
                if not args.skip_invalid:
                    print(error, file=sys.stderr)
                    return 2
                print(f"skipped {name}: {error}", file=sys.stderr)
        if args.dryrun:
            exp.dryrun()
        else:
            exp.run(sequential=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
