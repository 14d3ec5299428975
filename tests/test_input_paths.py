"""Issue 47, classes 3 and 4, for the fast verbs (the `hf` verbs' cases are in test_hf_bad_input.py).

Waits for ever: a named pipe (or a device that never ends, or a directory) given where a verb reads or writes a
file blocks `open()` for ever unless it is refused first; each is refused at once (exit 2, field, value, fix), by
the one check (`user_paths.not_regular`), within the subprocess's timeout. Inputs destroyed: an output that is one
of the verb's inputs (also through a symbolic link) is refused before anything is written, the input unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import ENV, cli

WATCH = Path(__file__).parent / "data" / "watch" / "smoke_gpt_1_3b"
#: Seconds a refusal may take: a verb's start-up is under one; a wait on a pipe never ends.
WITHIN = 30

#: (case, the command with {bad} for the path, the field named, the suffix the path needs).
READS = [
    ("plan --calibration", ["plan", "gpt_1_3b", "--calibration", "{bad}"], "calibration", ".json"),
    ("plan --calibrate", ["plan", "--calibrate", "{bad}"], "calibrate", ".yaml"),
    ("plan tokenizer_path=", ["plan", "gpt_1_3b", "tokenizer_path={bad}"], "tokenizer_path", ".model"),
    ("watch RUN", ["watch", "{bad}"], "run", ".log"),
    ("diff FILE", ["diff", "{bad}", "gpt_1_3b"], "file", ".yaml"),
]
WRITES = [
    ("watch --card", ["watch", str(WATCH), "--card", "{bad}", "--overwrite"], "--card", ".yaml"),
    ("watch --plot", ["watch", str(WATCH), "--plot", "{bad}"], "--plot", ".png"),
    ("plan --plot", ["plan", "gpt_1_3b", "--plot", "{bad}"], "plot", ".png"),
    ("export -o", ["export", "gpt_1_3b", "-o", "{bad}"], "output", ".yaml"),
]


def _refused_at_once(args: list[str], field: str, bad: Path, why: str) -> None:
    result = cli(*args, timeout=WITHIN)  # a hang is subprocess.TimeoutExpired: the test fails, it does not wait
    said = result.stdout + result.stderr  # `plan` prints the refused plan on stdout, wrapped at any character
    flat = "".join(said.split())
    assert result.returncode == 2, said
    assert "".join(f"{field}={str(bad)!r}: {why}".split()) in flat and "Fix:" in said, said
    assert "Traceback" not in said


@pytest.mark.parametrize("case, command, field, suffix", READS + WRITES, ids=[c[0] for c in READS + WRITES])
def test_a_named_pipe_is_refused_at_once(case, command, field, suffix, tmp_path):
    pipe = tmp_path / f"pipe{suffix}"
    os.mkfifo(pipe)
    args = [word.replace("{bad}", str(pipe)) for word in command]
    _refused_at_once(args, field, pipe, "is a named pipe (FIFO), not a regular file")


@pytest.mark.parametrize("case, command, field, suffix", [READS[0], WRITES[0]], ids=[READS[0][0], WRITES[0][0]])
def test_a_device_that_never_ends_or_a_directory_is_refused_as_well(case, command, field, suffix, tmp_path):
    """New members of the class: /dev/zero behind a link with the right suffix (reading it never ends), a directory
    where a file is expected."""
    zero, folder = tmp_path / f"zero{suffix}", tmp_path / f"folder{suffix}"
    zero.symlink_to("/dev/zero")
    folder.mkdir()
    for bad, why in ((zero, "is a device, not a regular file"), (folder, "is a directory")):
        _refused_at_once([word.replace("{bad}", str(bad)) for word in command], field, bad, why)


def test_a_pipe_as_the_default_calibration_is_refused_at_once(tmp_path):
    """The calibration `plan` reads without being asked (NEMO_RECIPES_CALIBRATION): a pipe there is refused, where
    it was passed over as if there were none."""
    pipe = tmp_path / "calibration.json"
    os.mkfifo(pipe)
    result = cli("plan", "gpt_1_3b", timeout=WITHIN, NEMO_RECIPES_CALIBRATION=str(pipe))
    assert result.returncode == 2 and "is a named pipe (FIFO), not a regular file" in result.stderr, result.stderr


def test_a_pipe_inside_a_tokenizer_directory_is_refused_at_once(tmp_path):
    """The file that is the pipe is not the one given: tokenizer.json in the tokenizer_path directory."""
    (tmp_path / "tokenizer_config.json").write_text("{}")
    os.mkfifo(tmp_path / "tokenizer.json")
    why = "is a named pipe (FIFO), not a regular file"
    _refused_at_once(
        ["plan", "gpt_1_3b", f"tokenizer_path={tmp_path}"], "tokenizer_path", tmp_path / "tokenizer.json", why
    )


def test_the_cluster_profiles_and_kubeconfig_readers_refuse_a_pipe(tmp_path):
    """--clusters and a kubeconfig are read by the verbs that import NeMo-Run (tens of seconds to start): their
    readers, run alone in a subprocess that would hang on the pipe."""
    pipe = tmp_path / "clusters.yaml"
    os.mkfifo(pipe)
    code = (
        "import sys\n"
        "from nemo_recipes.errors import InvalidConfigError\n"
        "from nemo_recipes.executors.profiles import load_profiles\n"
        "from nemo_recipes.executors.kubernetes_executor.kubeconfig import check_kubeconfig\n"
        "for read in (lambda: load_profiles(sys.argv[1]), check_kubeconfig):\n"
        "    try:\n"
        "        read()\n"
        "    except InvalidConfigError as error:\n"
        "        print(error.problems[0])\n"
    )
    env = {**ENV, "KUBECONFIG": str(pipe)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run(
        [sys.executable, "-c", code, str(pipe)], capture_output=True, text=True, timeout=WITHIN, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("is a named pipe (FIFO), not a regular file") == 2, result.stdout


# --- an output that is an input -------------------------------------------------------------------------------------


def test_an_output_that_is_one_of_the_inputs_is_refused_and_the_input_kept(tmp_path):
    """`plan --calibrate` writing its calibration over a card it fits on, `watch --card` over the run's log (through
    a symbolic link: a new member), `export -o` over the recipe's tokenizer."""
    run = tmp_path / "run"
    shutil.copytree(WATCH, run)
    log = run / "resume.log"
    before = log.read_bytes()
    (tmp_path / "card-link.yaml").symlink_to(log)
    cards = [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    for card in cards:
        Path(card).write_text("format: x\n")
    tokenizer = tmp_path / "tokenizer.yaml"
    tokenizer.write_text("mine\n")
    cases = [
        (["plan", "--calibrate", *cards, "--calibration", cards[0]], "calibration", cards[0]),
        (["watch", str(run), "--card", str(tmp_path / "card-link.yaml"), "--overwrite"], "--card", "card-link"),
        (["export", "gpt_1_3b", f"tokenizer_path={tokenizer}", "-o", str(tokenizer)], "output", str(tokenizer)),
    ]
    for args, field, value in cases:
        result = cli(*args, timeout=WITHIN)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"{field}=" in result.stderr and value in result.stderr and "is the input" in result.stderr, (
            result.stderr
        )
    assert log.read_bytes() == before and Path(cards[0]).read_text() == "format: x\n"
    assert tokenizer.read_text() == "mine\n"
