"""Blends by budget (issue 29, item 3): what users want of each source, as epochs (`data_epochs`) or tokens
(`data_tokens`), becomes the weights Megatron samples by; a budget the run cannot meet is refused with the fix. The
last word is Megatron's own: its BlendedDataset, built from prepared data as NeMo's PreTrainingDataModule builds it,
draws from each source the tokens asked."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path

import pytest
from _cli import cli

from nemo_recipes.catalog import get_recipe
from nemo_recipes.data.manifest import read_manifest
from nemo_recipes.errors import ERROR, InvalidRecipeError
from nemo_recipes.overrides import apply_overrides
from nemo_recipes.plan.data import read_data

SEQ, GBS = 16, 4  # one global batch: 64 tokens
STEP = SEQ * GBS
EPOCHS = (2.0, 0.5)


def _write(path: Path, documents: int, seed: int) -> str:
    words = ["thou", "art", "the", "king", "of", "night", "and", "day", "my", "lord", "sweet", "love", "O"]
    lines = [
        json.dumps({"text": " ".join(words[(d * 7 + i * (seed + 3)) % len(words)] for i in range(30 + d % 5))})
        for d in range(documents)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    """Two sources prepared by `data prepare` (40 and 60 documents: every split of Megatron's 900,50,50 holds some)
    with the tokenizer it trained."""
    from nemo_recipes.data.prepare import prepare

    root = tmp_path_factory.mktemp("budget")
    inputs = [_write(root / "plays.jsonl", 40, 1), _write(root / "poems.jsonl", 60, 2)]
    prepare(inputs, root / "out", train_tokenizer=True, vocab_size=300, progress="none")
    return root / "out"


def _tokens(out: Path) -> list[int]:
    return [read_manifest(out / name).tokens for name in ("plays", "poems")]


def _spec(out: Path, train_tokens: int, **more):
    """gpt_7b on tiny batches, its schedule inside a run of `train_tokens`."""
    return get_recipe("gpt_7b").replace(
        data_paths=(str(out / "plays"), str(out / "poems")),
        tokenizer_path=str(out / "tokenizer"),
        seq_length=SEQ,
        global_batch_size=GBS,
        micro_batch_size=1,
        train_tokens=train_tokens,
        warmup_tokens=STEP,
        decay_tokens=train_tokens,
        **more,
    )


def _asked(out: Path) -> list[float]:
    return [e * t for e, t in zip(EPOCHS, _tokens(out), strict=True)]


def test_epochs_become_weights_from_the_manifests_and_the_plan_keeps_what_was_asked(out):
    wanted = _asked(out)
    planned, report = read_data(_spec(out, math.ceil(sum(wanted)), data_epochs=EPOCHS))
    assert not report.errors, [str(p) for p in report.errors]
    assert planned.data_weights == pytest.approx([w / sum(wanted) for w in wanted])
    assert (planned.data_epochs, planned.data_tokens) == ((), ())  # resolved: what the job runs
    budget = report.budget
    assert budget.field == "data_epochs" and budget.asked == EPOCHS
    assert budget.asked_tokens == pytest.approx(sum(wanted))
    assert [s.asked_epochs for s in report.sources] == pytest.approx(EPOCHS)
    assert [s.asked_tokens for s in report.sources] == pytest.approx(wanted)
    # Tokens need no file: the same weights from the same amounts.
    same, report = read_data(_spec(out, math.ceil(sum(wanted)), data_tokens=tuple(round(w) for w in wanted)))
    assert not report.errors and same.data_weights == pytest.approx(planned.data_weights)
    assert [s.asked_epochs for s in report.sources] == pytest.approx(EPOCHS)


def test_a_budget_the_run_cannot_meet_is_refused_and_either_fix_is_accepted(out):
    wanted = _asked(out)
    spec = _spec(out, 10 * math.ceil(sum(wanted)), data_epochs=EPOCHS)
    _, report = read_data(spec)
    (problem,) = report.errors
    assert problem.field == "data_epochs" and problem.value == list(EPOCHS)
    assert "one global batch (64 tokens)" in problem.message
    # Both ways out, each of them accepted: the run's length, or the budget scaled to the run.
    assert f"train_tokens={math.ceil(sum(wanted))} " in problem.fix and "data_epochs=[" in problem.fix
    scaled = tuple(float(x) for x in problem.fix.split("data_epochs=[")[1].rstrip("].").split(", "))
    assert not read_data(spec.replace(data_epochs=scaled))[1].errors
    assert not read_data(_spec(out, math.ceil(sum(wanted)), data_epochs=EPOCHS))[1].errors
    # The run's tokens within one global batch of the budget agree (train_steps is whole: the steps just below and
    # just above the budget both do); a step more or less does not.
    low, high = math.floor(sum(wanted) / STEP), math.ceil(sum(wanted) / STEP)
    for steps, agrees in ((low - 1, False), (low, True), (high, True), (high + 1, False)):
        assert bool(read_data(_spec(out, steps * STEP, data_epochs=EPOCHS))[1].errors) != agrees, steps
    # data_tokens needs no file: the catalog refuses it, so `show` does too.
    with pytest.raises(InvalidRecipeError) as error:
        apply_overrides(_spec(out, 10 * math.ceil(sum(wanted))), [f"data_tokens=[{wanted[0]:.0f}, {wanted[1]:.0f}]"])
    assert [p.field for p in error.value.problems] == ["data_tokens"] and "train_tokens=" in error.value.problems[0].fix


def test_malformed_budgets_are_refused_all_at_once_before_any_file_is_read(tmp_path):
    base = get_recipe("gpt_7b").replace(data_paths=("/nowhere/a", "/nowhere/b"))
    cases = [
        (["data_epochs=[1, 2]", "data_tokens=[1, 2]"], {"data_tokens"}, "not both"),
        (["data_epochs=[1, 2]", "data_weights=[1, 1]"], {"data_epochs"}, "data_weights"),
        (["data_epochs=[1, 2, 3]"], {"data_epochs"}, "3 entries for 2 data paths"),
        (["data_epochs=[1, 0]"], {"data_epochs"}, "positive"),
        (["data_epochs=[-1, 1]"], {"data_epochs"}, "positive"),
        (["data_epochs=[nan, 1]"], {"data_epochs"}, "finite"),
        (["data_epochs=[inf, 1]"], {"data_epochs"}, "finite"),
        (["data_tokens=[0, 1B]"], {"data_tokens"}, "positive"),
        (["data_tokens=[1.5, 1B]"], {"data_tokens"}, "must be a list of an integer"),
        (["data_epochs=[1e308, 1e308]"], {"data_epochs"}, "overflows"),
        (["data_paths=[]", "data_epochs=[1]"], {"data_epochs"}, "without data_paths"),
    ]
    for items, fields, words in cases:
        with pytest.raises(InvalidRecipeError) as error:
            apply_overrides(base, items)
        found = [p for p in error.value.problems if p.severity == ERROR]
        assert {p.field for p in found} == fields and any(words in p.message for p in found), (items, found)
        assert all(p.fix for p in found)
    # Every problem in one report: a wrong count and a bad entry, and a second field's.
    with pytest.raises(InvalidRecipeError) as error:
        apply_overrides(base, ["data_epochs=[1, -2, 3]", "data_weights=[1, 1]"])
    assert len([p for p in error.value.problems if p.field == "data_epochs"]) == 3


def test_epochs_of_a_source_without_a_token_count_are_refused_and_an_idx_alone_counts(out, tmp_path):
    gone = get_recipe("gpt_7b").replace(data_paths=(str(out / "plays"), str(tmp_path / "gone")), data_epochs=EPOCHS)
    _, report = read_data(gone)
    budget_problems = [p for p in report.errors if p.field == "data_epochs"]
    assert [Path(p.value).name for p in budget_problems] == ["gone"]
    assert "nemo-recipes data prepare" in budget_problems[0].fix and "data_weights" in budget_problems[0].fix
    # A prefix written without a manifest (Megatron's preprocess_data.py): its .idx holds the same count.
    for suffix in (".bin", ".idx"):
        (tmp_path / f"bare{suffix}").write_bytes((out / f"plays{suffix}").read_bytes())
    wanted = _asked(out)
    bare = _spec(out, math.ceil(sum(wanted)), data_epochs=EPOCHS).replace(
        data_paths=(str(tmp_path / "bare"), str(out / "poems"))
    )
    planned, report = read_data(bare)
    assert not report.errors and planned.data_weights == pytest.approx([w / sum(wanted) for w in wanted])


def test_plan_shows_what_was_asked_and_the_weights_it_gives(out):
    wanted = _asked(out)
    run = math.ceil(sum(wanted))
    items = [f"data_paths=[{out / 'plays'}, {out / 'poems'}]", f"tokenizer_path={out / 'tokenizer'}",
             "data_epochs=[2, 0.5]", f"seq_length={SEQ}", f"global_batch_size={GBS}", "micro_batch_size=1",
             f"train_tokens={run}", f"warmup_tokens={STEP}", f"decay_tokens={run}", "num_gpus_per_node=4"]  # fmt: skip
    result = cli("plan", "gpt_7b", *items, "--json")
    data = json.loads(result.stdout)["data"]
    weights = [w / sum(wanted) for w in wanted]
    assert data["budget"]["field"] == "data_epochs" and data["budget"]["asked"] == list(EPOCHS)
    assert data["budget"]["weights"] == pytest.approx(weights)
    assert [s["weight"] for s in data["sources"]] == pytest.approx(weights)
    assert [s["asked_epochs"] for s in data["sources"]] == pytest.approx(EPOCHS)
    text = " ".join(cli("plan", "gpt_7b", *items).stdout.split())  # the report wraps long paths' lines
    assert "budget data_epochs=[2, 0.5]" in text and f"weights {weights[0]:.3f}, {weights[1]:.3f}" in text, text
    assert "asked 2.00 epochs" in text and "asked 0.50 epochs" in text
    longer = [item for item in items if not item.startswith(("train_tokens=", "decay_tokens="))]
    refused = cli("plan", "gpt_7b", *longer, "train_tokens=1000000", "decay_tokens=1000000", "--json")
    assert refused.returncode == 2
    problems = json.loads(refused.stdout)["problems"]
    assert any(p["field"] == "data_epochs" and "train_tokens=" in p["fix"] for p in problems), problems


@pytest.mark.nemo
def test_megatrons_blended_dataset_draws_the_tokens_asked_of_each_source(out):
    """The weights the plan gives, handed to Megatron-Core's BlendedMegatronDatasetBuilder as NeMo's
    PreTrainingDataModule hands them (get_blend_from_list, GPTDatasetConfig, split 900,50,50, train samples =
    max_steps x global batch): each source's samples drawn x sequence are the tokens asked, within the rounding of
    the run (one global batch, shared by weight) and of Megatron's sampler (one sample)."""
    import numpy as np
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    wanted = _asked(out)
    planned, report = read_data(_spec(out, math.ceil(sum(wanted)), data_epochs=EPOCHS))
    assert not report.errors

    def drawn(weights) -> list[int]:
        blend = get_blend_from_list([x for w, p in zip(weights, planned.data_paths, strict=True) for x in (w, p)])
        config = GPTDatasetConfig(
            random_seed=1234,
            sequence_length=planned.seq_length,
            blend=list(blend),
            split="900,50,50",
            # GPTDataset reads only the end-of-document and pad ids of the tokenizer.
            tokenizer=types.SimpleNamespace(eod=0, pad=-1, unique_identifiers={"class": "eod-only"}),
            path_to_cache=None,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            mmap_bin_files=True,
        )
        samples = planned.train_steps * planned.global_batch_size
        train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, GBS, GBS], lambda: True, config).build()
        # Megatron builds sum(ceil(samples x weight)) samples (one more per source at most); training reads the
        # first max_steps x global batch of them (NeMo's MegatronPretrainingSampler, in order).
        assert samples <= len(train) <= samples + 2
        return list(np.bincount(train.dataset_index[:samples], minlength=2) * planned.seq_length)

    def meets(tokens: list[int]) -> bool:
        return all(
            abs(got - asked) <= w * STEP + SEQ
            for got, asked, w in zip(tokens, wanted, planned.data_weights, strict=True)
        )

    tokens = drawn(planned.data_weights)
    assert meets(tokens), (tokens, wanted)
    # The check can fail: the same run with the weights inverted, or equal, misses the budget.
    assert not meets(drawn(planned.data_weights[::-1]))
    assert not meets(drawn((0.5, 0.5)))


