"""The verbs of `nemo-recipes`, one line each, in the order `nemo-recipes --help` lists them.

A verb's module (with `register(subparsers)` and `run(args)`) is imported only when the verb is chosen, so `ls` pays
for the catalog alone and not for the planner, NeMo or NeMo-Run; the top-level `--help` and the "did you mean" of a
mistyped verb read this table and import no verb. A verb's module reads its one-line help from here, so the list and
the verb's own `--help` cannot drift apart.

Adding a verb: its module `nemo_recipes/cli/<verb>.py` and one line below.
"""

from __future__ import annotations

from typing import NamedTuple


class Verb(NamedTuple):
    module: str  # imported when the verb is chosen
    help: str  # the one line of `nemo-recipes --help`


VERBS: dict[str, Verb] = {
    "ls": Verb("nemo_recipes.cli.ls", "list the recipes: size, shape, parallelism, batch and default cluster"),
    "show": Verb(
        "nemo_recipes.cli.show", "every value of one recipe, derived ones included, with the source of each choice"
    ),
    "plan": Verb(
        "nemo_recipes.cli.plan",
        "check a recipe against your cluster: problems, memory per GPU, throughput, time to train",
    ),
    "diff": Verb(
        "nemo_recipes.cli.diff", "what differs between two recipes, or a recipe and a file written by `export`"
    ),
    "export": Verb(
        "nemo_recipes.cli.export",
        "write the resolved recipe as NeMo-Run configuration (YAML, JSON or TOML), loadable again",
    ),
    "launch": Verb(
        "nemo_recipes.cli.launch",
        "run a recipe through a NeMo-Run executor (a preset or a cluster profile); --dryrun submits nothing",
    ),
    "smoke": Verb(
        "nemo_recipes.cli.smoke",
        "train a recipe scaled down with NeMo's own loop, stop, resume, and judge it (CPU or GPU)",
    ),
    "watch": Verb(
        "nemo_recipes.cli.watch",
        "read a job's log: step, loss, step time, tokens/s, TFLOP/s per GPU, memory, ETA, restarts and alarms",
    ),
    "hf": Verb(
        "nemo_recipes.cli.hf",
        "convert a trained checkpoint to a Hugging Face model (transformers loads it offline)",
    ),
    "data": Verb(
        "nemo_recipes.cli.data",
        "prepare your own text as Megatron training data (.bin/.idx + manifest), and inspect it",
    ),
    "completion": Verb(
        "nemo_recipes.cli.completion", "print a shell completion script (recipe names, GPUs, verbs, options)"
    ),
}
