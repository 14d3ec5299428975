"""`nemo-recipes watch` on the log of a real run: `tests/data/watch/smoke_gpt_1_3b/` is what `nemo-recipes smoke
gpt_1_3b --dir` kept on this project's CPU machine under NeMo 2.7.3 (the phases' logs as NeMo printed them, the
smoke callback's own per-step record `metrics.jsonl`, and the run's configuration `train.json`; see its README).
The parser is pinned against NeMo's own lines there, not a hand-written string. Plain Python: no training here
(`test_smoke_training.py` also watches a run it has just trained)."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
from _cli import cli

from nemo_recipes.watching.progress_log import LOSS, STEP_TIME, parse

RUN = Path(__file__).parent / "data" / "watch" / "smoke_gpt_1_3b"


def _records() -> dict[int, dict]:
    """The smoke callback's record of every committed step, by step (its own timer around the same batch)."""
    rows = [json.loads(line) for line in (RUN / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r for r in rows if r.get("event") == "step"}


def test_the_parser_reads_nemo_2_7_3s_own_progress_lines():
    train = parse((RUN / "train.log").read_text().splitlines())
    resume = parse((RUN / "resume.log").read_text().splitlines())
    assert [line.step for line in train] == list(range(1, 11))
    assert [line.step for line in resume] == list(range(11, 21))
    assert {line.max_steps for line in train + resume} == {20}
    records = _records()
    for line in train + resume:
        # ProgressPrinter writes 4 significant digits of the value the smoke callback records unrounded.
        assert line.get(LOSS) == pytest.approx(records[line.step]["loss"], rel=1e-3), line
        # Two timers around the same batch (TimingCallback's, the smoke callback's, which ends later): 2-4 ms apart
        # in this run, 30 ms once on the loaded machine.
        assert line.get(STEP_TIME) == pytest.approx(records[line.step]["seconds"], abs=0.04), line


def _watch_json(run: Path, *args: str) -> dict:
    result = cli("watch", str(run), "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_watch_reads_a_smoke_run_as_the_judge_does():
    report = _watch_json(RUN)
    figures = report["figures"]
    assert report["recipe"] == "gpt_1_3b"
    assert figures["step"] == 20 and figures["max_steps"] == 20
    assert [x["step"] for x in figures["logged"]] == list(range(1, 21))  # every step trained, once
    assert figures["segments"] == [
        {"first_step": 1, "last_step": 10, "lines": 10},
        {"first_step": 11, "last_step": 20, "lines": 10},
    ]
    assert figures["flags"] == ["restart: the run had reached step 10 and resumed after step 10"]
    # The window leaves out each process's first step (1, 11), the steps that saved a checkpoint (every 5 here) and
    # the step after each save.
    assert figures["window_steps"] == [2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19]
    judge = statistics.median(_records()[s]["seconds"] for s in figures["window_steps"])
    assert figures["step_time_s"] == pytest.approx(judge, rel=0.02, abs=0.005)
    tokens = 4 * 64  # the scaled-down shape's global batch x sequence (train.json)
    assert figures["tokens_per_step"] == tokens and figures["num_gpus"] == 1
    assert figures["tokens_per_s"] == pytest.approx(tokens / judge, rel=0.03)
    assert figures["eta_s"] == 0
    assert figures["loss"] == pytest.approx(_records()[20]["loss"], rel=1e-3)


def test_a_resume_that_started_again_from_step_0_is_flagged(tmp_path):
    # The first phase's log twice: the second process began again at step 1 instead of resuming.
    shutil.copy(RUN / "train.log", tmp_path / "train.log")
    shutil.copy(RUN / "train.log", tmp_path / "resume.log")
    (flag,) = _watch_json(tmp_path)["figures"]["flags"]
    assert flag.startswith("restart from step 0: the run had reached step 10")


def test_a_non_finite_loss_is_flagged(tmp_path):
    # NeMo writes a NaN loss as `nan` (f"{val:.4}"); one real line's loss replaced by it.
    lines = (RUN / "train.log").read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if "global_step: 6 |" in line)
    head, rest = lines[index].split("reduced_train_loss: ", 1)
    lines[index] = head + "reduced_train_loss: nan |" + rest.split("|", 1)[1]
    (tmp_path / "job.log").write_text("".join(lines))
    flags = _watch_json(tmp_path / "job.log")["figures"]["flags"]
    assert flags == ["non-finite loss at step 7: nan"]


def test_a_loss_spike_is_flagged(tmp_path):
    # One real line of the resumed phase with its loss raised to 9.0, far above the steps before it (6.7-7.2).
    lines = (RUN / "resume.log").read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if "global_step: 18 |" in line)
    head, rest = lines[index].split("reduced_train_loss: ", 1)
    lines[index] = head + "reduced_train_loss: 9.0 |" + rest.split("|", 1)[1]
    shutil.copy(RUN / "train.log", tmp_path / "train.log")
    (tmp_path / "resume.log").write_text("".join(lines))
    flags = _watch_json(tmp_path)["figures"]["flags"]
    restart, spike = flags
    assert restart.startswith("restart:") and spike.startswith("loss spike at step 19: 9 against a median of")
    # The run as it was has no spike: the loss falls from 7.2 to 6.8 in steps of a few hundredths.
    assert not any("spike" in f for f in _watch_json(RUN)["figures"]["flags"])