@pytest.mark.nemo
def test_the_recipe_holds_the_epochs_unread_and_the_plugin_gives_nemo_their_weights(out):
    import fiddle as fdl

    import nemo_recipes
    from nemo_recipes import budget
    from nemo_recipes.executors import RecipePlugin, local

    wanted = _asked(out)
    values = dict(
        data_paths=[str(out / "plays"), str(out / "poems")],
        tokenizer_path=str(out / "tokenizer"),
        data_epochs=list(EPOCHS),
        seq_length=SEQ,
        global_batch_size=32,  # DP 8 x micro batch 4
        train_tokens=math.ceil(sum(wanted)),
        warmup_tokens=STEP,
        decay_tokens=math.ceil(sum(wanted)),
    )
    # 32 x 16 = 512 tokens a step: the budget's sum is met within one of them.
    recipe = nemo_recipes.gpt_1_3b(**values)
    # Building the recipe opens no file: the blend is a call, made by the plugin (or by the job).
    assert recipe.data.paths.__fn_or_cls__ is budget.blend_by_epochs
    built = fdl.build(recipe.data.paths)  # what a job without the plugin would compute
    RecipePlugin().setup(recipe, local(devices=8))
    assert isinstance(recipe.data.paths, list) and recipe.data.paths[1::2] == values["data_paths"]
    planned, _ = read_data(get_recipe("gpt_1_3b").replace(**values))
    assert recipe.data.paths[0::2] == pytest.approx(list(planned.data_weights))
    assert built[0::2] == pytest.approx(list(planned.data_weights))
    # A run the budget disagrees with is refused before submitting, naming the field and both fixes.
    longer = nemo_recipes.gpt_1_3b(**{**values, "train_tokens": 40 * values["train_tokens"]})
    with pytest.raises(InvalidRecipeError, match="not submitted") as error:
        RecipePlugin().setup(longer, local(devices=8))
    (problem,) = [p for p in error.value.problems if p.severity == ERROR]
    assert problem.field == "data_epochs" and "train_tokens=" in problem.fix and "data_epochs=[" in problem.fix
