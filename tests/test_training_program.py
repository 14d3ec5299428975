"""Tier (b): the recipe runs the program the planner describes: TP communication overlap where the recipe asks for it
(and nothing where it cannot work), pipeline overlap for interleaved schedules, layers per chunk from the one layout,
and every such field read back from the built recipe."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

import fiddle as fdl  # noqa: E402

import nemo_recipes  # noqa: E402
from nemo_recipes.catalog import RECIPES  # noqa: E402
from nemo_recipes.plan import Cluster, Layout, program_for  # noqa: E402
from nemo_recipes.training.introspect import spec_from_partial  # noqa: E402
from nemo_recipes.training.model import model_config_values, recompute_values  # noqa: E402
from nemo_recipes.training.overlap import TensorParallelCommOverlap, inert_reason  # noqa: E402

pytestmark = pytest.mark.nemo


def overlap_callbacks(recipe) -> list:
    return [c for c in recipe.trainer.callbacks if c.__fn_or_cls__ is TensorParallelCommOverlap]


@pytest.mark.parametrize("name", list(RECIPES))
def test_tp_overlap_callback_exactly_where_the_planner_models_it_on_h100(name):
    spec = RECIPES[name]
    recipe = getattr(nemo_recipes, name)()
    program = program_for(spec, Cluster.of(spec.num_nodes, 8, "h100").gpu)
    assert bool(overlap_callbacks(recipe)) == spec.tp_comm_overlap_enabled == program.tp_comm_overlap


def test_the_callback_keeps_the_recipes_other_overlap_settings():
    recipe = nemo_recipes.gpt_70b(overlap_param_gather=False, virtual_pipeline=5)
    (config,) = overlap_callbacks(recipe)
    callback = fdl.build(config)
    user = callback.user_comm_overlap_cfg
    assert (user.tp_comm_overlap, user.overlap_grad_reduce, user.overlap_param_gather) == (True, True, False)
    assert (user.overlap_p2p_comm, user.batch_p2p_comm) == (True, False)  # interleaved, as the model config
    assert user.tp_comm_bootstrap_backend == "nccl"
    config_values = model_config_values(RECIPES["gpt_70b"].replace(virtual_pipeline=5))
    assert (config_values["overlap_p2p_comm"], config_values["batch_p2p_comm"]) == (True, False)


def test_tp_overlap_off_or_tp_1_leaves_the_callbacks_alone():
    assert overlap_callbacks(nemo_recipes.gpt_70b(tp_comm_overlap=False)) == []
    assert overlap_callbacks(nemo_recipes.gpt_7b()) == []  # TP 1
    assert overlap_callbacks(nemo_recipes.gpt_13b(sequence_parallel=False)) == []


def test_the_callback_does_nothing_without_transformer_engine_or_cuda(caplog):
    # This machine has neither: setup must return before NeMo's callback touches torch.cuda or the trainer.
    assert inert_reason() in ("Transformer Engine is not installed", "no CUDA device")
    callback = fdl.build(overlap_callbacks(nemo_recipes.gpt_13b())[0])
    with caplog.at_level(logging.WARNING):
        callback.setup(None, None, "fit")
    assert "tensor-parallel communication overlap off" in caplog.text
    assert callback.need_tp_overlap_ub_init is False


def test_recompute_layers_per_chunk_come_from_the_layout():
    spec = RECIPES["gpt_175b"].replace(recompute="full", virtual_pipeline=3)
    assert recompute_values(spec)["recompute_num_layers"] == Layout.of(spec).layers_per_chunk == 4
    assert spec_from_partial(nemo_recipes.gpt_175b(recompute="full", virtual_pipeline=3)) == spec


@pytest.mark.parametrize(
    "overrides",
    [
        dict(tp_comm_overlap=False),
        dict(tensor_parallel=4, recompute="full", recompute_num_layers=2),
        dict(
            pipeline_parallel=8, virtual_pipeline=2, pipeline_counts_embedding_and_loss=True, num_layers=78, num_nodes=8
        ),
    ],
)
def test_new_fields_read_back_from_the_built_recipe(overrides):
    spec = RECIPES["gpt_70b"].replace(**overrides)
    recipe = nemo_recipes.gpt_70b(**overrides)
    assert spec_from_partial(recipe) == spec
    if spec.pipeline_counts_embedding_and_loss:
        strategy = fdl.build(recipe.trainer.strategy)
        assert strategy.account_for_embedding_in_pipeline_split and strategy.account_for_loss_in_pipeline_split