@pytest.mark.parametrize(
    "case, why",
    [
        ("not a run", "is a directory without a run's log"),
        ("another format", "holds no NeMo progress line"),
        ("does not exist", "is neither a log file nor a run directory, nor the id or title of a NeMo-Run experiment"),
    ],
)
def test_what_is_not_a_run_exits_2_with_field_value_and_fix(case, why, tmp_path):
    target = {
        "not a run": tmp_path,
        "another format": RUN / "train.json",
        "does not exist": tmp_path / "no-such-run",
    }[case]
    result = cli("watch", str(target), "--json")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "run" and problem["value"] == str(target)
    assert problem["message"].startswith(why) and problem["fix"]


def test_beside_the_plan_each_figure_has_the_planners_prediction_and_the_deviation():
    # The run trained on a CPU; asked against an H100 it is far off the plan, and the warning names the plan's terms.
    from nemo_recipes.catalog import RecipeSpec
    from nemo_recipes.plan.hardware import Cluster
    from nemo_recipes.plan.throughput import estimate_throughput

    report = _watch_json(RUN, "--gpu", "h100")
    spec = RecipeSpec(**json.loads((RUN / "train.json").read_text())["spec"])
    plan = estimate_throughput(spec, Cluster.of(1, 1, "h100"))
    rows = report["plan"]["figures"]
    assert rows["step_time_s"]["planned"] == pytest.approx(plan.step_time_s, rel=1e-12)
    assert rows["tokens_per_s_per_gpu"]["planned"] == pytest.approx(plan.tokens_per_s_per_gpu, rel=1e-12)
    measured = report["figures"]["step_time_s"]
    assert rows["step_time_s"]["deviation"] == pytest.approx(measured / plan.step_time_s - 1, rel=1e-12)
    warning, device = report["plan"]["warnings"]
    dominant = plan.dominant_term
    assert warning.startswith("step time +") and f"{dominant} is " in warning
    assert report["device"]["name"] == "cpu" and device.startswith("the run trained on the cpu, not on h100-80gb")


def test_against_the_plan_needs_the_recipe_and_a_known_gpu():
    result = cli("watch", str(RUN / "train.log"), "--gpu", "h100", "--json")
    assert result.returncode == 2
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "--gpu" and "recipe" in problem["message"]
    result = cli("watch", str(RUN), "--gpu", "h1000", "--json")
    assert result.returncode == 2
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "gpu" and problem["value"] == "h1000"


def _as_on_a_gpu(tmp_path: Path) -> Path:
    """The kept run as a GPU run records itself: Lightning's device line in each phase's log and the smoke launch
    records say `cuda` (there is no GPU here to train one on); the step times are left as they are, since what the
    card tests check is what watch does with a run that trained on the GPU it names."""
    run = tmp_path / "gpu_run"
    shutil.copytree(RUN, run)
    for name in ("train.log", "resume.log"):
        text = (run / name).read_text()
        (run / name).write_text(text.replace(CPU_LINE, "GPU available: True (cuda), used: True"))
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"device": "cpu"', '"device": "cuda"'))
    return run


CPU_LINE = "GPU available: False, used: False"


