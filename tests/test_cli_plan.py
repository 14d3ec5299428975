"""`nemo-recipes plan`, run as the installed console script: the planner's report, exit codes, errors and plots."""

from __future__ import annotations

import json
import re
import struct

import pytest
from _cli import cli

from nemo_recipes.catalog import get_recipe
from nemo_recipes.families import REGISTRY
from nemo_recipes.plan import Cluster, assess, fit, validate
from nemo_recipes.plan.throughput import estimate_throughput, time_to_train


def plan_json(*args: str) -> tuple[int, dict]:
    result = cli("plan", *args, "--json")
    return result.returncode, json.loads(result.stdout)


def test_default_plan_is_the_planners_report_with_throughput_and_time_to_train():
    code, data = plan_json("gpt_70b")
    assert code == 0
    spec = get_recipe("gpt_70b")
    cluster = Cluster.of(4, 8, "h100-80gb")
    throughput = estimate_throughput(spec, cluster)
    expected = assess(spec, cluster).to_dict()
    assert list(data) == list(expected) + ["explanation", "plot", "data", "calibration"]
    assert {k: data[k] for k in expected} == json.loads(json.dumps(expected))
    assert data["explanation"] is None
    assert data["throughput"]["tokens_per_s_per_gpu"] == pytest.approx(throughput.tokens_per_s_per_gpu)
    assert data["time_to_train"] == pytest.approx(time_to_train(throughput, 300e9))
    assert data["plot"] is None and data["calibration"] is None
    assert data["data"] == {"sources": [], "tokenizer": None, "vocab_size": None, "budget": None, "problems": []}


def test_the_python_api_prints_the_plan_the_cli_prints(monkeypatch):
    # One rendering (plan/rendering.py): `print(report)` is `nemo-recipes plan`'s text, but for the names of the
    # planner's actions (best() for --best, "the planner" for --fit).
    monkeypatch.setenv("COLUMNS", "100")
    result = cli("plan", "gpt_7b", "--nodes", "2", "--tokens", "1T")
    report = assess(get_recipe("gpt_7b").replace(num_nodes=2), Cluster.of(2, 8, "h100-80gb"), tokens=1e12)
    assert report.advice and report.throughput and result.returncode == 0
    assert str(report).replace("(see best())", "(see --best)") + "\n" == result.stdout
    fitted = fit(get_recipe("gpt_175b"), Cluster.of(6, 8, "h100-80gb")).report
    assert fitted.changes and "changes made by the planner\n" in str(fitted)


def test_human_report_shows_verdict_parallelism_memory_and_timing():
    result = cli("plan", "gpt_70b", "--tokens", "1T")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "gpt_70b on 4 x 8 h100-80gb (32 GPUs): valid"
    assert lines[1] == "  64.9B parameters; TP 8 x PP 4 x CP 1 x DP 1, sequence parallel on, recompute selective, bf16"
    assert lines[2] == "  micro batch 1, global batch 1024, gradient accumulation 1024, sequence 4096"
    memory = validate(get_recipe("gpt_70b"), Cluster.of(4, 8, "h100")).memory
    assert f"  total        {memory.total:.1f}  of 79.6 ({100 * memory.total / 79.6:.0f} %)" in lines
    assert any(re.fullmatch(r"  time to train 1.00T tokens  \d+\.\d days, [\d,]+ GPU-hours", line) for line in lines)
    # Which term dominates the step, and the step by term (issue 22), as the JSON report has them.
    data = assess(get_recipe("gpt_70b"), Cluster.of(4, 8, "h100")).to_dict()["throughput"]
    share = 100 * data["terms_s"][data["dominant_term"]] / data["step_time_s"]
    assert any(re.fullmatch(rf"  dominant term +matmul \({share:.0f} % of the step\)", line) for line in lines)
    assert any(re.fullmatch(r"  step by term +matmul \d+ %, .*attention \d+ %.*", line) for line in lines)


def test_the_cluster_flags_replace_the_recipes_default_cluster():
    code, data = plan_json("gpt_70b", "--nodes", "16", "--gpus-per-node", "8", "--gpu", "H200")
    assert code == 0
    assert data["cluster"] == {"nodes": 16, "gpus_per_node": 8, "gpu": "h200", "world_size": 128}
    assert data["parallelism"]["dp"] == 4 and data["parallelism"]["grad_accumulation"] == 256


