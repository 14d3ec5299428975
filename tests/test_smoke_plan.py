"""Smoke training, the parts that need no NeMo: the scaled-down plan, the judge, the progress display, the CPU
compatibility layer's version rule and the pins it shares with constraints.txt."""

from __future__ import annotations

import io
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_recipes.catalog import RECIPES, get_recipe
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan.layout import Layout
from nemo_recipes.smoke_training.checksums import COMPONENTS
from nemo_recipes.smoke_training.judge import FROZEN_LOSS_SD, expected_lr, judge, learning_thresholds
from nemo_recipes.smoke_training.runner import Progress
from nemo_recipes.smoke_training.shape import smoke_shape

REPO = Path(__file__).resolve().parent.parent

# Everything but shape, layout, batch, schedule length and data is the recipe's own choice and must survive.
KEPT = (
    "precision",
    "recompute",
    "sequence_parallel",
    "distributed_optimizer",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "max_lr",
    "min_lr_ratio",
    "adam_beta1",
    "adam_beta2",
    "adam_eps",
    "weight_decay",
    "clip_grad",
    "hidden_dropout",
    "attention_dropout",
    "share_embeddings",
    "position_embedding_type",
    "normalization",
    "activation",
    "add_bias_linear",
    "rotary_base",
    "norm_epsilon",
    "qk_layernorm",
    "checkpoint_every_minutes",
    "checkpoint_async",
)


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("processes", [1, 2, 4, 8])
def test_the_plan_scales_the_shape_and_keeps_every_other_choice(name, processes):
    recipe = get_recipe(name)
    plan = smoke_shape(recipe, processes=processes)
    small = plan.spec
    assert small.num_parameters < 1_000_000 < recipe.num_parameters
    assert (small.num_nodes, small.num_gpus_per_node) == (1, processes)
    ratio = recipe.ffn_hidden_size / recipe.hidden_size
    if recipe.num_moe_experts is None:
        assert small.ffn_hidden_size / small.hidden_size == ratio
    else:  # Mixtral 8x22B's 16384 / 6144 has no exact multiple at hidden 128: the nearest multiple of TP
        assert abs(small.ffn_hidden_size - ratio * small.hidden_size) <= small.tensor_parallel / 2
        assert small.expert_parallel * small.expert_tensor_parallel_size * small.pipeline_parallel <= processes
        assert small.num_moe_experts % small.expert_parallel == 0 and 2 <= small.moe_router_topk
    for field in KEPT:
        assert getattr(small, field) == getattr(recipe, field), field
    # An explicit head width stays explicit, at the scaled model's hidden / heads (shape.py).
    assert (small.kv_channels is None) == (recipe.kv_channels is None)
    assert small.make_vocab_size_divisible_by == 128  # the row's multiple suits its tokenizer, not the smoke's
    # TP, then PP, as large as the recipe's and as the processes allow; the rest is data parallel.
    assert small.tensor_parallel == min(recipe.tensor_parallel, processes)
    assert small.tensor_parallel * small.pipeline_parallel * Layout.of(small).dp == processes
    assert small.pipeline_parallel <= recipe.pipeline_parallel
    assert small.sequence_parallel_enabled == (small.tensor_parallel > 1)
    assert small.num_layers % small.pipeline_parallel == 0
    assert Layout.of(small).microbatches == 2 * small.pipeline_parallel
    assert plan.steps == 20 and plan.stop_step == 10 and small.train_steps == 20
    assert small.checkpoint_every_steps == 5


@pytest.mark.parametrize("name", RECIPES)
def test_the_schedule_keeps_its_shape_over_the_smoke_steps(name):
    recipe = get_recipe(name)
    small = smoke_shape(recipe, steps=30).spec
    assert small.train_steps == 30
    assert small.warmup_steps == 1  # the recipe's warmup is 0.1 % of its run; never zero steps
    assert small.decay_steps == round(30 * recipe.decay_tokens / recipe.train_tokens)
    assert small.max_lr == recipe.max_lr and small.min_lr == recipe.min_lr


