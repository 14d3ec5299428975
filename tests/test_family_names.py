"""A family's name lives in its module: the code outside `nemo_recipes/families/` names no family (issue 44's rule:
`qwen` nowhere, `llama` and `gpt2` in at most two files), so that adding a family never touches the catalog, the
planner, the converter or the CLI. Comments, docstrings and prose strings (help texts, messages, the sources of
values: strings with a space) may name one; identifiers and the strings code compares or looks up (no space: keys,
model types, class names) may not. Read from the source's syntax tree, no import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nemo_recipes"
#: name -> how many files outside families/ may still hold it (and which, so that a new one is seen).
ALLOWED = {
    "qwen": set(),
    "llama": set(),
    "deepseek": set(),
    "gpt2": {"data/fast_encoder.py"},  # GPT2_PATTERN: the byte-level pre-tokenizer's regex, a tokenizer's name
}
LIMIT = 2


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def words_in_code(source: str) -> list[str]:
    """Every identifier and word-like string constant (no whitespace) of `source`; docstrings and prose aside."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    words: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            if not any(c.isspace() for c in node.value):
                words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append(node.name)
        elif isinstance(node, ast.arg):
            words.append(node.arg)
        elif isinstance(node, ast.alias):
            words += [node.name, node.asname or ""]
        elif isinstance(node, ast.keyword) and node.arg:
            words.append(node.arg)
    return words


def files_naming(name: str, sources: dict[str, str]) -> set[str]:
    pattern = re.compile(name, re.IGNORECASE)
    return {relative for relative, text in sources.items() if any(pattern.search(w) for w in words_in_code(text))}


def _outside_families() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "families"
    }


def test_no_family_is_named_in_code_outside_the_family_modules():
    sources = _outside_families()
    found = {name: files_naming(name, sources) for name in ALLOWED}
    assert all(len(files) <= LIMIT for files in found.values()), found
    assert found == ALLOWED, f"a family named outside nemo_recipes/families/: {found} (allowed: {ALLOWED})"


def test_the_check_sees_a_family_name_in_code_but_not_in_prose():
    code = 'def f(x):\n    """The Llama way."""\n    # llama\n    return x == "llama"\n'
    assert files_naming("llama", {"a.py": code}) == {"a.py"}
    prose = 'def f(x):\n    """The Llama way."""\n    # llama\n    return x + " as Llama 3 has it"\n'
    assert files_naming("llama", {"a.py": prose}) == set()
    assert files_naming("gpt2", {"c.py": "if mapping.model_type == 'gpt2':\n    pass\n"}) == {"c.py"}
    assert files_naming("qwen", {"b.py": "QWEN_ROWS = 1\n"}) == {"b.py"}