def test_an_invalid_plan_exits_2_and_names_the_fix():
    result = cli("plan", "gpt_70b", "--nodes", "3")
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == "gpt_70b on 3 x 8 h100-80gb (24 GPUs): INVALID"
    assert "  - error: world_size=24: 24 GPUs (3 node(s) x 8) are not divisible by TP x PP x CP" in result.stdout
    code, data = plan_json("gpt_70b", "--nodes", "3")
    assert code == 2 and data["valid"] is False and data["throughput"] is None
    assert [p["field"] for p in data["problems"] if p["severity"] == "error"] == ["world_size"]


def test_a_plan_that_does_not_fit_in_memory_says_so():
    result = cli("plan", "gpt_7b", "recompute=selective")
    assert result.returncode == 2
    assert re.search(r"\n  total        \d+\.\d  of 79\.6 \(\d+ %\)  DOES NOT FIT\n", result.stdout)
    assert "  - error: memory=" in result.stdout


def test_fit_shows_its_changes_and_the_fitted_plan():
    code, data = plan_json("gpt_70b", "--nodes", "16", "--gpu", "h200", "--fit", "--scale-global-batch")
    assert code == 0 and data["valid"] is True
    changes = {c["field"]: (c["from"], c["to"]) for c in data["changes"]}
    assert changes["global_batch_size"] == (1024, 4096)
    assert changes["max_lr"] == (pytest.approx(8e-05), pytest.approx(1.6e-04))  # sqrt rule: x2 for 4x the batch
    text = cli("plan", "gpt_70b", "--nodes", "16", "--gpu", "h200", "--fit", "--scale-global-batch").stdout
    assert "\nchanges made by --fit\n  - global_batch_size: 1024 -> 4096 (scaled with" in text


def test_fit_that_cannot_succeed_is_an_invalid_input():
    result = cli("plan", "gpt_175b", "--nodes", "1", "--fit")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(
        "nemo-recipes plan: fit gpt_175b: 2 problem(s) found\n  - error: cluster='1 x 8 h100-80gb': no choice of TP"
    )


def test_custom_shape_borrows_the_rest_from_the_closest_recipe():
    code, data = plan_json(
        "--custom",
        "--layers",
        "48",
        "--hidden",
        "6144",
        "--heads",
        "48",
        "--seq",
        "4096",
        "--tp",
        "4",
        "--pp",
        "2",
        "--gbs",
        "1024",
        "--nodes",
        "4",
    )
    assert code == 0
    assert data["recipe"] == "custom"
    assert data["parallelism"] == {
        "tp": 4,
        "pp": 2,
        "cp": 1,
        "vp": None,
        "dp": 4,
        "sp": True,
        "grad_accumulation": 256,
        "micro_batch_size": 1,
        "global_batch_size": 1024,
    }


def test_a_custom_shape_of_another_family_takes_that_familys_architecture_and_choices():
    # --family llama: the closest Llama row's choices (CP 2, its batch) and architecture (SwiGLU's FFN ratio 3.5,
    # grouped-query attention, its vocabulary), not GPT-3's; parameters counted as the catalog counts that shape.
    shape = ("--layers", "40", "--hidden", "5120", "--heads", "40", "--query-groups", "8")
    code, data = plan_json("--custom", "--family", "llama", *shape, "--nodes", "2")
    assert data["recipe"] == "llama_custom" and data["parallelism"]["cp"] == 2
    expected = get_recipe("llama_8b").replace(
        name="llama_custom", num_layers=40, hidden_size=5120, num_attention_heads=40, ffn_hidden_size=17920
    )
    report = validate(expected, Cluster.of(2, 8, "h100-80gb"))
    assert data["memory_detail"]["params_per_gpu"] == report.to_dict()["memory_detail"]["params_per_gpu"]
    code, gpt = plan_json("--custom", *shape, "--nodes", "2")
    assert (
        gpt["recipe"] == "custom"
        and gpt["memory_detail"]["params_per_gpu"] != report.to_dict()["memory_detail"]["params_per_gpu"]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--custom", "--family", "llamma", "--layers", "4", "--hidden", "512", "--heads", "8"),
            "nemo-recipes plan: error: family='llamma': unknown model family (did you mean 'llama'?). Fix: use one "
            f"of: {', '.join(REGISTRY)}.\n",
        ),
        (
            ("gpt_7b", "--family", "llama"),
            "nemo-recipes plan: error: family='llama': goes with --custom only: a recipe's family is the one its "
            "name says. Fix: leave --family out, or plan --custom with shape flags.\n",
        ),
    ],
    ids=["unknown", "with-a-recipe"],
)
def test_a_family_is_one_we_know_and_goes_with_custom(args, message):
    result = cli("plan", *args)
    assert result.returncode == 2 and result.stdout == "" and result.stderr == message