def test_overrides_win_and_pick_the_layout():
    plan = smoke_shape(
        get_recipe("gpt_70b"),
        processes=2,
        overrides={
            "tensor_parallel": 1,
            "pipeline_parallel": 2,
            "hidden_dropout": 0.0,
            "num_layers": 4,
            "global_batch_size": 8,
        },
    )
    s = plan.spec
    assert (s.tensor_parallel, s.pipeline_parallel, Layout.of(s).dp) == (1, 2, 1)
    assert (s.num_layers, s.hidden_dropout, s.global_batch_size) == (4, 0.0, 8)
    assert plan.layout == "TP1 PP2 CP1 DP1"


def test_full_size_keeps_the_recipe_shape_and_batch():
    plan = smoke_shape(get_recipe("gpt_1_3b"), processes=8, full_size=True, steps=30)
    s, r = plan.spec, get_recipe("gpt_1_3b")
    assert (s.num_layers, s.hidden_size, s.seq_length, s.vocab_size) == (
        r.num_layers,
        r.hidden_size,
        r.seq_length,
        r.vocab_size,
    )
    assert s.global_batch_size == r.global_batch_size and s.num_parameters == r.num_parameters


def test_every_problem_is_reported_at_once_with_the_fix():
    with pytest.raises(InvalidRecipeError) as error:
        smoke_shape(get_recipe("gpt_7b"), processes=0, steps=1, overrides={"tensor_paralel": 2, "precision": "fp9"})
    fields = [p.field for p in error.value.problems]
    assert fields == ["processes", "steps", "tensor_paralel", "precision"]
    assert all(p.fix for p in error.value.problems)
    assert "did you mean 'tensor_parallel'" in str(error.value)


def test_a_layout_the_planner_refuses_never_starts():
    with pytest.raises(InvalidRecipeError) as error:
        smoke_shape(get_recipe("gpt_7b"), processes=2, overrides={"pipeline_parallel": 2, "num_layers": 3})
    assert [p.field for p in error.value.problems if p.severity == "error"] == ["pipeline_parallel"]
    with pytest.raises(InvalidRecipeError, match="not a multiple of TP x PP x CP = 2"):
        smoke_shape(get_recipe("gpt_7b"), processes=3, overrides={"tensor_parallel": 2})


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(list(RECIPES)),
    processes=st.sampled_from([1, 2, 4, 8]),
    steps=st.integers(4, 200),
    stop=st.one_of(st.none(), st.integers(1, 199)),
)
def test_any_valid_request_gives_a_plan_the_planner_accepts(name, processes, steps, stop):
    if stop is not None and stop >= steps:
        with pytest.raises(InvalidRecipeError):
            smoke_shape(get_recipe(name), processes=processes, steps=steps, stop_step=stop)
        return
    plan = smoke_shape(get_recipe(name), processes=processes, steps=steps, stop_step=stop)
    assert 1 <= plan.stop_step < plan.steps == plan.spec.train_steps
    assert plan.spec.warmup_steps <= plan.spec.decay_steps <= plan.spec.train_steps


# ---- the judge ----


