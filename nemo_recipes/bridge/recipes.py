"""Recipe factories: `gpt_1_3b`, `gpt_7b`, `gpt_13b`, `gpt_70b`, `gpt_175b`.

Each returns `run.Partial(llm.pretrain, model=..., trainer=..., data=..., optim=..., log=..., resume=...)` and takes
flat keyword arguments: `name`, `dir`, and every field of the recipe's catalog row (defaults shown in the signature),
so `nemo llm pretrain --factory "gpt_70b(num_nodes=8)"` and `gpt_70b(tensor_parallel=4, pipeline_parallel=8)` work.
Overrides are checked before anything is built: unknown keys, wrong types and impossible parallel/batch layouts are
all reported at once, each with the field, the value and the fix.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Literal, Optional

import nemo_run as run
from nemo.collections.llm.api import pretrain

from nemo_recipes.bridge import parts
from nemo_recipes.bridge.model import model
from nemo_recipes.bridge.overlap import comm_overlap_callbacks
from nemo_recipes.catalog import RECIPES, RecipeSpec, get_recipe
from nemo_recipes.plan import Cluster, validate

# Catalog fields that describe the row itself rather than a knob a user turns.
_NOT_KNOBS = ("name", "size_label", "default_gpu")


def build_recipe(spec: RecipeSpec, *, name: str = "default", dir: Optional[str] = None) -> run.Partial:
    """The `run.Partial` of `llm.pretrain` for `spec`, after checking the spec on its own cluster size."""
    validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node)).raise_if_invalid()
    trainer = parts.trainer(spec, callbacks=comm_overlap_callbacks(spec))
    if spec.pipeline_counts_embedding_and_loss:
        # MegatronStrategy owns the pipeline split (it copies it into the model config at setup).
        trainer.strategy.account_for_embedding_in_pipeline_split = True
        trainer.strategy.account_for_loss_in_pipeline_split = True
    return run.Partial(
        pretrain,
        model=model(spec),
        trainer=trainer,
        data=parts.data(spec),
        optim=parts.optim(spec),
        log=parts.log(spec, dir=dir, name=name),
        resume=parts.resume(),
    )


def knob_names() -> tuple[str, ...]:
    return tuple(name for name in inspect.signature(RecipeSpec).parameters if name not in _NOT_KNOBS)


def _cli_annotation(hint: Any) -> Any:
    # The catalog keeps lists as tuples (hashable, frozen); on the command line they are lists.
    if typing.get_origin(hint) is tuple:
        return Optional[list[typing.get_args(hint)[0]]]
    # Choices reach the catalog as plain strings, so that a wrong one gets the catalog's one-line message
    # (field, allowed values, fix) rather than NeMo-Run's nested parse error.
    if typing.get_origin(hint) is Literal:
        return str
    return hint


def _make_factory(recipe_name: str):
    row = get_recipe(recipe_name)
    hints = typing.get_type_hints(RecipeSpec)

    def factory(name: str = "default", dir: Optional[str] = None, **overrides: Any) -> run.Partial:
        return build_recipe(row.replace(**overrides), name=name, dir=dir)

    parameters = [
        inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default="default", annotation=str),
        inspect.Parameter("dir", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[str]),
    ] + [
        inspect.Parameter(knob, inspect.Parameter.KEYWORD_ONLY, default=getattr(row, knob),
                          annotation=_cli_annotation(hints[knob]))
        for knob in knob_names()
    ] + [
        # Unknown keys reach the factory, which answers with the closest field name instead of NeMo-Run's bare
        # "No parameter named ..." (typos must not pass silently, and deserve a suggestion).
        inspect.Parameter("unknown", inspect.Parameter.VAR_KEYWORD),
    ]
    factory.__signature__ = inspect.Signature(parameters, return_annotation=run.Partial)
    factory.__name__ = factory.__qualname__ = recipe_name
    factory.__module__ = __name__
    factory.__doc__ = (
        f"GPT {row.size_label} pretraining recipe ({row.num_parameters / 1e9:.2f}B parameters): "
        f"{row.num_layers} layers, hidden {row.hidden_size}, {row.num_attention_heads} heads, "
        f"TP{row.tensor_parallel} PP{row.pipeline_parallel}, micro batch {row.micro_batch_size}, "
        f"global batch {row.global_batch_size}, sequence {row.seq_length}; "
        f"default cluster {row.num_nodes} x {row.num_gpus_per_node} GPUs.\n\n"
        f"Examples:\n"
        f"    nemo llm pretrain --factory {recipe_name} --dryrun --yes\n"
        f"    nemo llm pretrain --factory \"{recipe_name}(num_nodes={row.num_nodes * 2})\"\n"
        f"    recipe = nemo_recipes.{recipe_name}(micro_batch_size=1, precision='fp8')\n"
    )
    return run.cli.factory(target=pretrain, name=recipe_name)(factory)


gpt_1_3b = _make_factory("gpt_1_3b")
gpt_7b = _make_factory("gpt_7b")
gpt_13b = _make_factory("gpt_13b")
gpt_70b = _make_factory("gpt_70b")
gpt_175b = _make_factory("gpt_175b")

FACTORIES = {"gpt_1_3b": gpt_1_3b, "gpt_7b": gpt_7b, "gpt_13b": gpt_13b, "gpt_70b": gpt_70b, "gpt_175b": gpt_175b}

if set(FACTORIES) != set(RECIPES):  # a new catalog row needs its factory here (and in nemo_recipes.__init__)
    raise ImportError(f"factories {sorted(FACTORIES)} do not match the catalog {sorted(RECIPES)}")
