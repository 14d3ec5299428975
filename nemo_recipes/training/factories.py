"""Recipe factories: `gpt_1_3b`, `gpt_7b`, `gpt_13b`, `gpt_70b`, `gpt_175b`.

Each returns `run.Partial(llm.pretrain, model=..., trainer=..., data=..., optim=..., log=..., resume=...)` and takes
flat keyword arguments: `name`, `dir`, and every field of the recipe's catalog row (defaults shown in the signature),
so `nemo llm pretrain --factory "gpt_70b(num_nodes=8)"` and `gpt_70b(tensor_parallel=4, pipeline_parallel=8)` work.
Overrides are checked before anything is built: unknown keys, wrong types and impossible parallel/batch layouts are
all reported at once, each with the field, the value and the fix.
"""

from __future__ import annotations

import copy
import inspect
import typing
from typing import Any, Literal, Optional, Union

import nemo_run as run
from nemo.collections.llm.api import pretrain

from nemo_recipes.catalog import RECIPES, RecipeSpec, get_recipe, not_a_spec, plain_name_problems
from nemo_recipes.errors import Problem, raise_if_any
from nemo_recipes.families import get_family
from nemo_recipes.overrides import read_value
from nemo_recipes.plan import Cluster, validate
from nemo_recipes.training import parts
from nemo_recipes.training.model import model

# Catalog fields that describe the row itself rather than a knob a user turns.
_NOT_KNOBS = ("name", "size_label", "default_gpu")
_POSITIONAL = "_positional"


def build_recipe(spec: RecipeSpec, *, name: str = "default", dir: Optional[str] = None) -> run.Partial:
    """The `run.Partial` of `llm.pretrain` for `spec`, after checking the spec on its own cluster size."""
    problems = not_a_spec(spec) + plain_name_problems("name", name)
    if dir is not None and (not isinstance(dir, str) or not dir.strip() or "\0" in dir):
        problems.append(
            Problem(
                "dir",
                dir,
                "must be a directory path or None.",
                "give dir='/results', or leave it unset for NeMo's default.",
            )
        )
    raise_if_any(problems, context="build_recipe")
    validate(spec, Cluster.of(spec.num_nodes, spec.num_gpus_per_node)).raise_if_invalid()
    trainer = parts.trainer(spec)
    data, gpt = parts.data(spec), model(spec)
    if spec.virtual_pipeline:
        # NeMo builds the model chunks of the interleaved schedule after the first by rebuilding the model from its
        # constructor arguments (megatron_parallel.py:243, io.reinit), which lack the tokenizer that llm.pretrain set
        # afterwards (a NullTokenizer has no __io__ to copy): give the model a copy of the data's tokenizer. A copy,
        # not the same object: a configuration file cannot say that two values are one object, so a shared one
        # would not load back equal from `export`'s file (llama_70b, llama_405b did not).
        gpt.tokenizer = copy.deepcopy(data.tokenizer)
    return run.Partial(
        pretrain,
        model=gpt,
        trainer=trainer,
        data=data,
        optim=parts.optim(spec),
        log=parts.log(spec, dir=dir, name=name),
        resume=parts.resume(spec),
    )


def knob_names() -> tuple[str, ...]:
    return tuple(name for name in inspect.signature(RecipeSpec).parameters if name not in _NOT_KNOBS)