def _records(
    losses=None,
    *,
    stop=10,
    steps=20,
    gbs=4,
    resumed_at=None,
    consumed_at_start=None,
    optimizer=True,
    skip=(),
    repeat=(),
    loaded=None,
):
    """`loaded`: the state digests after the resume's load, where they differ from the save's."""
    losses = losses or [7.2 - 0.03 * i for i in range(steps)]
    records = [
        {"event": "launch", "phase": "train", "device": "cpu", "patches": ["x"]},
        {"event": "start", "phase": "train", "global_step": 0, "consumed_samples": 0},
        _state("train", "saved", stop),
    ]
    for phase, span in (("train", range(1, stop + 1)), ("resume", range(stop + 1, steps + 1))):
        if phase == "resume":
            at = stop if resumed_at is None else resumed_at
            records.append(
                {
                    "event": "start",
                    "phase": "resume",
                    "global_step": at,
                    "resumed_from": "ckpt",
                    "consumed_samples": at * gbs if consumed_at_start is None else consumed_at_start,
                }
            )
            records.append(_state("resume", "loaded", at, loaded))
        for step in span:
            if step in skip:
                continue
            for _ in range(2 if step in repeat else 1):
                records.append(
                    {
                        "event": "step",
                        "phase": phase,
                        "step": step,
                        "loss": losses[step - 1],
                        "consumed_samples": step * gbs,
                        "seconds": 0.1,
                    }
                )
    records.append(
        {
            "event": "checkpoints",
            "phase": "resume",
            "checkpoints": [
                {
                    "path": "p",
                    "step": steps - 1,
                    "bytes": 100,
                    "tensors": 19,
                    "optimizer": optimizer,
                    "read": {"files": 2, "bytes": 90, "items": 19},
                }
            ],
        }
    )
    return records


def _state(phase, when, step, ranks=None, attempt=0):
    """A state record: one digest per rank and component ("abc" each unless `ranks` says otherwise)."""
    ranks = ranks or [dict.fromkeys(COMPONENTS, "abc")] * 2
    return {"event": "state", "when": when, "phase": phase, "attempt": attempt, "step": step, "ranks": ranks}


def _failed(records, **kw):
    verdict = judge(records, steps=20, stop_step=10, global_batch_size=4, **kw)
    return [c.name for c in verdict.checks if not c.passed]


def test_a_good_record_passes():
    verdict = judge(_records(), steps=20, stop_step=10, global_batch_size=4)
    assert verdict.passed and verdict.resumed_at == 10 and verdict.device == "cpu"
    assert len(verdict.checks) == 8 and verdict.seconds_per_step == pytest.approx(0.1)


@pytest.mark.parametrize(
    "records, failing",
    [
        # Resumed at 0: the first phase's steps are not in the state it resumed from, so they do not count either.
        (
            _records(resumed_at=0),
            ["every step trained once", "resumed where it stopped", "resume restored the exact state"],
        ),
        (_records(consumed_at_start=0), ["resumed where it stopped"]),
        (_records(skip={13}), ["every step trained once"]),
        (_records(repeat={12}), ["every step trained once"]),
        (_records([7.0] * 19 + [math.nan]), ["loss finite"]),
        (_records([7.0] * 20), ["model learned"]),
        (_records(optimizer=False), ["last checkpoint resumable"]),
    ],
)
def test_each_defect_fails_its_check(records, failing):
    assert _failed(records) == failing


def test_a_fall_just_short_of_the_frozen_noise_threshold_is_not_learning():
    _, least_fall = learning_thresholds(5)
    flat = [7.0 + (least_fall * 0.95 if i < 5 else 0.0) for i in range(20)]
    assert _failed(_records(flat)) == ["model learned"]
    steep = [7.0 + (least_fall * 1.05 if i < 5 else 0.0) for i in range(20)]
    assert _failed(_records(steep)) == []


def test_the_learning_thresholds_pass_a_frozen_model_less_than_once_in_a_thousand():
    """Simulated frozen runs (independent normal steps of the measured SD): the fall criterion passes ~0.1 %, and
    a model that learned only the frequencies (expected loss = the entropy) passes the baseline ~0.1 %."""
    import random

    from nemo_recipes.smoke_training.judge import _learning_check

    rng = random.Random(20)
    runs = 50_000
    falls = below = 0
    for _ in range(runs):
        detail = _learning_check([7.0 + rng.gauss(0.0, FROZEN_LOSS_SD) for _ in range(20)], 7.0)[0].detail
        falls += "decided by the fall" in detail
        below += "decided by the unigram entropy" in detail
    # 0.1 % of 50,000 is 50 (binomial SD 7); a 1.5-SD threshold (the judge before) passed ~3,300.
    assert falls < 75 and below < 75


