"""Untrusted YAML (issue 23, point 4): every file a user hands us (an export given to `diff`, a cluster profile file,
a kubeconfig) goes through `nemo_recipes.yaml_files`: bounded in size, depth and alias expansion, a key given twice
refused with its line; each refusal is exit 2 with field, value (the file) and fix, fast."""

from __future__ import annotations

import time

import pytest
from _cli import cli

from nemo_recipes import yaml_files
from nemo_recipes.errors import InvalidConfigError


def alias_bomb(width: int = 9, levels: int = 9) -> str:
    """The classic 'billion laughs': each level a list of `width` aliases to the level below."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTILE = {
    "alias bomb": (alias_bomb(), "expands to more than"),
    "alias bomb, wide": (alias_bomb(width=40, levels=5), "expands to more than"),
    "alias loop": ("a: &a [1, *a]\n", "loop"),
    "deep block nesting": ("".join(f"{'  ' * i}k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n", "nests more"),
    "deep flow nesting": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nests more than"),
    "duplicate key": ("a: 1\nb: 2\na: 3\n", "has 'a' twice (lines 1 and 3)"),
    "duplicate key, nested": ("a:\n  x: 1\n  y: 2\n  x: 1\n", "has 'x' twice (lines 2 and 4)"),
    "duplicate key, one line": ("a: {x: 1, x: 2}\n", "has 'x' twice"),
    "huge file": ("a: [" + "1, " * (yaml_files.MAX_BYTES // 3 + 1) + "1]\n", "is larger than"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_hostile_shape_is_refused_fast_with_its_reason(tmp_path, case):
    text, reason = HOSTILE[case]
    path = tmp_path / "file.yaml"
    path.write_text(text)
    start = time.monotonic()
    with pytest.raises(InvalidConfigError) as raised:
        yaml_files.read_file(path, field="file", fix="give a good file.")
    assert time.monotonic() - start < 5
    (problem,) = raised.value.problems
    assert problem.field == "file" and problem.value == str(path) and reason in problem.message, problem
    assert problem.fix


def test_ordinary_files_and_merge_keys_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    # Anchors that do not multiply (a profile's shared defaults) are fine, and so are merge keys.
    path.write_text("base: &b {account: a, nodes: 2}\nmine:\n  <<: *b\n  nodes: 4\nother: *b\n")
    assert yaml_files.read_file(path, field="f", fix="x") == {
        "base": {"account": "a", "nodes": 2},
        "mine": {"account": "a", "nodes": 4},
        "other": {"account": "a", "nodes": 2},
    }


@pytest.mark.parametrize(
    "suffix, text, reason",
    [
        (".json", '{"a": 1, "b": {"c": 2, "c": 3}}', "has 'c' twice"),
        (".json", "[" * 100_000 + "]" * 100_000, "nests"),
        (".toml", "a = 1\na = 2\n", "Cannot overwrite a value"),
    ],
)
def test_json_and_toml_exports_are_bounded_too(tmp_path, suffix, text, reason):
    path = tmp_path / f"file{suffix}"
    path.write_text(text)
    with pytest.raises(InvalidConfigError) as raised:
        yaml_files.read_file(path, field="file", fix="x")
    assert reason in raised.value.problems[0].message


def test_diff_of_the_alias_bomb_fails_fast_with_exit_2(tmp_path):
    """The issue's example: `nemo-recipes diff` of a few hundred bytes of aliases ran past any timeout."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_bytes()) < 520
    start = time.monotonic()
    result = cli("diff", "gpt_7b", str(bomb), timeout=60)
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - start < 30
    assert f"file={str(bomb)!r}" in result.stderr and "expands to more than" in result.stderr
    assert "Fix: " in result.stderr and "Traceback" not in result.stderr


def test_diff_refuses_a_duplicate_key_in_an_edited_export(tmp_path):
    """Two exported files, one edited by hand with a key given twice: refused with the line, never resolved."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  max_steps: 10\n  val_check_interval: 5\n  max_steps: 20\n")
    theirs = tmp_path / "theirs.yaml"
    theirs.write_text("trainer:\n  max_steps: 10\n")
    result = cli("diff", str(theirs), str(mine), "--json")
    assert result.returncode == 2
    assert "has 'max_steps' twice (lines 2 and 4)" in result.stdout + result.stderr


def test_a_profiles_file_is_read_through_the_bounded_loader(tmp_path):
    from nemo_recipes.executors.profiles import load_profiles

    path = tmp_path / "clusters.yaml"
    path.write_text("defaults: &d {preset: local}\n" + alias_bomb())
    with pytest.raises(InvalidConfigError) as raised:
        load_profiles(path)
    assert raised.value.problems[0].field == "clusters" and "expands to more than" in str(raised.value)
