"""A recipe as NeMo-Run configuration, shared by the verbs that build it (`export`, `launch`, and `diff` against a
file): the `run.Partial` built through the NeMo training objects, written through NeMo-Run's `ConfigSerializer`, and
read back through NeMo-Run's reader (`training/serialization`). NeMo is imported inside the functions only."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.cli import _output


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """NeMo prints notices (deprecations, banners) on stdout while importing; keep stdout for the configuration."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def build_partial(spec: RecipeSpec, *, name: Optional[str] = None, dir: Optional[str] = None) -> Any:
    """The recipe's `run.Partial`, through the NeMo training objects; a clear failure (exit 1) when NeMo is missing."""
    with quiet_stdout():
        try:
            from nemo_recipes.training.factories import build_recipe
        except ImportError as error:
            raise _output.CLIError(
                f"this verb needs NeMo 2 and NeMo-Run ({error}); install them with: pip install nemo-recipes"
            ) from None
        return build_recipe(spec, name=name or spec.name, dir=dir)


def serialize(partial: Any, fmt: str) -> str:
    from nemo_recipes.training.serialization import dumps

    return dumps(partial, fmt)


def load(path: str) -> Any:
    """A file `export` wrote, as the `run.Partial` it describes (`nemo_recipes.cli.export.load`)."""
    from nemo_recipes.training.serialization import load as load_config

    return load_config(path)


def resolved_dict(spec: RecipeSpec) -> dict[str, Any]:
    """The recipe as the plain data `export --format yaml` writes (for `diff` against a file)."""
    import yaml

    return yaml.safe_load(serialize(build_partial(spec), "yaml"))
