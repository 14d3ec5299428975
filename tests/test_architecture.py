"""The layers of ARCHITECTURE.md, enforced: which package of nemo_recipes may import which, read from the source
(imports inside functions count too, so a lazy import cannot hide an upward dependency)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nemo_recipes"

#: Each unit (a top-level module or sub-package) and what it may import, lowest layer first. ARCHITECTURE.md holds
#: the same table with the reasons.
CORE = {"errors", "credentials", "counts", "yaml_files", "quiet", "text_table", "user_paths"}
CORE |= {"checkpoint_pickles"}  # the one reader of pickles: the planner's, the exporter's, the resume's
ALLOWED: dict[str, set[str]] = {
    "_version": set(),
    "credentials": set(),
    "quiet": set(),
    "counts": set(),
    "text_table": set(),
    "errors": {"credentials"},
    "checkpoint_pickles": {"errors"},
    "user_paths": {"errors"},
    "yaml_files": {"errors", "credentials", "user_paths"},
    "families": CORE,
    # The table of recipe fields (section, help, source, bounds, NeMo paths) and the bounds it is made of.
    "field_limits": set(),
    "expert_fields": {"field_limits"},
    "latent_fields": {"field_limits"},
    "routing_fields": {"field_limits"},
    "recipe_fields": {"field_limits", "expert_fields", "latent_fields", "routing_fields"},
    # A blend by budget: the catalog's checks need no file; epochs read the sources' manifests (data.manifest,
    # standard library only), where plan and the plugin resolve them.
    "budget": CORE | {"data"},
    # The checks of a recipe's values: read the field types from the spec they are given, so never the catalog.
    "recipe_checks": CORE | {"budget", "recipe_fields", "field_limits"},
    "catalog": CORE | {"families", "budget", "recipe_checks", "recipe_fields"},
    "plan": CORE | {"catalog", "families", "data", "budget"},
    "overrides": CORE | {"catalog"},
    "data": CORE | {"catalog", "_version"},
    "training": CORE | {"catalog", "families", "plan", "overrides", "budget", "recipe_fields"},
    "executors": CORE | {"catalog", "plan", "overrides", "_version", "budget"},
    "watching": CORE | {"catalog", "families", "plan"},
    "smoke_training": CORE
    | {"catalog", "families", "budget", "plan", "overrides", "data", "training", "executors", "conversion"},
    "conversion": CORE | {"catalog", "families", "data"},
    "cli": CORE
    | {
        "catalog",
        "families",
        "plan",
        "overrides",
        "data",
        "training",
        "executors",
        "smoke_training",
        "watching",
        "conversion",
        "_version",
    },
    "__init__": CORE | {"_version", "catalog", "plan", "training", "smoke_training"},
}
#: Edges across a layer that exist on purpose: (importing module, imported unit) -> why.
EXCEPTIONS = {
    # NeMo-Run loads one entry-point module per package; importing it must register the executor factories too.
    ("training/register.py", "executors"): "the nemo_run.cli entry point registers recipes and executors",
    # The plugin reads the recipe back from the Partial it is given, which only training/introspect.py knows how to do.
    ("executors/plugin.py", "training"): "the recipe plugin reads the RecipeSpec back from a run.Partial",
}
#: Units that must stay importable without NeMo, Megatron, torch, Lightning or NeMo-Run (the fast path).
LIGHT = {
    "credentials",
    "counts",
    "quiet",
    "text_table",
    "errors",
    "yaml_files",
    "checkpoint_pickles",
    "user_paths",
    "families",
    "budget",
    "field_limits",
    "expert_fields",
    "latent_fields",
    "routing_fields",
    "recipe_fields",
    "recipe_checks",
    "catalog",
    "plan",
    "overrides",
    "watching",
}
HEAVY = {"nemo", "megatron", "torch", "lightning", "nemo_run", "transformer_engine", "fiddle"}
#: Files of heavier units that the fast path still imports (the planner reads manifests and fingerprints
#: tokenizers): standard library and our own modules only, at import time; manifest.py also inside its functions.
STDLIB_AT_IMPORT = {"data/__init__.py", "data/manifest.py", "data/tokenizers.py"}
STDLIB_THROUGHOUT = {"data/manifest.py"}


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "nemo_recipes":
        return None
    return "__init__" if len(parts) == 1 else parts[1]


def _module_name(path: Path) -> str:
    """`nemo_recipes.plan.layout` for nemo_recipes/plan/layout.py; a package is its `__init__.py`."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: Every module of the package by its dotted name.
MODULES = {_module_name(path) for path in PACKAGE.rglob("*.py")}


def _imports(relative: str, source: str, modules: set[str] = MODULES) -> list[str]:
    """Absolute names of every module the file `relative` (to nemo_recipes/) imports, relative imports resolved;
    `from package import name` names the submodule `package.name` where there is one, and the package itself for the
    names that are not submodules."""
    package = ["nemo_recipes", *Path(relative).parent.parts]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules]
            found += submodules
            if len(submodules) < len(node.names):
                found.append(module)
    return found


