"""The docs build with warnings as errors, and their generated reference holds every recipe, verb, option, GPU and
exit code the code has; README.md stays a front page whose recipe table is the catalog's.

The docs are built once (module fixture, one xdist worker): `python -m sphinx -W`, as docs/development/docs.md
tells a writer to. What the reference must hold is enumerated here from the code, independently of the generator
(docs/_ext/reference.py), so that a generator that skips a sub-verb or a GPU fails."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ci

from nemo_recipes.catalog import field_names, recipe_names
from nemo_recipes.cli import _output
from nemo_recipes.cli.main import build_parser
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.plan.hardware import ALIASES, GPUS

pytestmark = pytest.mark.xdist_group("docs")

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
GENERATED = DOCS / "reference" / "generated"
README = REPO / "README.md"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        message = "Sphinx and MyST are not installed: pip install -c constraints.txt -e '.[docs]'"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    out = tmp_path_factory.mktemp("docs") / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, f"the docs do not build cleanly:\n{result.stderr[-6000:]}"
    assert "WARNING" not in result.stderr, result.stderr[-6000:]
    return out


def generated(name: str) -> str:
    return (GENERATED / f"{name}.md").read_text()


def test_the_docs_build_with_warnings_as_errors(built):
    for page in ("index", "guides/quickstart", "reference/generated/recipes", "reference/api", "design/architecture"):
        assert (built / f"{page}.html").is_file(), page


def test_the_plots_are_drawn_when_the_docs_build(built):
    for image in ("plan_gpt_70b.png", "smoke_loss.png"):
        path = built / "_images" / image
        assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image


def test_every_recipe_is_in_the_reference_with_every_field(built):
    text = generated("recipes")
    sections = text.split("\n## ")[1:]
    assert [s.splitlines()[0] for s in sections] == [f"`{name}`" for name in recipe_names()]
    for section in sections:
        rows = {line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| `")}
        missing = [f for f in field_names() if f not in ("name", "size_label") and f"`{f}`" not in rows]
        assert not missing, f"{section.splitlines()[0]}: fields missing: {missing}"
    assert (built / "reference" / "generated" / "recipes.html").is_file()


def every_command() -> dict[str, argparse.ArgumentParser]:
    """Each verb and sub-verb of `nemo-recipes` with its parser, from VERBS and the parser itself."""
    commands: dict[str, argparse.ArgumentParser] = {}
    for verb in VERBS:
        parser = next(a for a in build_parser(verb)._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
        commands[f"nemo-recipes {verb}"] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                commands.update({f"nemo-recipes {verb} {sub}": p for sub, p in action.choices.items()})
    return commands


def test_every_recipe_field_is_in_the_fields_reference_with_its_help(built):
    from nemo_recipes.recipe_fields import FIELDS

    text = generated("fields")
    missing = [name for name in field_names() if f"| `{name}` | {FIELDS[name].help}" not in text]
    assert not missing, f"recipe fields missing from the fields reference: {missing}"


def test_every_verb_and_option_is_in_the_reference(built):
    text = generated("cli")
    sections = {s.splitlines()[0].strip("`# "): s for s in text.split("\n#")[1:] if s.startswith(("# `", "## `"))}
    commands = every_command()
    assert len(commands) >= len(VERBS) + 4  # hf export/import, data prepare/inspect
    for command, parser in commands.items():
        assert command in sections, f"{command} is not in the CLI reference"
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in sections[command] or f", {option}" in sections[command], (
                        f"{command} {option} is not in the CLI reference"
                    )


def test_every_gpu_and_alias_is_in_the_reference(built):
    text = generated("gpus")
    for name, gpu in GPUS.items():  # its row of figures, not only its description
        assert f"| `{name}` | {gpu.memory_gib:g} | {gpu.bf16_tflops:g} |" in text, name
    for alias in ALIASES:
        assert f"| `{alias}` |" in text, alias


def test_every_exit_code_and_error_class_is_in_the_reference(built):
    text = generated("errors")
    assert _output.EXIT_CODES_EPILOG.strip() in text
    for name in ("NemoRecipesError", "InputError", "InvalidInputError", "InvalidConfigError", "RunFailedError"):
        assert f"`nemo_recipes.errors.{name}`" in text, name
    assert "`nemo_recipes.data.sources.InvalidDataError` | 2 |" in text


def readme_table() -> str:
    text = README.read_text()
    start = text.index("<!-- recipe table:")
    start = text.index("\n", start) + 1
    return text[start : text.index("<!-- end of recipe table -->")].strip()


def test_readme_is_a_front_page_with_the_catalogs_recipe_table():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import reference
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert readme_table() == reference.recipe_table(), (
        "README.md's recipe table is not the catalog's: paste `python docs/_ext/reference.py readme-table`"
    )
    # The two commands of a fresh machine, as CI runs the second.
    assert "```bash\nbash scripts/quickstart.sh\n```" in text
    assert "```bash\nbash scripts/test.sh\n```" in text
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    # Every page the front page links to exists.
    for target in re.findall(r"\]\(((?:docs/)[^)#]+)", text):
        assert (REPO / target).is_file(), target
