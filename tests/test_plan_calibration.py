"""`nemo-recipes plan --calibrate CARD...` and `plan --calibration FILE` (issue 30): the planner refitted on runs.

The runs are the published rows of benchmarks/data/calibration.csv, written as the run cards `watch --card` writes,
grouped by source (the id prefix, `source_of` in the benchmark): the same measurements the benchmark scores the
shipped constants on. The fit is `plan.calibration.refit`, the benchmark's own; the library tests give it a coarser
grid where the full one would be slow, never another function.
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from _cli import cli

from nemo_recipes.catalog import RECIPES
from nemo_recipes.plan import calibration
from nemo_recipes.plan.calibration import Case, case_from_card, mean_abs_error, read_calibration, refit
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.throughput import CONSTANTS, estimate_throughput, using_constants
from nemo_recipes.watching.card import CARD_FORMAT, overrides_of

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import planner_accuracy  # noqa: E402

#: The catalog recipe every published row is written as (with every field that differs as an override).
BASE = "gpt_7b"


def _published() -> list[Case]:
    with open(REPO / "benchmarks" / "data" / "calibration.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cases = []
    for row in rows:
        try:
            cases.append(planner_accuracy.case(row))
        except (ValueError, TypeError):
            continue
    return cases


CASES = _published()


def card_of(case: Case, slower: float = 1.0) -> dict:
    """The run card of a published row: its plan as gpt_7b with overrides, its measured step time (tokens/s rows
    converted through the step's tokens), `slower` times longer (a cluster slower than the published one)."""
    spec = RECIPES[BASE].replace(**{k: v for k, v in overrides_of(case.spec)[1].items() if k != "size_label"})
    if case.metric == "step_s":
        step = case.published
    else:
        step = spec.global_batch_size * spec.seq_length / (case.published * case.cluster.world_size)
    _, changed = overrides_of(spec.replace(name=BASE))
    return {
        "format": CARD_FORMAT,
        "title": case.id,
        "recipe": {"name": BASE, "overrides": changed},
        "precision": spec.precision,
        "stack": case.stack,
        "cluster": {
            "gpu": case.cluster.gpu.name,
            "nodes": spec.num_nodes,
            "gpus_per_node": spec.num_gpus_per_node,
            "device": "cuda",  # as watch records a run whose log says Lightning used the GPU
        },
        "metrics": {"step_time_s": step * slower, "step_time_window_steps": 50},
    }


def write_cards(root: Path, cases: list[Case], slower: float = 1.0) -> list[Path]:
    """The cards of `cases`, one YAML file each, in a directory per source."""
    paths = []
    for case in cases:
        path = root / case.source / f"{case.id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(card_of(case, slower), sort_keys=False))
        paths.append(path)
    return paths


def cases_of(paths: list[Path]) -> list[Case]:
    found = []
    for path in paths:
        card = yaml.safe_load(path.read_text())
        case, problems = case_from_card(card, str(path), card["stack"])
        assert problems == [] and case is not None, problems
        found.append(case)
    return found


def test_a_card_rebuilds_the_plan_of_its_published_row(tmp_path):
    for case in CASES:
        (rebuilt,) = cases_of(write_cards(tmp_path, [case]))
        expected = case.predict().step_time_s
        assert rebuilt.predict().step_time_s == pytest.approx(expected, rel=1e-9), case.id


def source(name: str) -> list[Case]:
    return [c for c in CASES if c.source == name]


def test_calibrating_on_part_of_a_source_lowers_the_error_on_its_other_rows(tmp_path):
    # MLM: Megatron-LM's H100 table, BF16 on Transformer Engine. Fitted on every other row, scored on the rest.
    # (Not every source gains: the shipped constants were fitted on all these rows, and on NeMo 24.07's they are
    # already within 0.8 %, which a refit on five of them does not beat on the other four, 1.3 %; the next test
    # moves those rows off the shipped figures.)
    paths = write_cards(tmp_path, source("MLM"))
    runs = cases_of(paths)
    fit_on, scored = runs[::2], runs[1::2]
    fitted = refit(fit_on)
    before, after = mean_abs_error(scored, CONSTANTS), mean_abs_error(scored, fitted)
    assert after < 0.5 * before, (before, after)


def test_a_cluster_slower_than_the_published_one_is_found_on_the_rows_left_out(tmp_path):
    # NeMo 24.07's H100 FP8 rows, as if measured on a cluster 25 % slower: the shipped constants are 20 % off on
    # every row; refitted on five rows, the other four come within a few percent.
    runs = cases_of(write_cards(tmp_path, source("NeMo24.07"), slower=1.25))
    fit_on, scored = runs[:5], runs[5:]
    coarse = {name: values[::2] for name, values in calibration.GRID.items()}
    fitted = refit(fit_on, grid=coarse)
    before, after = mean_abs_error(scored, CONSTANTS), mean_abs_error(scored, fitted)
    assert before > 15 and after < 6, (before, after)


def test_the_cli_calibrates_and_plan_uses_it_only_where_it_was_measured(tmp_path):
    cards = write_cards(tmp_path / "cards", source("MLM")[:3], slower=1.3)
    out = tmp_path / "mlm.json"
    result = cli("plan", "--calibrate", *map(str, cards), "--calibration", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "with the shipped constants" in result.stdout and "left out" in result.stdout, result.stdout
    assert "! left out, the refit does worse" not in result.stdout  # 30 % slower: the refit generalises
    written = json.loads(out.read_text())
    assert written["fitted_on"]["gpus"] == ["h100-80gb"] and written["fitted_on"]["precisions"] == ["bf16"]
    errors = written["mean_abs_error_pct"]
    assert errors["after"] < errors["before"] and errors["held_out"] is not None

    def planned(*args: str, **env: str) -> dict:
        result = cli("plan", "gpt_7b", "precision=bf16", "--json", *args, **env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    empty = {"XDG_CONFIG_HOME": str(tmp_path / "no-config"), "NEMO_RECIPES_CALIBRATION": ""}
    shipped = planned(**empty)
    calibrated = planned("--calibration", str(out), **empty)
    assert shipped["calibration"] is None
    assert calibrated["calibration"]["applied"] is True
    # 30 % slower runs: the calibrated plan is slower than the shipped one.
    assert calibrated["throughput"]["step_time_s"] > 1.1 * shipped["throughput"]["step_time_s"]
    # Another GPU keeps the shipped figures, and says why.
    b200 = planned("--gpu", "b200", **empty)
    b200_calibrated = planned("--gpu", "b200", "--calibration", str(out), **empty)
    assert b200_calibrated["calibration"]["applied"] is False and "GPU b200" in b200_calibrated["calibration"]["note"]
    assert b200_calibrated["throughput"] == b200["throughput"]
    # The default place: `plan` without --calibration reads it; --no-calibration ignores it.
    default = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "NEMO_RECIPES_CALIBRATION": ""}
    (tmp_path / "config" / "nemo-recipes").mkdir(parents=True)
    (tmp_path / "config" / "nemo-recipes" / "calibration.json").write_text(out.read_text())
    assert planned(**default)["throughput"] == calibrated["throughput"]
    assert planned("--no-calibration", **default)["throughput"] == shipped["throughput"]


def test_a_refit_that_does_worse_on_runs_left_out_is_refused_and_nothing_is_written(tmp_path):
    # Megatron-LM's five H100 rows as published: the shipped constants are 4.4 % off; refitted on four, the fifth is
    # off by more than that on average (five runs of one software and GPU do not pin six constants down). Plans would
    # get worse: refused (exit 2), and the shipped constants stay in use.
    cards = write_cards(tmp_path / "cards", source("MLM"))
    out = tmp_path / "mlm.json"
    (problem,) = _problems(
        cli("plan", "--calibrate", *map(str, cards), "--calibration", str(out), "--json", timeout=300)
    )
    assert problem["field"] == "calibrate" and problem["value"] == list(map(str, cards))
    assert "for the shipped constants: it would make plans worse, so nothing is written" in problem["message"]
    assert "more varied" in problem["fix"]
    assert not out.exists()


def test_a_refit_no_better_than_the_calibration_in_place_leaves_it_in_place(tmp_path):
    # Two runs 30 % slower than published: the shipped constants are far off, and a calibration fitted on both is
    # already in place (in sample, close). A refit on each run alone misses the other by more: the file in place is
    # kept byte for byte, and plans keep using it.
    cases = source("MLM")[:2]
    cards = write_cards(tmp_path / "cards", cases, slower=1.3)
    coarse = {name: values[::3] for name, values in calibration.GRID.items()}
    runs = cases_of(cards)
    in_place = calibration.Calibration(refit(runs, grid=coarse), ("h100-80gb",), runs[0].stack, ("bf16",), (), {})
    fresh = tmp_path / "fresh.json"  # against the shipped constants alone, the same refit is taken
    assert cli("plan", "--calibrate", *map(str, cards), "--calibration", str(fresh)).returncode == 0
    out = calibration.write_calibration(tmp_path / "in_place.json", in_place)
    before = out.read_bytes()
    (problem,) = _problems(cli("plan", "--calibrate", *map(str, cards), "--calibration", str(out), "--json"))
    assert f"for the calibration in {out}: it would make plans worse" in problem["message"], problem
    assert out.read_bytes() == before


def test_the_same_run_given_twice_is_refused_whatever_the_file_names(tmp_path):
    # The same card under another name, the same path twice, and a card of the same run written again later (another
    # command and date, the same run_id): each is one run, which a fit would weigh as two.
    first, other = write_cards(tmp_path / "cards", source("MLM")[:2])
    copy = tmp_path / "copy.yaml"
    copy.write_text(first.read_text())
    card = {**yaml.safe_load(other.read_text()), "run_id": "0123456789abcdef", "written_by": "nemo-recipes watch a"}
    other.write_text(yaml.safe_dump(card))
    later = tmp_path / "later.yaml"
    later.write_text(yaml.safe_dump({**card, "written_by": "nemo-recipes watch b", "metrics": {**card["metrics"]}}))
    later_card = yaml.safe_load(later.read_text())
    later_card["metrics"]["step_time_s"] *= 1.01  # watched again further on: another median, the same run
    later.write_text(yaml.safe_dump(later_card))
    paths = [str(first), str(other), str(copy), str(first), str(later)]
    problems = _problems(cli("plan", "--calibrate", *paths, "--calibration", str(tmp_path / "c.json"), "--json"))
    assert [(p["value"], p["message"].split(":")[0]) for p in problems] == [
        (str(copy), f"records the same run as {first}"),
        (str(first), "is given twice"),
        (str(later), f"records the same run as {other}"),
    ], problems
    assert all(p["field"] == "calibrate" and p["fix"] == "give each run's card once." for p in problems)
    assert not (tmp_path / "c.json").exists()


def test_a_calibration_never_changes_the_figures_of_plans_that_do_not_load_it():
    spec, cluster = RECIPES["gpt_7b"], Cluster.of(1, 8, "h100")
    shipped = estimate_throughput(spec, cluster)
    slow = CONSTANTS.replace(matmul=0.5, step_overhead=1.0)
    with using_constants(slow):
        inside = estimate_throughput(spec, cluster)
        assert estimate_throughput(spec, cluster, constants=CONSTANTS) == shipped  # explicit constants win
    assert inside.step_time_s > shipped.step_time_s + 0.9
    assert estimate_throughput(spec, cluster) == shipped


def _problems(result) -> list[dict]:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)["problems"]


def test_cards_that_cannot_calibrate_the_plan_are_refused_all_at_once(tmp_path):
    good = card_of(source("MLM")[0])
    bad = {
        "stack.yaml": {**good, "stack": "megatron-legacy"},
        "gpu.yaml": {**good, "cluster": {**good["cluster"], "gpu": None}},
        "unknown_gpu.yaml": {**good, "cluster": {**good["cluster"], "gpu": "h1000"}},
        "steps.yaml": {**good, "metrics": {"step_time_s": None, "step_time_window_steps": 2}},
        "recipe.yaml": {**good, "recipe": {"name": "gpt_nope", "overrides": {}}},
        "precision.yaml": {**good, "precision": "fp8"},
        # A run timed on the CPU, one whose card does not say, one that held more memory than the GPU it names has,
        # and a step time no run has (not "missing": it is there, and wrong).
        "cpu.yaml": {**good, "cluster": {**good["cluster"], "device": "cpu"}},
        "no_device.yaml": {**good, "cluster": {k: v for k, v in good["cluster"].items() if k != "device"}},
        "memory.yaml": {**good, "metrics": {**good["metrics"], "peak_memory_reserved_gib": 120.5}},
        "negative.yaml": {**good, "metrics": {**good["metrics"], "step_time_s": -1.5}},
    }
    for name, card in bad.items():
        (tmp_path / name).write_text(yaml.safe_dump(card))
    (tmp_path / "not_yaml.yaml").write_text("a: [")
    paths = [str(tmp_path / name) for name in [*bad, "not_yaml.yaml"]]
    problems = _problems(cli("plan", "--calibrate", *paths, "--calibration", str(tmp_path / "c.json"), "--json"))
    found = {(p["field"].split(": ")[-1], Path(p["field"].split(": ")[0]).name) for p in problems}
    assert {
        ("stack", "stack.yaml"),
        ("cluster.gpu", "gpu.yaml"),
        ("cluster.gpu", "unknown_gpu.yaml"),
        ("metrics.step_time_s", "steps.yaml"),
        ("metrics.step_time_window_steps", "steps.yaml"),
        ("recipe.name", "recipe.yaml"),
        ("precision", "precision.yaml"),
        ("cluster.device", "cpu.yaml"),
        ("cluster.device", "no_device.yaml"),
        ("metrics.peak_memory_reserved_gib", "memory.yaml"),
        ("metrics.step_time_s", "negative.yaml"),
    } <= found, problems
    by_file = {Path(p["field"].split(": ")[0]).name: p for p in problems}
    assert "the run's step times are the cpu's" in by_file["cpu.yaml"]["message"]
    assert by_file["negative.yaml"]["message"].startswith("is not a positive finite number of seconds")
    assert next(p for p in problems if p["field"].endswith("steps.yaml: metrics.step_time_s"))["message"].startswith(
        "is missing"
    )
    assert any(p["field"] == "calibrate" and p["value"].endswith("not_yaml.yaml") for p in problems)
    assert all(p["message"] and p["fix"] for p in problems)
    assert not (tmp_path / "c.json").exists()


def test_calibrate_with_a_recipe_or_one_card_is_refused(tmp_path):
    (card,) = write_cards(tmp_path, source("MLM")[:1])
    (problem,) = _problems(cli("plan", "gpt_7b", "--calibrate", str(card), "--json"))
    assert problem["field"] == "recipe"
    (problem,) = _problems(cli("plan", "--calibrate", str(card), "--json"))
    assert problem["field"] == "calibrate" and "two" in problem["message"]


def _calibration_file(tmp_path: Path, **changes) -> Path:
    data = calibration.Calibration(
        constants=CONSTANTS, gpus=("h100-80gb",), stack="transformer-engine", precisions=("bf16",), runs=(), errors={}
    ).to_dict()
    for key, value in changes.items():
        where = data
        *parents, last = key.split(".")
        for parent in parents:
            where = where[parent]
        where[last] = value
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(data))
    return path