def test_the_report_names_the_criterion_that_decided():
    losses = [7.2 - 0.03 * i for i in range(20)]
    checks = judge(_records(losses), steps=20, stop_step=10, global_batch_size=4, unigram_entropy=6.5).checks
    detail = next(c.detail for c in checks if c.name == "model learned")
    assert "unigram entropy 6.500" in detail and "fall 0.450" in detail and "decided by the fall" in detail
    checks = judge(_records(losses), steps=20, stop_step=10, global_batch_size=4, unigram_entropy=7.0).checks
    assert "decided by the unigram entropy" in next(c.detail for c in checks if c.name == "model learned")


@pytest.mark.parametrize(
    "component, rank", [("weights", 0), ("main weights", 1), ("Adam moments", 1), ("Adam step", 0), ("schedule", 0)]
)
def test_a_resume_that_loaded_other_state_fails_naming_the_component_and_rank(component, rank):
    ranks = [dict.fromkeys(COMPONENTS, "abc") for _ in range(2)]
    ranks[rank][component] = "xyz"
    verdict = judge(_records(loaded=ranks), steps=20, stop_step=10, global_batch_size=4)
    assert [c.name for c in verdict.checks if not c.passed] == ["resume restored the exact state"]
    detail = next(c.detail for c in verdict.checks if c.name == "resume restored the exact state")
    assert f"{component} (rank {rank})" in detail and "step 10" in detail


def test_a_resume_without_state_digests_fails():
    records = [r for r in _records() if r.get("event") != "state"]
    assert _failed(records) == ["resume restored the exact state"]


SCHEDULE = {"max_lr": 2e-4, "min_lr": 2e-5, "warmup_steps": 1, "constant_steps": 3, "max_steps": 20}


@pytest.mark.slow  # importing NeMo's scheduler imports nemo.core (~25 s)
@pytest.mark.nemo
def test_the_expected_schedule_is_nemos_cosine_annealing():
    """Against NeMo's own CosineAnnealing stepped in a real optimizer (both branches: with and without a constant
    tail), where NeMo is installed."""
    torch = pytest.importorskip("torch")
    lr_scheduler = pytest.importorskip("nemo.core.optim.lr_scheduler")
    for schedule in (SCHEDULE, {**SCHEDULE, "warmup_steps": 3}, {**SCHEDULE, "constant_steps": 0, "warmup_steps": 3}):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=schedule["max_lr"])
        scheduler = lr_scheduler.CosineAnnealing(
            optimizer,
            max_steps=schedule["max_steps"],
            warmup_steps=schedule["warmup_steps"],
            constant_steps=schedule["constant_steps"],
            min_lr=schedule["min_lr"],
        )
        for step in range(1, 25):
            optimizer.step()
            scheduler.step()
            assert optimizer.param_groups[0]["lr"] == pytest.approx(expected_lr(step, **schedule), rel=1e-12)


def _with_lr(records, lr):
    for r in records:
        if r.get("event") == "step":
            r["lr"] = lr(r["step"])
    return records


def test_a_schedule_that_restarts_or_stalls_at_the_resume_fails():
    good = _with_lr(_records(), lambda step: expected_lr(step, **SCHEDULE))
    assert _failed(good, schedule=SCHEDULE) == []
    restarted = _with_lr(_records(), lambda step: expected_lr(step if step <= 10 else step - 10, **SCHEDULE))
    assert _failed(restarted, schedule=SCHEDULE) == ["learning rate follows the schedule across the resume"]
    nudged = _with_lr(_records(), lambda step: expected_lr(step, **SCHEDULE) * (1 + 1e-6 * (step == 11)))
    verdict = judge(nudged, steps=20, stop_step=10, global_batch_size=4, schedule=SCHEDULE)
    assert [c.detail for c in verdict.checks if not c.passed] == [
        f"step 11: {expected_lr(11, **SCHEDULE) * (1 + 1e-6)} (expected {expected_lr(11, **SCHEDULE):.6g})"
    ]