def test_the_card_records_the_run_and_the_plan_and_calibrate_reads_it(tmp_path):
    import yaml

    from nemo_recipes.plan.calibration import case_from_card

    path = tmp_path / "run.yaml"
    gpu_run = _as_on_a_gpu(tmp_path)
    result = cli("watch", str(gpu_run), "--gpu", "h100", "--card", str(path))
    assert result.returncode == 0, result.stderr
    text = path.read_text()
    assert text.startswith("# Run card written by `nemo-recipes watch RUN --card FILE`")
    card = yaml.safe_load(text)
    report = _watch_json(gpu_run, "--gpu", "h100")
    spec = json.loads((RUN / "train.json").read_text())["spec"]
    assert card["recipe"]["name"] == "gpt_1_3b"
    assert card["recipe"]["overrides"]["num_layers"] == spec["num_layers"] == 2  # the scaled-down shape
    assert card["layout"]["data_parallel"] == 1 and card["layout"]["grad_accumulation"] == 2
    recorded = card["cluster"].pop("device_recorded")
    assert card["cluster"] == {"gpu": "h100-80gb", "nodes": 1, "gpus_per_node": 1, "device": "cuda"}
    assert any("train.log:11: GPU available: True (cuda)" in r for r in recorded), recorded
    assert any("metrics.jsonl:1: launch device cuda" in r for r in recorded), recorded
    assert len(card["run_id"]) == 16
    assert set(card["verification_environment"]["software"]) >= {"nemo-toolkit", "megatron-core", "torch"}
    metrics, figures = card["metrics"], report["figures"]
    assert metrics["step_time_s"] == figures["step_time_s"] and metrics["final_loss"] == figures["loss"]
    assert metrics["initial_loss"] == figures["initial_loss"] and metrics["steps"] == 20
    assert metrics["mfu"] == report["plan"]["figures"]["mfu"]["measured"]
    assert card["plan"]["step_time_s"] == report["plan"]["figures"]["step_time_s"]["planned"]
    assert card["written_by"].startswith("nemo-recipes watch")
    # A card `plan --calibrate` can fit on: the run's own plan, rebuilt from the recipe and its overrides.
    case, problems = case_from_card(card, str(path), card["stack"])
    assert problems == [] and case is not None
    assert case.published == metrics["step_time_s"]
    assert case.predict().step_time_s == pytest.approx(card["plan"]["step_time_s"], rel=1e-12)