def test_custom_needs_the_shape():
    result = cli("plan", "--custom", "--layers", "48")
    assert result.returncode == 2
    assert result.stderr == (
        "nemo-recipes plan: error: custom='--hidden --heads': is required with --custom. "
        "Fix: give --layers, --hidden and --heads (e.g. --layers 48 --hidden 6144 --heads 48).\n"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("gpt_70b", "--gpu", "h100x"),
            "nemo-recipes plan: error: gpu='h100x': unknown GPU (did you mean 'h100'?). Fix: use one of: a100-40gb, "
            "a100-80gb, h100-80gb, h200, b200, gb200, b300, gb300; or describe your own with "
            "nemo_recipes.plan.GPU(...).\n",
        ),
        (
            ("gpt_70b", "--tokens", "lots"),
            "nemo-recipes plan: error: tokens='lots': is not a token count. Fix: write it like 300B, 1.5T or 3e11.\n",
        ),
        (
            ("gpt_70b", "--plot", "plan.pdf"),
            "nemo-recipes plan: error: plot='plan.pdf': must be a .png or .svg file. Fix: name the file plan.png or "
            "plan.svg.\n",
        ),
        (
            (),
            "nemo-recipes plan: error: recipe=None: is missing. Fix: give a recipe name (gpt_1_3b, gpt_7b, gpt_13b, "
            "gpt_70b, gpt_175b, llama_8b, llama_70b, llama_405b, qwen3_dense_8b, qwen3_dense_32b, "
            "mixtral_moe_8x7b, mixtral_moe_8x22b, "
            "qwen3_moe_30b_a3b, qwen3_moe_235b_a22b, deepseek_v3_671b) or --custom with "
            "shape flags.\n",
        ),
    ],
    ids=["gpu", "tokens", "plot", "no-recipe"],
)
def test_bad_plan_input_is_one_clear_message(args, message):
    result = cli("plan", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == message


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_plot_png_draws_each_memory_part_and_the_scaling_panel(tmp_path):
    path = tmp_path / "plan.png"
    result = cli("plan", "gpt_70b", "--plot", str(path))
    assert result.returncode == 0
    assert result.stdout.endswith(f"plot written to {path}\n")
    data = path.read_bytes()
    assert _png_size(data) == (1560, 600)  # two panels of 6.5 x 5 in at 120 dpi
    # The pixels hold the colour of every memory part (the bars are drawn, not only axes).
    from matplotlib import image

    pixels = (image.imread(str(path))[:, :, :3] * 255).round().astype(int).reshape(-1, 3).tolist()
    seen = {tuple(p) for p in pixels}
    for colour in ("#4C72B0", "#55A868", "#C44E52", "#8172B2", "#937860"):
        rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in seen, colour


def test_plot_svg_names_capacity_totals_and_this_plan(tmp_path):
    path = tmp_path / "plan.svg"
    code, data = plan_json("gpt_70b", "--plot", str(path))
    assert code == 0 and data["plot"] == str(path)
    svg = path.read_text()
    texts = re.findall(r">([^<>]+)</text>", svg)
    total = data["memory_gib"]["total"]
    assert f"memory per GPU: {total:.1f} of 79.6 GiB ({100 * total / 79.6:.0f} %)" in texts
    assert "GPU capacity: 79.6 GiB" in texts
    tokens = data["throughput"]["tokens_per_s"]
    assert f"this plan: 32 GPUs, {tokens:,.0f} tokens/s" in texts
    assert "throughput against cluster size" in texts


def test_plot_of_an_invalid_plan_is_still_drawn_and_marked(tmp_path):
    path = tmp_path / "oom.svg"
    result = cli("plan", "gpt_7b", "recompute=selective", "--plot", str(path))
    assert result.returncode == 2
    texts = re.findall(r">([^<>]+)</text>", path.read_text())
    assert "gpt_7b on 1 x 8 h100-80gb (8 GPUs): INVALID" in texts
    assert any(t.startswith("memory per GPU: ") and t.endswith(", OOM") for t in texts)
    assert "throughput against cluster size" not in texts  # no throughput for an invalid plan


def test_human_report_states_the_program_memory_and_throughput_both_assume():
    lines = cli("plan", "gpt_13b").stdout.splitlines()
    start = lines.index("assumptions")
    block = " ".join(line.strip() for line in lines[start + 1 : start + 12])
    assert "software stack: Megatron-Core with Transformer Engine" in block
    assert "the GPU job runs the NeMo container" in block and "--stack local" in block
    assert "attention: fused" in block and "TP communication overlap: on" in block
    code, data = plan_json("gpt_13b")
    assert data["program"]["attention"] == "fused" and data["memory_detail"]["attention"] == "fused"
    assert data["program"]["tp_comm_overlap"] is True


def test_stack_without_transformer_engine_changes_memory_and_throughput_together():
    _, container = plan_json("gpt_13b")
    _, bare = plan_json("gpt_13b", "--stack", "megatron-core")
    assert bare["program"] == {**bare["program"], "attention": "unfused", "tp_comm_overlap": False}
    assert bare["memory_gib"]["total"] > container["memory_gib"]["total"]
    assert bare["throughput"]["step_time_s"] > container["throughput"]["step_time_s"]
    # On this machine (no Transformer Engine) 'local' is the same program as megatron-core.
    _, local = plan_json("gpt_13b", "--stack", "local")
    assert local["program"]["attention"] == "unfused"
    code, fp8 = plan_json("gpt_13b", "precision=fp8", "--stack", "megatron-core")
    assert code == 2 and [p["field"] for p in fp8["problems"] if p["severity"] == "error"] == ["precision"]


def test_plan_prints_advice_when_a_faster_plan_fits():
    result = cli("plan", "gpt_7b", "--gpu", "h200")
    assert result.returncode == 0
    text = result.stdout
    # Dropping full recompute is the gain; since GEMM efficiency follows the GEMM's shape (issue 22), the fastest
    # such plan may also take a larger micro-batch (deeper weight-gradient GEMMs).
    assert re.search(r"\nadvice\n  - (micro_batch_size=\d+ )?recompute=none is predicted ", text)
    assert "x faster (" in text and "(see --best)" in text
    code, data = plan_json("gpt_7b", "--gpu", "h200")
    assert data["advice"][0]["changes"]["recompute"] == "none" and data["advice"][0]["speedup"] > 1.03


def test_best_shows_the_fastest_plan_and_why():
    code, data = plan_json("gpt_7b", "--gpu", "b200", "--best")
    assert code == 0 and data["valid"] and data["advice"] == []
    assert data["explanation"].startswith("chosen as the fastest of ") and "runner-up" in data["explanation"]
    fields = {c["field"] for c in data["changes"]}
    assert "recompute" in fields and "default_gpu" in fields
    text = cli("plan", "gpt_7b", "--gpu", "b200", "--best").stdout
    assert "\nchanges made by --best\n" in text


def test_fit_and_best_together_is_an_invalid_input():
    result = cli("plan", "gpt_7b", "--fit", "--best")
    assert result.returncode == 2 and "best=True: cannot be combined with --fit." in result.stderr


@pytest.mark.parametrize(
    "args, field",
    [
        (("--scale-global-batch",), "scale_global_batch"),
        (("--scale-global-batch", "--best"), "scale_global_batch"),
        (("--lr-scaling", "linear"), "lr_scaling"),
        (("--fit", "--lr-scaling", "none"), "lr_scaling"),
    ],
)
def test_fit_only_options_without_fit_are_refused_not_ignored(args, field):
    result = cli("plan", "gpt_7b", "--nodes", "4", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"nemo-recipes plan: error: {field}=") and "changes nothing without --fit" in (
        result.stderr
    )


def test_llama_rows_plan_fit_and_best():
    code, data = plan_json("llama_70b")
    assert code == 0 and data["valid"] is True
    spec = get_recipe("llama_70b")
    assert data == {**data, **json.loads(json.dumps(assess(spec, Cluster.of(8, 8, "h100-80gb")).to_dict()))}
    # Half the published cluster: TP 4 x PP 4 x CP 2 no longer fits; --fit finds a layout with 8 query groups' TP.
    code, fitted = plan_json("llama_70b", "--nodes", "4", "--fit")
    assert code == 0 and fitted["valid"] is True and fitted["changes"]
    assert 8 % fitted["parallelism"]["tp"] == 0
    code, best = plan_json("llama_8b", "--best")
    assert code == 0 and best["valid"] and best["explanation"].startswith("chosen as the fastest of ")