def test_inconsistent_data_position_is_caught():
    records = _records()
    for r in records:
        if r.get("event") == "step" and r["step"] == 15:
            r["consumed_samples"] = 44  # samples re-read after the resume
    assert _failed(records) == ["data position continuous"]


def test_progress_prints_every_fifth_step_when_not_on_a_terminal():
    stream = io.StringIO()
    progress = Progress(stream, 20, "smoke gpt_7b")
    for step in range(1, 21):
        progress.update([{"event": "step", "step": step, "loss": 7.0, "seconds": 0.1}])
    lines = stream.getvalue().splitlines()
    assert [re.search(r"step (\d+)/20", line).group(1) for line in lines] == ["5", "10", "15", "20"]


# ---- the CPU compatibility layer's versions ----


def test_the_compatibility_layer_pins_what_constraints_txt_pins():
    from nemo_recipes.smoke_training import cpu_compat  # imports no torch at module level

    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", (REPO / "constraints.txt").read_text(), re.M))
    for package, version in cpu_compat.PINNED.items():
        assert pins.get(package) == version, package


def test_the_compatibility_layer_refuses_other_releases():
    from nemo_recipes.smoke_training import cpu_compat

    ok = dict(cpu_compat.PINNED)
    assert cpu_compat.version_problems({**ok, "torch": "2.13.0+cpu"}) == []
    problems = cpu_compat.version_problems({**ok, "megatron-core": "0.16.1", "nemo-toolkit": None})
    assert problems == [
        "nemo-toolkit is not installed; the patches were written for 2.7.3",
        "megatron-core 0.16.1 is installed; the patches were written for 0.15.3",
    ]


def test_a_layout_other_than_planned_fails():
    planned = {"tp": 2, "pp": 1, "cp": 1, "dp": 1, "sequence_parallel": True}
    records = _records()
    for r in records:
        if r.get("event") == "start":
            r["parallel"] = dict(planned)
    assert _failed(records, layout=planned) == []
    records[1]["parallel"] = {**planned, "tp": 1, "dp": 2}
    assert _failed(records, layout=planned) == ["layout as planned"]


# ---- requeued runs (a preempted Slurm job resumes from its last checkpoint) ----


def _requeued(*, killed_at=14, resumed_at=10, consumed=None, checkpoint_step=None, stop=10, steps=20, gbs=4):
    """The train phase killed after `killed_at` steps and requeued (attempt 1), resuming at `resumed_at` from a
    checkpoint named after step `checkpoint_step` (NeMo's 0-based name: resumed_at - 1)."""
    losses = [7.2 - 0.03 * i for i in range(steps + killed_at)]
    named = resumed_at - 1 if checkpoint_step is None else checkpoint_step
    records = [{"event": "start", "phase": "train", "attempt": 0, "global_step": 0, "consumed_samples": 0}]
    records += [_state("train", "saved", at) for at in range(5, killed_at + 1, 5)]
    records += [
        {
            "event": "step",
            "phase": "train",
            "attempt": 0,
            "step": s,
            "loss": losses[s],
            "consumed_samples": s * gbs,
            "seconds": 0.1,
        }
        for s in range(1, killed_at + 1)
    ]
    records.append(
        {
            "event": "start",
            "phase": "train",
            "attempt": 1,
            "global_step": resumed_at,
            "resumed_from": f"/c/model--step={named}-consumed_samples={resumed_at * gbs}.0-last/weights",
            "consumed_samples": resumed_at * gbs if consumed is None else consumed,
        }
    )
    records.append(_state("train", "loaded", resumed_at, attempt=1))
    records += [_state("train", "saved", at, attempt=1) for at in range(resumed_at + 5, 2 * stop + 1, 5)]
    records += [
        {
            "event": "step",
            "phase": "train",
            "attempt": 1,
            "step": s,
            "loss": losses[s],
            "consumed_samples": s * gbs,
            "seconds": 0.1,
        }
        for s in range(resumed_at + 1, 2 * stop + 1)
    ]
    records.append(
        {
            "event": "start",
            "phase": "resume",
            "attempt": 0,
            "global_step": 2 * stop,
            "resumed_from": "ckpt",
            "consumed_samples": 2 * stop * gbs,
        }
    )
    records.append(_state("resume", "loaded", 2 * stop))
    records += [
        {
            "event": "step",
            "phase": "resume",
            "attempt": 0,
            "step": s,
            "loss": losses[s],
            "consumed_samples": s * gbs,
            "seconds": 0.1,
        }
        for s in range(2 * stop + 1, steps + 1)
    ]
    records.append(
        {
            "event": "checkpoints",
            "phase": "resume",
            "checkpoints": [
                {
                    "path": "p",
                    "step": steps - 1,
                    "bytes": 100,
                    "tensors": 19,
                    "optimizer": True,
                    "read": {"files": 2, "bytes": 90, "items": 19},
                }
            ],
        }
    )
    return records


