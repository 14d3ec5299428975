"""Every command and Python snippet of the guides (docs/**/*.md, README.md) runs, as far as it can here, so that a
renamed verb, option, recipe or field breaks CI rather than a reader's first try (docs/development/docs.md says how
each kind runs).

A `bash` block's commands: the fast verbs (`ls`, `show`, `plan`, `diff` of two recipes, `completion`) run for real
through the installed console script; every other `nemo-recipes` command (it trains, reads a run or data that are
not here, or needs a cluster) is parsed by the CLI's own parser, its recipe looked up in the catalog and its
`key=value` fields checked against the recipe's; `nemo llm pretrain --factory NAME(...)` has its recipe and keyword
arguments checked; `python FILE` and `bash FILE` must name a file of the repository. A `python` block is compiled
and every `nemo_recipes` name it imports or reads must exist; one after a `% snippet: run` line also runs.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from _cli import cli

import nemo_recipes
from nemo_recipes.catalog import field_names, recipe_names
from nemo_recipes.cli.main import build_parser, parse

REPO = Path(__file__).resolve().parent.parent
GENERATED = REPO / "docs" / "reference" / "generated"
PAGES = sorted([REPO / "README.md", *(p for p in (REPO / "docs").rglob("*.md") if GENERATED not in p.parents)])

#: Verbs fast enough (no NeMo, no files of a run) to run for real; `plan` only without files to read.
RUN_FOR_REAL = {"ls", "show", "plan", "diff", "completion"}
#: Items that name files a guide's command reads and the checkout does not have: such a command is only parsed.
READS_FILES = re.compile(r"^(data_paths|tokenizer_path|restore_from|data_weights)=|^--(calibrate|calibration|card)$")
#: Programs of other projects a guide may show; their commands are not ours to check.
OTHERS = {"pip", "kubectl", "jq", "eval", "docker", "sacct", "scontrol"}
RUN_MARK = "% snippet: run"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence
    lang: str
    text: str
    run: bool  # preceded by `% snippet: run`

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found, lines = [], page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        run = i > 0 and lines[i - 1].strip() == RUN_MARK
        found.append(Block(page, i + 1, fence.group(2), "\n".join(lines[i + 1 : end]), run))
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]
SHELL = [b for b in ALL if b.lang in ("bash", "sh", "shell")]
PYTHON = [b for b in ALL if b.lang == "python"]


@dataclass(frozen=True)
class Command:
    block: Block
    words: tuple[str, ...]
    comment: str

    def __str__(self) -> str:
        return f"{self.block}: {' '.join(self.words)}"


def commands(block: Block) -> list[Command]:
    """Each command of a shell block: continued lines joined, the comment kept apart, cut at the first pipe,
    redirection or list operator (what follows is another program's), leading VAR=value assignments dropped."""
    found = []
    for line in block.text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        words: list[str] = []
        for word in lexer:
            if word.startswith("#"):
                break
            if word in ("|", ">", ">>", "&&", ";", "||", "2>", "<"):
                break
            words.append(word)
        comment = line.partition("  #")[2] if "  #" in line else ""
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words.pop(0)
        if words:
            found.append(Command(block, tuple(words), comment))
    return found


COMMANDS = [c for b in SHELL for c in commands(b)]


def recipe_call_problems(name: str, keywords: list[str]) -> list[str]:
    problems = [] if name in recipe_names() else [f"recipe {name!r} is not in the catalog"]
    fields = set(field_names()) | {"name", "dir"}
    return problems + [f"{name}: {key!r} is not a recipe field" for key in keywords if key not in fields]


def override_problems(recipe: str, overrides: list[str]) -> list[str]:
    return recipe_call_problems(recipe, [item.partition("=")[0] for item in overrides])


def check_ours(command: Command) -> tuple[str, list[str]]:
    """How an nemo-recipes command was checked ("run" or "parsed") and what is wrong with it."""
    argv = list(command.words[1:])
    if argv and argv[0] in RUN_FOR_REAL and not any(READS_FILES.match(w) for w in argv):
        if argv[0] != "diff" or all(w in recipe_names() for w in argv[1:3]):
            return "run", []
    try:
        args = parse(build_parser(), argv)
    except SystemExit as stop:
        return "parsed", [f"the CLI's parser refuses it (exit {stop.code})"]
    problems = []
    recipe = getattr(args, "recipe", None)
    if isinstance(recipe, str):
        problems += override_problems(recipe, list(getattr(args, "overrides", [])))
    return "parsed", problems


def test_the_guides_have_snippets_of_each_kind():
    assert len(PAGES) >= 12
    assert len(COMMANDS) >= 60 and len(PYTHON) >= 8
    assert sum(b.run for b in PYTHON) >= 3


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.words[0] == "nemo-recipes"], ids=str)
def test_each_nemo_recipes_command_runs_or_parses(command, tmp_path):
    how, problems = check_ours(command)
    assert not problems, f"{command}: {problems}"
    if how == "run":
        expected = 2 if "exit 2" in command.comment else 0
        result = cli(*command.words[1:], cwd=tmp_path, timeout=120)
        assert result.returncode == expected, f"{command}: exit {result.returncode}\n{result.stderr[-2000:]}"