def test_a_card_is_not_replaced_without_asking_and_an_unwritable_one_exits_1(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("kept\n")
    result = cli("watch", str(RUN), "--card", str(path), "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "--card" and "--overwrite" in problem["fix"]
    assert path.read_text() == "kept\n"
    result = cli("watch", str(RUN), "--card", str(path), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert path.read_text().startswith("# Run card") and not list(tmp_path.glob(".run.yaml.*"))  # no temp file left
    result = cli("watch", str(RUN), "--card", str(tmp_path / "missing" / "run.yaml"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot write the card" in result.stderr and "No such file or directory" in result.stderr
    # Without --gpu the card has no plan and no GPU: calibrate refuses it, naming the fix.
    import yaml

    from nemo_recipes.plan.calibration import case_from_card

    card = yaml.safe_load(path.read_text())
    assert card["plan"] is None and card["cluster"]["gpu"] is None
    _, problems = case_from_card(card, str(path), card["stack"])
    assert [p.field for p in problems] == [f"{path}: cluster.gpu"] and "--gpu" in problems[0].fix


def test_the_card_records_the_stack_the_plan_was_timed_for(tmp_path):
    import yaml

    from nemo_recipes.catalog import RecipeSpec
    from nemo_recipes.plan.hardware import Cluster
    from nemo_recipes.plan.throughput import estimate_throughput

    path = tmp_path / "run.yaml"
    result = cli("watch", str(_as_on_a_gpu(tmp_path)), "--gpu", "h100", "--stack", "megatron-core", "--card", str(path))
    assert result.returncode == 0, result.stderr
    card = yaml.safe_load(path.read_text())
    spec = RecipeSpec(**json.loads((RUN / "train.json").read_text())["spec"])
    plan = estimate_throughput(spec, Cluster.of(1, 1, "h100"), stack="megatron-core")
    assert card["stack"] == card["plan"]["stack"] == "megatron-core"
    assert card["plan"]["step_time_s"] == pytest.approx(plan.step_time_s, rel=1e-12)


@pytest.mark.parametrize("record", ["smoke run", "lightning's line alone", "metrics.jsonl alone"])
def test_a_card_that_names_a_gpu_for_a_run_timed_on_the_cpu_is_refused(record, tmp_path):
    # The kept smoke run trained on the CPU, and says so twice: Lightning's line in each log, the smoke launch records.
    # Each record alone is enough: a job directory without the smoke record, a log without Lightning's line.
    run = RUN
    if record != "smoke run":
        run = tmp_path / "run"
        shutil.copytree(RUN, run)
        if record == "lightning's line alone":
            (run / "metrics.jsonl").unlink()
        else:
            for name in ("train.log", "resume.log"):
                (run / name).write_text((run / name).read_text().replace(CPU_LINE, ""))
    card = tmp_path / "h100.yaml"
    result = cli("watch", str(run), "--gpu", "h100", "--card", str(card), "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["field"] == "--gpu" and problem["value"] == "h100"
    where = "metrics.jsonl:1: launch device cpu" if record == "metrics.jsonl alone" else f"train.log:11: {CPU_LINE}"
    assert (
        problem["message"].startswith("is not where the run trained: it recorded device cpu")
        and where in (problem["message"])
    ), problem
    assert "leave out --card" in problem["fix"]
    assert not card.exists()


def _absurd(tmp_path: Path, change) -> Path:
    """A run directory (the kept recipe) whose train.log has each progress line passed through `change`."""
    run = tmp_path / "absurd"
    run.mkdir()
    shutil.copy(RUN / "train.json", run / "train.json")
    lines = (RUN / "train.log").read_text().splitlines(keepends=True)
    (run / "train.log").write_text("".join(change(line) if "Training epoch" in line else line for line in lines))
    return run


def _step_time(at: dict):
    """A change that writes the step time of the lines of `at` (global_step: text) as the text given."""

    def change(line: str) -> str:
        for step, text in at.items():
            if f"global_step: {step} |" in line:
                return re.sub(r"(train_step_timing in s: )\S+", rf"\g<1>{text}", line)
        return line

    return change


def _strict(text: str) -> dict:
    def refuse(constant: str):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_absurd_step_times_are_flagged_and_left_out_and_json_stays_strict(tmp_path):
    run = _absurd(tmp_path, _step_time({3: "inf", 4: "1e400", 5: "-0.5", 6: "0", 8: "nan"}))
    result = cli("watch", str(run), "--json")
    assert result.returncode == 0, result.stderr
    report = _strict(result.stdout)
    figures = report["figures"]
    invalid = [f for f in figures["flags"] if f.startswith("invalid step time")]
    assert [f.split(":")[0] for f in invalid] == [f"invalid step time at step {s}" for s in (4, 5, 6, 7, 9)]
    assert figures["left_out_steps"]["invalid step time"] == 5
    assert not set(figures["window_steps"]) & {4, 5, 6, 7, 9}
    assert 0 < figures["step_time_s"] < 1 and figures["tokens_per_s"] > 0
    assert figures["logged"][3]["step_time_s"] is None  # inf, written as null and named
    assert "figures.logged[3].step_time_s: inf" in report["non_finite_as_null"]
    assert "figures.logged[8].step_time_s: nan" in report["non_finite_as_null"]
    text = cli("watch", str(run))
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    assert "! invalid step time at step 6: -0.5 (not a positive finite number of seconds)" in text.stdout


@pytest.mark.parametrize(
    "case, expected",
    [
        # Each was a traceback or a false figure: a total of 0 steps (a negative ETA), a total past what a date can
        # hold (OverflowError), a step number of 1e300 past the total (a negative ETA past what a date can hold), no
        # valid step time (told "every logged step is a first step or near a checkpoint save").
        ("no steps", "! the log's total is 0 steps"),
        ("endless", "days ("),
        ("step 1e300", "is past the log's total of 20 steps: no ETA"),
        ("all invalid", "(no step time: none of the 10 logged steps counts: 10 invalid step time)"),
    ],
)
def test_absurd_totals_and_steps_give_a_true_report(case, expected, tmp_path):
    change = {
        "no steps": lambda line: line.replace("/19 |", "/-1 |"),
        "endless": lambda line: line.replace("/19 |", "/99999999999999999999999 |"),
        "step 1e300": lambda line: line.replace("global_step: 9 |", "global_step: 1e300 |"),
        "all invalid": _step_time({step: "-1" for step in range(10)}),
    }[case]
    result = cli("watch", str(_absurd(tmp_path, change)), timeout=30)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert expected in result.stdout, result.stdout
    if case in ("no steps", "step 1e300"):
        assert "  ETA " not in result.stdout


def test_every_json_output_is_strict_even_through_to_dict():
    # The one writer of every verb's --json: a non-finite number anywhere (here inside an object written through its
    # to_dict, as plans and reports are) is null, and named with its value.
    import io

    from nemo_recipes.cli._output import NON_FINITE_KEY, print_json

    class Report:
        def to_dict(self) -> dict:
            return {"rate": float("-inf"), "rows": (1.5, float("nan"))}

    out = io.StringIO()
    print_json({"report": Report(), "ok": 2.0}, out)
    assert _strict(out.getvalue()) == {
        "report": {"rate": None, "rows": [1.5, None]},
        "ok": 2.0,
        NON_FINITE_KEY: ["report.rate: -inf", "report.rows[1]: nan"],
    }


def _svg_points(svg, gid: str) -> int:
    """The points of the line drawn with SVG id `gid` (matplotlib writes a line as one path: M x y L x y ...)."""
    group = next(g for g in svg.iter() if g.get("id") == gid)
    path = next(p for p in group.iter() if p.tag.endswith("path"))
    return sum(token in ("M", "L") for token in path.get("d").split())


def test_the_plot_draws_each_process_and_the_plan(tmp_path):
    import xml.etree.ElementTree as ET

    pytest.importorskip("matplotlib")
    path = tmp_path / "run.svg"
    result = cli("watch", str(RUN), "--gpu", "h100", "--plot", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(f"plot written to {path}\n")
    svg = ET.parse(path).getroot()
    # The smoke run's two processes (train: steps 1-10, resume: 11-20), every logged step a point on each panel.
    for panel in ("loss", "throughput"):
        assert [_svg_points(svg, f"{panel}-process-{n}") for n in (1, 2)] == [10, 10]
    assert _svg_points(svg, "throughput-plan") == 2  # the plan's tokens/s per GPU, a level line
    text = path.read_text()
    assert "process 2 (steps 11-20)" in text and "plan on" in text and "tokens/s per GPU" in text
    refused = cli("watch", str(RUN), "--plot", str(tmp_path / "run.pdf"))
    assert refused.returncode == 2 and "plot='" in refused.stderr and "run.png" in refused.stderr, refused.stderr


@pytest.mark.nemo
def test_the_peak_memory_is_read_as_nemo_2_7_3_formats_it(tmp_path):
    """NEMO_LOG_MEMORY_USAGE=1 (set by the presets) adds max_memory_reserved / max_memory_allocated, in bytes, to the
    progress line; no run on this CPU machine can log them (NeMo copies them through CUDA memory), so the line is
    made by NeMo's own ProgressPrinter: its averaging over the interval and its formatting, both branches (a whole
    number printed as it is, any other value with 4 significant digits: 6.124e+10)."""
    from nemo.lightning.pytorch.callbacks.progress_printer import ProgressPrinter

    printer = ProgressPrinter(log_interval=2)
    steps = [
        # two steps of one interval: the memory grows between them (its mean is not a whole number)
        {"global_step": 8.0, "max_memory_reserved": 61_203_283_968.0, "max_memory_allocated": 52_613_349_376.0},
        {"global_step": 9.0, "max_memory_reserved": 61_270_392_833.0, "max_memory_allocated": 52_613_349_376.0},
    ]
    for metrics in steps:  # as ProgressPrinter.on_train_batch_end accumulates what Lightning hands it
        for key, value in {"reduced_train_loss": 7.25, "train_step_timing in s": 1.5, **metrics}.items():
            if key in printer.skip_accumulate_metrics:
                printer.total_metrics_dict[key] = value
            else:
                printer.total_metrics_dict[key] += value
    averaged = printer.average_metrics_dict
    line = printer.format_string(printer.train_description + " epoch 0, iteration 9/99", averaged)
    assert "max_memory_reserved: 6.124e+10" in line and "max_memory_allocated: 52613349376" in line, line
    parsed = parse([line])[0]
    assert parsed.get("max_memory_reserved") == pytest.approx(averaged["max_memory_reserved"], rel=1e-3)
    assert parsed.get("max_memory_allocated") == averaged["max_memory_allocated"] == 52_613_349_376
    (tmp_path / "job.log").write_text(line + "\n")
    figures = _watch_json(tmp_path / "job.log")["figures"]
    assert figures["peak_memory_allocated_bytes"] == 52_613_349_376
    assert figures["peak_memory_reserved_bytes"] == pytest.approx(61.24e9, rel=1e-3)


def test_a_real_run_with_memory_logging_on_puts_it_where_the_parser_reads_it():
    """NeMo 2.7.3's own lines with NEMO_LOG_MEMORY_USAGE=1 (tests/data/watch/memory_logged: a CPU run, so 0 bytes):
    the keys as NeMo names them and places them, each line read with its memory."""
    log = Path(__file__).parent / "data" / "watch" / "memory_logged" / "combined.log"
    lines = parse(log.read_text().splitlines())
    assert [line.step for line in lines] == list(range(1, 11))
    assert all(line.get("max_memory_reserved") == 0 == line.get("max_memory_allocated") for line in lines)
    figures = _watch_json(log)["figures"]
    assert figures["peak_memory_reserved_bytes"] == 0 and figures["peak_memory_allocated_bytes"] == 0