def _judge_requeued(records, every=5):
    verdict = judge(records, steps=30, stop_step=20, global_batch_size=4, checkpoint_every=every)
    return verdict, [c.name for c in verdict.checks if not c.passed]


def test_a_requeued_run_that_resumed_at_its_last_checkpoint_passes():
    verdict, failed = _judge_requeued(_requeued(killed_at=14, resumed_at=10, stop=10, steps=30))
    assert failed == []
    assert [s for s, _ in verdict.losses] == list(range(1, 31))  # 11-14 of the killed run are not counted twice
    first, requeued, resumed = verdict.attempts
    assert first.lost == [11, 12, 13, 14] and requeued.steps == list(range(11, 21)) and requeued.lost == []
    assert (requeued.attempt, requeued.started_at, resumed.started_at) == (1, 10, 20)


@pytest.mark.parametrize(
    "record, why",
    [
        # resumed from an older checkpoint than the last one the killed run finished (5, though 10 was saved)
        (dict(killed_at=14, resumed_at=5), "not at the last checkpoint"),
        # a start step that is not the step its checkpoint holds
        (dict(killed_at=14, resumed_at=10, checkpoint_step=4), "its checkpoint holds 5"),
        # the data position did not come back with the step
        (dict(killed_at=14, resumed_at=10, consumed=0), "consumed samples 0"),
    ],
)
def test_a_requeued_run_that_resumed_elsewhere_fails(record, why):
    verdict, failed = _judge_requeued(_requeued(stop=10, steps=30, **record))
    assert "requeued runs resumed from the last checkpoint" in failed
    assert why in next(c.detail for c in verdict.checks if c.name == "requeued runs resumed from the last checkpoint")


def test_a_killed_writer_leaves_a_torn_line_that_the_record_skips(tmp_path):
    from nemo_recipes.smoke_training import record

    path = tmp_path / "metrics.jsonl"
    record.append(path, {"event": "step", "step": 1})
    with open(path, "a", encoding="utf-8") as stream:
        stream.write('{"event": "step", "st')  # killed in the middle of a write
    record.append(path, {"event": "start", "attempt": 1})
    record.append(path, {"event": "step", "step": 2})
    assert record.read(path) == [
        {"event": "step", "step": 1},
        {"event": "start", "attempt": 1},
        {"event": "step", "step": 2},
    ]
    assert path.read_text().count("\n") == 4  # one line each, the torn one included