def test_every_other_command_names_what_exists():
    problems = []
    for command in COMMANDS:
        program, rest = command.words[0], command.words[1:]
        if program == "nemo-recipes" or program in OTHERS:
            continue
        if program == "nemo":
            assert rest[:2] == ("llm", "pretrain") or rest[:1] == ("experiment",), command
            at = [i for i, w in enumerate(rest) if w.startswith("--factory")]
            factory = (rest[at[0]].partition("=")[2] or rest[at[0] + 1]) if at else ""
            if factory:
                name, _, arguments = factory.partition("(")
                keywords = re.findall(r"(\w+)=", arguments)
                problems += [f"{command}: {p}" for p in recipe_call_problems(name, keywords)]
        elif program in ("python", "bash"):
            script = rest[0]
            if script not in ("-m", "-c") and not (REPO / script).is_file():
                problems.append(f"{command}: {script} is not a file of the repository")
        else:
            problems.append(f"{command}: {program!r} is neither ours nor a known program (add it to OTHERS)")
    assert not problems, "\n".join(problems)


def names_used(tree: ast.AST) -> list[tuple[str, str]]:
    """(module, name) for every `from nemo_recipes... import name` and every `nemo_recipes.name` read."""
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nemo_recipes"):
            used += [(node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            used += [(alias.name, "") for alias in node.names if alias.name.startswith("nemo_recipes")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "nemo_recipes":
            used.append(("nemo_recipes", node.attr))
    return used


def factory_calls(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """`nemo_recipes.<recipe>(keyword=...)` calls: the recipe and its keywords."""
    calls = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "nemo_recipes"
            and node.func.attr in recipe_names()
        ):
            calls.append((node.func.attr, [k.arg for k in node.keywords if k.arg]))
    return calls


@pytest.mark.parametrize("block", PYTHON, ids=str)
def test_each_python_snippet_compiles_and_names_what_exists(block):
    tree = ast.parse(block.text, filename=str(block))
    problems = []
    for module, name in names_used(tree):
        # Names the package imports lazily (recipe factories, `smoke`: NeMo) are listed in __all__; reading them
        # would import NeMo, so they are taken from there.
        if module == "nemo_recipes" and name in nemo_recipes.__all__:
            continue
        imported = importlib.import_module(module)
        if name and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                problems.append(f"{module}.{name} does not exist")
    for recipe, keywords in factory_calls(tree):
        problems += recipe_call_problems(recipe, keywords)
    assert not problems, f"{block}: {problems}"


@pytest.mark.parametrize("page", sorted({b.page for b in PYTHON if b.run}), ids=lambda p: str(p.relative_to(REPO)))
def test_snippets_marked_to_run_run(page, capsys):
    namespace: dict = {"__name__": "__snippet__"}
    for block in (b for b in PYTHON if b.page == page and b.run):
        exec(compile(block.text, str(block), "exec"), namespace)  # noqa: S102  (the docs' own code)
    assert capsys.readouterr().out