def _cli_annotation(hint: Any) -> Any:
    """What NeMo-Run parses a factory argument as. A value that is not of the field's type must reach the catalog
    as text, so that it gets the catalog's one-line message (field, value, fix) rather than NeMo-Run's nested
    "Failed to parse" error: choices are plain strings, and every other type also accepts a string."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return str
    if origin is tuple:  # the catalog keeps lists as tuples (hashable, frozen); on the command line they are lists
        item: Any = typing.get_args(hint)[0]
        return Optional[Union[list[item], str]]
    if hint is str or hint == Optional[str]:
        return hint
    return Union[hint, str]


def _lists_from_text(overrides: dict[str, Any], hints: dict[str, Any]) -> dict[str, Any]:
    """NeMo-Run hands over a list it cannot parse (`data_paths=[/a/web, /a/code]`, unquoted) as its text; it is read
    as `nemo-recipes show key=[a,b]` reads it. Other text is left for the catalog to judge."""
    return {
        key: read_value(value, hints[key])
        if (
            key in hints
            and typing.get_origin(hints[key]) is tuple
            and isinstance(value, str)
            and value.startswith("[")
            and value.endswith("]")
        )
        else value
        for key, value in overrides.items()
    }


def _positional_problems(recipe_name: str, positional: tuple) -> list[Problem]:
    return [
        Problem(
            "positional argument",
            value,
            f"{recipe_name}() takes keyword arguments only.",
            f"name the field, e.g. {recipe_name}(num_nodes={value!r}) (fields: `nemo-recipes show {recipe_name}`).",
        )
        for value in positional
    ]


def _make_factory(recipe_name: str):
    row = get_recipe(recipe_name)
    family = get_family(row.family)
    hints = typing.get_type_hints(RecipeSpec)

    def factory(*positional: Any, name: str = "default", dir: Optional[str] = None, **overrides: Any) -> run.Partial:
        if _POSITIONAL in overrides:  # NeMo-Run passes `gpt_7b(4)` this way (see below)
            positional += (overrides.pop(_POSITIONAL),)
        raise_if_any(_positional_problems(recipe_name, positional), context=f"recipe {recipe_name!r}")
        return build_recipe(row.replace(**_lists_from_text(overrides, hints)), name=name, dir=dir)

    parameters = (
        [
            # NeMo-Run gives a positional argument (`--factory "gpt_7b(4)"`) to the first parameter, whatever its kind;
            # this one receives it, so that the factory refuses it instead of taking it as the experiment name.
            inspect.Parameter(_POSITIONAL, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any),
            inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default="default", annotation=str),
            inspect.Parameter("dir", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[str]),
        ]
        + [
            inspect.Parameter(
                knob,
                inspect.Parameter.KEYWORD_ONLY,
                default=getattr(row, knob),
                annotation=_cli_annotation(hints[knob]),
            )
            for knob in knob_names()
        ]
        + [
            # Unknown keys reach the factory, which answers with the closest field name instead of NeMo-Run's bare
            # "No parameter named ..." (typos must not pass silently, and deserve a suggestion). Annotated as text:
            # NeMo-Run parses a key spelled like this parameter (`unknown=None`) by its annotation, and without one
            # it failed with its own error.
            inspect.Parameter("unknown", inspect.Parameter.VAR_KEYWORD, annotation=str),
        ]
    )
    # A function object takes the attribute at run time; mypy knows no `__signature__` on functions.
    factory.__signature__ = inspect.Signature(parameters, return_annotation=run.Partial)  # type: ignore[attr-defined]
    factory.__name__ = factory.__qualname__ = recipe_name
    factory.__module__ = __name__
    factory.__doc__ = (
        f"{family.display_name} {row.size_label} pretraining recipe ({row.num_parameters / 1e9:.2f}B parameters; "
        f"{family.summary}): "
        f"{row.num_layers} layers, hidden {row.hidden_size}, {row.num_attention_heads} heads, "
        f"TP{row.tensor_parallel} PP{row.pipeline_parallel}, micro batch {row.micro_batch_size}, "
        f"global batch {row.global_batch_size}, sequence {row.seq_length}; "
        f"default cluster {row.num_nodes} x {row.num_gpus_per_node} GPUs.\n\n"
        f"Examples:\n"
        f"    nemo llm pretrain --factory {recipe_name} --dryrun --yes\n"
        f'    nemo llm pretrain --factory "{recipe_name}(num_nodes={row.num_nodes * 2})"\n'
        f"    recipe = nemo_recipes.{recipe_name}(micro_batch_size=1, precision='fp8')\n"
    )
    return run.cli.factory(target=pretrain, name=recipe_name)(factory)


#: One factory per catalog row, each a module-level name (`nemo_recipes.training.factories.gpt_70b`) registered with
#: NeMo-Run's CLI under the recipe's name: a new row gets its factory without a line of its own.
FACTORIES = {name: _make_factory(name) for name in RECIPES}
globals().update(FACTORIES)