def _cores() -> int:
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize("processes", [lambda: _cores() + 1, lambda: 64, lambda: 4096])
def test_more_processes_than_the_machine_has_are_refused_before_anything_starts(processes, tmp_path):
    """Without GPUs each gloo process trains on a core: `--processes 4096` on two cores would start thousands of
    NeMo imports. Refused with the machine's count (GPUs where there are any)."""
    from _cli import cli

    from nemo_recipes.smoke_training.runner import visible_gpus

    count = processes()
    limit = visible_gpus() or _cores()
    result = cli("smoke", "gpt_1_3b", "--processes", str(count), "--dir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"processes={count}: is more than this machine's {limit} " in result.stderr
    assert f"use --processes {limit} or fewer" in result.stderr
    assert not (tmp_path / "run").exists()  # refused before the run's directory was made


def test_full_size_without_a_gpu_is_refused(tmp_path):
    from _cli import cli

    from nemo_recipes.smoke_training.runner import machine_problems, visible_gpus

    if visible_gpus():
        assert machine_problems(1, True) == []
        return
    for hidden in ({}, {"CUDA_VISIBLE_DEVICES": ""}):
        result = cli("smoke", "gpt_1_3b", "--full-size", "--dir", str(tmp_path / "run"), **hidden)
        assert result.returncode == 2
        assert result.stderr.startswith("nemo-recipes smoke: error: full_size=True: needs GPUs")
        assert "leave --full-size out" in result.stderr


@pytest.mark.parametrize(
    "args, named",
    [
        # the plan would have named num_gpus_per_node, a field the user never gave
        (["--processes", "100000"], "processes=100000: is larger than 4,096"),
        # ... and four derived token counts for --steps, never --steps itself
        (["--steps", str(10**20)], f"steps={10**20}: must be an integer from 4 to 1,000,000"),
        # fewer than the learning check needs: it was left out silently and the run passed
        (["--steps", "3"], "steps=3: must be an integer from 4 to 1,000,000"),
        # NeMo-Run's local executor runs its processes here: the machine's cores bound them as for --processes
        (["--executor", "local", "-E", "devices=4096"], "devices=4096: is more than this machine's"),
    ],
)
def test_the_smoke_verb_refuses_what_it_cannot_judge_naming_the_flag_given(args, named, tmp_path):
    from _cli import cli

    result = cli("smoke", "gpt_1_3b", *args, "--dir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr[-2000:]
    assert named in result.stderr, result.stderr[-2000:]
    assert "num_gpus_per_node" not in result.stderr and "_tokens" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused before the run's directory was made


def test_a_run_cut_short_shows_the_learning_check_failed_not_left_out():
    records = [{"event": "start", "phase": "train", "global_step": 0}]
    records += [{"event": "step", "phase": "train", "step": s, "loss": 7.0} for s in (1, 2, 3)]
    verdict = judge(records, steps=20, stop_step=10, global_batch_size=4)
    learned = [c for c in verdict.checks if c.name == "model learned"]
    assert len(learned) == 1 and not learned[0].passed and "3 step(s) trained" in learned[0].detail


def test_a_checkpoint_whose_files_were_not_read_whole_is_not_resumable():
    """The metadata alone passes a checkpoint whose tensor files are torn: "resumable" needs the read of every item
    (worker.read_every_item; shown on a real truncated checkpoint in test_smoke_negative.py)."""
    records = _records()
    last = records[-1]["checkpoints"][0]
    assert judge(records, steps=20, stop_step=10, global_batch_size=4).passed
    for broken in ({"read": None}, {"read": None, "error": "ValueError: f.distcp holds 0 bytes"}):
        last.update(broken)
        failed = [c for c in judge(records, steps=20, stop_step=10, global_batch_size=4).checks if not c.passed]
        assert [c.name for c in failed] == ["last checkpoint resumable"], failed
        assert ("holds 0 bytes" if "error" in broken else "its files were not read") in failed[0].detail


def test_the_learned_line_names_the_steps_its_mean_is_over(tmp_path):
    # A run shorter than LAST_STEPS: its mean is over every step it trained, and the line says how many.
    from nemo_recipes.catalog import RECIPES
    from nemo_recipes.smoke_training.learned import LAST_STEPS, learned

    losses = [(1, 7.0), (2, 6.0), (3, 5.0), (4, 4.0)]
    assert len(losses) < LAST_STEPS
    found = learned(RECIPES["gpt_1_3b"], losses, tmp_path, None, sample=False, entropy=6.0)
    assert found.final_loss == 5.5 and found.to_dict()["final_loss_steps"] == 4
    assert "mean loss of the last 4 steps 5.500 nats" in found.format()[0]
