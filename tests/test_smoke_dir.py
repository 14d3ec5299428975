"""`nemo-recipes smoke --dir` that cannot hold the run is an input error (exit 2) naming the field, the value and
the fix, found before anything heavy is imported: a file, a file in the path, a directory that cannot be written,
a disk with no room (RLIMIT_FSIZE stands in for a full disk: the kernel refuses the write as it would there)."""

from __future__ import annotations

import json
import resource
import subprocess

import pytest
from _cli import ENV, SCRIPT


def smoke_dir(directory: str, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [SCRIPT, "smoke", "gpt_1_3b", "--dir", directory, "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        preexec_fn=limit,
    )


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize(
    "case, why, fix",
    [
        ("file", "is a file, not a directory.", "give --dir a new or empty directory."),
        ("file in path", "has a file in its path ({file}), not a directory.", "give --dir a new or empty directory."),
        ("cannot write", "cannot be written (Operation not permitted: {dir}).", "give --dir a directory you can write"),
        ("no room", "has no room: writing to it failed (File too large).", "free space there"),
    ],
)
def test_a_dir_that_cannot_hold_the_run_is_named_with_its_fix(case, why, fix, a_file, tmp_path):
    directory, limit = {
        "file": (str(a_file), None),
        "file in path": (str(a_file / "runs" / "1"), None),
        "cannot write": ("/sys/nemo-recipes-smoke", None),  # sysfs refuses new directories, even to root
        "no room": (str(tmp_path / "run"), 4096),  # room for the small files, not for the write test
    }[case]
    result = smoke_dir(directory, limit)
    assert result.returncode == 2, result.stderr[-2000:]
    expected = why.format(file=a_file, dir=directory)
    assert result.stderr.startswith(f"nemo-recipes smoke: error: dir={directory!r}: {expected} Fix: {fix}")
    assert "internal error" not in result.stderr and "standard output" not in result.stderr
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "dir" and problem["value"] == directory
