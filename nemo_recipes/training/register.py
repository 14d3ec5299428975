"""Entry point of the `nemo_run.cli` group: `nemo llm pretrain --factory gpt_70b` imports this module, which
registers our recipe factories (one per catalog row) under `llm.pretrain` beside NeMo's own recipes (names `gpt_*`,
NeMo's are `gpt3_*`), and our executors (`run.executor=slurm|local|kubernetes|<profile>`) and plugin
(`run.plugins=recipe_plugin`)."""

from nemo_recipes.executors import nemo_run_factories  # noqa: F401  (importing registers executors and the plugin)
from nemo_recipes.training import factories  # noqa: F401  (importing registers the recipe factories)