def test_a_calibration_file_is_checked_before_it_is_trusted(tmp_path):
    path = _calibration_file(
        tmp_path,
        **{"constants.matmul": 1.7, "constants.hbm": "fast", "constants.warp": 0.5, "extra": 1},
        **{"fitted_on.gpus": ["h1000"], "fitted_on.stack": "tensorflow", "fitted_on.precisions": ["int4"]},
    )
    problems = _problems(cli("plan", "gpt_7b", "--calibration", str(path), "--json"))
    fields_found = {p["field"]: p["value"] for p in problems}
    assert fields_found == {
        "calibration.constants.matmul": 1.7,
        "calibration.constants.hbm": "fast",
        "calibration.constants.warp": 0.5,
        "calibration.extra": 1,
        "calibration.fitted_on.gpus": "h1000",
        "calibration.fitted_on.stack": "tensorflow",
        "calibration.fitted_on.precisions": ["int4"],
    }, problems
    assert all(p["fix"] for p in problems)
    for text in ("{", "[1, 2]", json.dumps({"format": "something else"})):
        path.write_text(text)
        (problem,) = _problems(cli("plan", "gpt_7b", "--calibration", str(path), "--json"))
        assert problem["field"] == "calibration" and problem["value"] == str(path)
    (problem,) = _problems(cli("plan", "gpt_7b", "--calibration", str(tmp_path / "missing.json"), "--json"))
    assert "cannot be read" in problem["message"]


def test_a_written_calibration_reads_back_the_same(tmp_path):
    fitted = CONSTANTS.replace(matmul=0.7, step_overhead=0.02)
    written = calibration.Calibration(fitted, ("h100-80gb",), "transformer-engine", ("bf16", "fp8"), (), {"after": 1})
    path = calibration.write_calibration(tmp_path / "deep" / "c.json", written)
    back = read_calibration(path)
    assert back.constants == fitted
    assert {f.name for f in fields(CONSTANTS)} == set(json.loads(path.read_text())["constants"])
