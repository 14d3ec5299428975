"""One module per executor preset, each with the interface of `nemo_recipes.executors.registry`. Users reach the
preset functions as `nemo_recipes.executors.slurm(...)`; these modules are named by `registry.PRESETS`."""
