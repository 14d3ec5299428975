"""Running the installed `nemo-recipes` console script in a subprocess, as a user would, for the CLI tests."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

# The console script pip installed next to this interpreter (the project's venv), not a module run by path.
SCRIPT = str(Path(sys.executable).with_name("nemo-recipes"))
SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"

# Fixed width and no colour: argparse and our tables wrap to the terminal, which differs between machines.
ENV = {**os.environ, "COLUMNS": "100", "LINES": "50", "NO_COLOR": "1", "PYTHONWARNINGS": "ignore"}


def cli(*args: str, timeout: float = 60, cwd: "str | Path | None" = None, **env: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env={**ENV, **env}
    )
    assert_no_canary(result.stdout, result.stderr)
    return result


def assert_no_canary(*outputs: str) -> None:
    """The secret canaries conftest.py puts in every test's environment never appear in what we print."""
    canaries = {os.environ.get(name, "") for name in ("WANDB_API_KEY", "HF_TOKEN")} - {""}
    for output in outputs:
        leaked = [c for c in canaries if c.startswith("canary-") and c in output]
        assert not leaked, f"a secret's value was printed: {output[-2000:]}"


def check_snapshot(name: str, text: str) -> None:
    """`text` must equal tests/snapshots/NAME; `UPDATE_SNAPSHOTS=1 pytest ...` rewrites the file instead."""
    path = SNAPSHOTS / name
    if UPDATE:
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path}; create it with: UPDATE_SNAPSHOTS=1 pytest tests/test_cli_help.py"
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "now"))
        raise AssertionError(f"output differs from {path} (UPDATE_SNAPSHOTS=1 to accept):\n{diff}")
