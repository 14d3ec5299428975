"""`nemo_recipes.plan` imports its names on first use: a submodule loads only what it needs, every public name is the
object its module defines, and `assess`, `fit` and `validate` stay functions when their submodules have loaded."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys

import nemo_recipes.plan as plan


def fresh(code: str) -> dict:
    """What `code` prints as JSON on its last line, run in a fresh interpreter (nothing of ours imported yet)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_every_public_name_is_its_modules_object():
    for module, names in plan._EXPORTS.items():
        for name in names:
            assert getattr(plan, name) is getattr(importlib.import_module(module), name), name
    assert sorted(plan.__all__) == sorted(n for names in plan._EXPORTS.values() for n in names)


def test_type_checkers_see_the_same_names_as_the_lazy_table():
    # The `if TYPE_CHECKING:` imports are what mypy reads; __getattr__ serves _EXPORTS at run time.
    tree = ast.parse(inspect.getsource(plan))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    seen: dict[str, tuple[str, ...]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module
        seen[node.module] = tuple(alias.name for alias in node.names)
    assert seen == plan._EXPORTS


def test_the_public_functions_win_over_their_submodules():
    # The modules that hold them loaded first (as the throughput model and the CLI load them), then the package's
    # names: the functions, as when the package imported everything at once. The modules are named for what they
    # hold (validation, fitting, assessment), so that no submodule shadows a function (issue 32).
    probe = fresh(
        "import json, types\n"
        "import nemo_recipes.plan.validation, nemo_recipes.plan.fitting, nemo_recipes.plan.assessment\n"
        "from nemo_recipes.plan import assess, fit, validate\n"
        "import nemo_recipes.plan as p\n"
        "names = [assess, fit, validate, p.assess, p.fit, p.validate]\n"
        "print(json.dumps([type(n).__name__ for n in names]))"
    )
    assert probe == ["function"] * 6


def test_a_submodule_loads_only_what_it_imports():
    probe = fresh(
        "import json, sys\n"
        "import nemo_recipes.plan.layout\n"
        "from nemo_recipes.plan import flops\n"  # a submodule that is not a public name loads as a module
        "loaded = sorted(m for m in sys.modules if m.startswith('nemo_recipes.plan'))\n"
        "print(json.dumps(loaded + [type(flops).__name__]))"
    )
    assert probe == [
        "nemo_recipes.plan",
        "nemo_recipes.plan.flops",
        "nemo_recipes.plan.hardware",
        "nemo_recipes.plan.layout",
        "module",
    ]