def _own_unit(relative: str) -> str:
    parts = Path(relative).parts
    return parts[0] if len(parts) > 1 else Path(relative).stem


def layer_violations(relative: str, source: str) -> list[str]:
    """Modules of ours that `relative` imports against the layers."""
    own = _own_unit(relative)
    return [
        module
        for module in _imports(relative, source)
        if (unit := _unit(module)) is not None
        and unit != own
        and unit not in ALLOWED[own]
        and (relative, unit) not in EXCEPTIONS
    ]


def heavy_imports(relative: str, source: str) -> list[str]:
    """Heavy libraries that a fast-path file imports."""
    if _own_unit(relative) not in LIGHT:
        return []
    return sorted({m for m in _imports(relative, source) if m.split(".")[0] in HEAVY})


def foreign_imports(relative: str, source: str, *, top_level_only: bool) -> list[str]:
    """Modules neither of the standard library nor ours that `relative` imports (at module level only, or
    anywhere)."""
    if top_level_only:
        tree = ast.parse(source)
        # Statements outside function bodies: the module's own, and those of its classes.
        body = [n for n in ast.walk(tree) if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        inside = {id(child) for f in functions for child in ast.walk(f) if child is not f}
        source = "\n".join(
            ast.unparse(n) for n in body if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in inside
        )
    return sorted(
        {
            m
            for m in _imports(relative, source)
            if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ("nemo_recipes", "__future__")
        }
    )


SOURCES = {str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_unit_has_a_place_in_the_layers():
    units = {_own_unit(relative) for relative in SOURCES}
    assert units <= set(ALLOWED), f"add {sorted(units - set(ALLOWED))} to ALLOWED and ARCHITECTURE.md"


@pytest.mark.parametrize("relative", list(SOURCES))
def test_imports_follow_the_layers(relative):
    wrong = layer_violations(relative, SOURCES[relative])
    own = _own_unit(relative)
    assert not wrong, (
        f"{relative} ({own}) imports {wrong}; ARCHITECTURE.md says {own} may import {sorted(ALLOWED[own])}"
    )


@pytest.mark.parametrize("relative", [r for r in SOURCES if _own_unit(r) in LIGHT])
def test_the_fast_path_imports_no_heavy_library(relative):
    heavy = heavy_imports(relative, SOURCES[relative])
    assert not heavy, f"{relative} imports {heavy}: the catalog and planner must stay light"


@pytest.mark.parametrize("relative", sorted(STDLIB_AT_IMPORT))
def test_the_light_data_modules_import_only_the_standard_library(relative):
    foreign = foreign_imports(relative, SOURCES[relative], top_level_only=relative not in STDLIB_THROUGHOUT)
    assert not foreign, f"{relative} imports {foreign}: the planner imports it on the fast path"


def test_the_checks_catch_an_upward_or_heavy_import():
    # A planner module importing the CLI inside a function, and torch, must both be reported.
    probe = "def f():\n    from ..cli import main\n    import torch.nn\n"
    assert layer_violations("plan/probe.py", probe) == ["nemo_recipes.cli.main"]
    assert heavy_imports("plan/probe.py", probe) == ["torch.nn"]
    assert layer_violations("cli/probe.py", probe) == [] and heavy_imports("cli/probe.py", probe) == []
    # A third-party import counts at module level, inside a function only where the whole file must stay light.
    lazy = "import json\ndef f():\n    import tokenizers\n"
    assert foreign_imports("data/x.py", lazy, top_level_only=True) == []
    assert foreign_imports("data/x.py", lazy, top_level_only=False) == ["tokenizers"]
    assert foreign_imports("data/x.py", "import numpy\n", top_level_only=True) == ["numpy"]


#: Import circles between the package's files that are known and tolerated, each as the set of its modules, with the
#: reason (issue 32). None remain: catalog <-> plan/layout and the smoke runner's circle through its worker are gone.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (anywhere in the file: at the top, inside functions, under
    TYPE_CHECKING). `sources` maps paths relative to nemo_recipes/ to their text. An import of a package is an edge
    to its `__init__`; `from package import submodule`, to the submodule; a name inside a module, to the module."""
    known = {_module_name(PACKAGE / relative) for relative in sources} | MODULES
    graph: dict[str, set[str]] = {}
    for relative, source in sources.items():
        module = _module_name(PACKAGE / relative)
        edges = graph.setdefault(module, set())
        for name in _imports(relative, source, known):
            while name and name not in known:  # `import nemo_recipes.plan.layout.Layout`-like tails
                name = name.rpartition(".")[0]
            if name.split(".")[0] == "nemo_recipes" and name != module:
                edges.add(name)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module, as the modules in import order, the
    first repeated at the end (`a -> b -> a`); Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return [_circle_through(component, graph) for component in components]


def _circle_through(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest circle from the component's first module back to it, inside the component (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(graph[node] & component):
            if successor == start:
                return [*paths[node], start]
            if successor not in paths:
                paths[successor] = [*paths[node], successor]
                queue.append(successor)
    raise AssertionError(f"no circle through {start} in {sorted(component)}")


def test_no_import_circle_between_the_packages_files():
    circles = [c for c in import_circles(import_graph(SOURCES)) if frozenset(c) not in KNOWN_CIRCLES]
    assert not circles, "import circles (issue 32; lazy imports count too): " + "; ".join(
        " -> ".join(m.removeprefix("nemo_recipes.") or "nemo_recipes" for m in circle) for circle in circles
    )


def test_the_circle_check_finds_a_lazy_circle():
    # A lazy import of the catalog's own importer, inside a function, closes a circle; `from plan import layout`
    # counts as plan/layout.py, and `import nemo_recipes.plan` as plan/__init__.py.
    sources = dict(SOURCES)
    sources["catalog.py"] += "\n\ndef _probe():\n    from nemo_recipes.plan import layout\n"
    assert ["nemo_recipes.catalog", "nemo_recipes.plan.layout", "nemo_recipes.catalog"] in import_circles(
        import_graph(sources)
    )
    graph = import_graph({"a.py": "from . import b\n", "b.py": "def f():\n    import nemo_recipes.a\n"})
    assert graph == {"nemo_recipes.a": {"nemo_recipes.b"}, "nemo_recipes.b": {"nemo_recipes.a"}}
    assert import_circles(graph) == [["nemo_recipes.a", "nemo_recipes.b", "nemo_recipes.a"]]
    assert import_graph({"x/__init__.py": "import nemo_recipes.plan\n"}) == {"nemo_recipes.x": {"nemo_recipes.plan"}}
    assert frozenset(KNOWN_CIRCLES) <= {frozenset(c) for c in import_circles(import_graph(SOURCES))}


#: The most lines a source file of the package may hold: a file past it holds several ideas, each of which wants its
#: own module named for it (issue 32).
MAX_LINES = 600


def too_long(sources: dict[str, str], limit: int = MAX_LINES) -> dict[str, int]:
    """Files of `sources` with more than `limit` lines, with their count."""
    counts = {relative: len(text.splitlines()) for relative, text in sources.items()}
    return {relative: count for relative, count in counts.items() if count > limit}


def test_no_source_file_is_longer_than_the_limit():
    offenders = too_long(SOURCES)
    assert not offenders, f"files over {MAX_LINES} lines (split each into modules named for what it holds): {offenders}"


def test_the_length_check_finds_a_long_file():
    assert too_long({"a.py": "x = 1\n" * MAX_LINES, "b.py": "x = 1\n" * (MAX_LINES + 1)}) == {"b.py": MAX_LINES + 1}


def test_nothing_the_tests_or_benchmarks_read_lies_outside_the_checkout():
    # A user's clone has no ../shared: the suite and benchmarks carry their own data (tests/data, benchmarks/data).
    root = PACKAGE.parent
    offenders = []
    for folder in ("tests", "benchmarks", "examples", "nemo_recipes"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if path != Path(__file__) and ('"shared"' in text or "../shared" in text):
                offenders.append(str(path.relative_to(root)))
    assert not offenders, offenders


def verb_imports(sources: dict[str, str]) -> dict[str, list[str]]:
    """Modules of cli/ that import a verb's module (`cli/verbs.VERBS`), with the verbs they import. main.py is left
    out: it dispatches to the chosen verb (by name, through importlib)."""
    from nemo_recipes.cli.verbs import VERBS

    verbs = {verb.module for verb in VERBS.values()}
    graph = import_graph(sources)
    return {
        module: sorted(graph[module] & verbs)
        for module in sorted(graph)
        if module.startswith("nemo_recipes.cli.") and module != "nemo_recipes.cli.main" and graph[module] & verbs
    }


def test_no_verb_imports_another_verb():
    # What two verbs share (the recipe built as NeMo-Run configuration, `-E key=value` read) lives below the verbs,
    # in cli/'s shared modules, so that a change to one verb's command line never reaches another verb (issue 32).
    offenders = verb_imports(SOURCES)
    assert not offenders, f"cli modules importing a verb's module (move what they share below the verbs): {offenders}"


def test_the_verb_check_finds_a_verb_importing_a_verb():
    sources = dict(SOURCES)
    sources["cli/smoke.py"] += "\n\ndef _probe():\n    from nemo_recipes.cli.launch import run\n"
    sources["cli/_output.py"] += "\n\ndef _probe():\n    from nemo_recipes.cli import export\n"
    found = verb_imports(sources)
    assert found["nemo_recipes.cli._output"] == ["nemo_recipes.cli.export"]
    assert "nemo_recipes.cli.launch" in found["nemo_recipes.cli.smoke"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
