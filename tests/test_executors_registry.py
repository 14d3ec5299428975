"""The executor registry: one table of presets, one interface, the secret policy applied to every executor."""

from __future__ import annotations

import sys
import types

import nemo_run as run
import pytest

from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.executors import registry
from nemo_recipes.executors.plugin import RecipePlugin


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_registered_preset_provides_the_whole_interface(name):
    module = registry.module(name)
    assert callable(getattr(module, name)) and callable(module.cli_factory)
    assert callable(module.secure) and callable(module.render)
    # NeMo-Run's own class: the registry finds a built executor's preset by its name.
    assert isinstance(getattr(run, module.EXECUTOR), type) and issubclass(getattr(run, module.EXECUTOR), run.Executor)


def test_the_preset_functions_win_over_the_executor_folders():
    # Each executor's folder is loaded (as the registry loads it), then the package's names: the preset functions.
    import importlib

    import nemo_recipes.executors as executors

    for name, module in registry.PRESETS.items():
        importlib.import_module(module)
        assert isinstance(getattr(executors, name), types.FunctionType), name


def test_a_preset_without_a_secret_policy_cannot_be_registered(monkeypatch):
    careless = types.ModuleType("careless_preset")
    careless.EXECUTOR, careless.careless = "DockerExecutor", lambda: None
    careless.cli_factory, careless.render = (lambda: None), (lambda request, executor: "")
    monkeypatch.setitem(sys.modules, "careless_preset", careless)
    monkeypatch.setitem(registry.PRESETS, "careless", "careless_preset")
    with pytest.raises(TypeError, match=r"lacks \['secure'\]"):
        registry.module("careless")


def test_the_presets_listed_everywhere_come_from_the_registry():
    from nemo_recipes.executors import nemo_run_factories, profiles

    assert profiles.PRESET_NAMES == registry.NAMES == ("local", "slurm", "kubernetes")
    registered = set(nemo_run_factories._REGISTERED)
    assert set(registry.NAMES) <= registered and "recipe_plugin" in registered


def test_an_unknown_preset_gets_the_known_ones_and_a_suggestion():
    with pytest.raises(InvalidRecipeError) as raised:
        registry.function("slrum")
    assert "did you mean 'slurm'" in str(raised.value) and "local, slurm, kubernetes" in str(raised.value)


def test_built_executors_find_their_preset(kubeconfig_file, monkeypatch):
    from nemo_recipes.executors import kubernetes, local, slurm

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    assert registry.of_executor(local(2)) == "local"
    assert registry.of_executor(slurm(account="a", nodes=1)) == "slurm"
    assert registry.of_executor(kubernetes(nodes=1)) == "kubernetes"
    assert registry.of_executor(run.DockerExecutor(container_image="x")) is None


def test_each_executor_gets_its_preset_policy_and_any_other_the_generic_one(kubeconfig_file, monkeypatch):
    from nemo_recipes.executors import kubernetes, local, slurm

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    task = run.Script(inline="true", env={"WANDB_API_KEY": "k" * 40})

    on_slurm = slurm(account="a", nodes=1)
    RecipePlugin(validate=False, performance_env=False).setup(task, on_slurm)
    assert "WANDB_API_KEY" not in task.env and on_slurm.additional_parameters["export"] == "ALL,WANDB_API_KEY"

    for executor in (local(1), run.DockerExecutor(container_image="x")):
        task = run.Script(inline="true", env={"WANDB_API_KEY": "k" * 40})
        executor.env_vars["WANDB_API_KEY"] = "k" * 40
        RecipePlugin(validate=False, performance_env=False).setup(task, executor)
        assert "WANDB_API_KEY" not in task.env and "WANDB_API_KEY" not in executor.env_vars

    on_kubernetes = kubernetes(nodes=1)
    on_kubernetes.env_vars["WANDB_API_KEY"] = "k" * 40
    with pytest.raises(InvalidRecipeError, match="would be written into the TrainJob manifest"):
        RecipePlugin(validate=False, performance_env=False).setup(run.Script(inline="true"), on_kubernetes)
