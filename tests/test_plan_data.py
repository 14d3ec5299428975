"""The recipe and the planner know the data (issue 19, point 3): the tokenizer's vocabulary, each source's tokens and
epochs, and the refusals before any GPU hour, on real datasets written by `data.prepare` (Megatron's
IndexedDatasetBuilder, a Hugging Face BPE tokenizer trained offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli

from nemo_recipes.catalog import get_recipe
from nemo_recipes.errors import ERROR, WARNING, InvalidRecipeError
from nemo_recipes.plan.data import EPOCHS_WARNING, SPLIT, read_data, split_documents
from nemo_recipes.smoke_training.shape import smoke_shape

VOCAB = 300


def _write(path: Path, documents: int, seed: int) -> Path:
    words = ["thou", "art", "the", "king", "of", "night", "and", "day", "my", "lord", "sweet", "love", "O"]
    lines = []
    for d in range(documents):
        text = " ".join(words[(d * 7 + i * (seed + 3)) % len(words)] for i in range(40 + d % 5))
        lines.append(json.dumps({"text": text}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two sources (30 and 12 documents) with their trained tokenizer, and a third prepared by another tokenizer."""
    from nemo_recipes.data.prepare import prepare

    root = tmp_path_factory.mktemp("data")
    inputs = [str(_write(root / "plays.jsonl", 30, 1)), str(_write(root / "poems.jsonl", 12, 2))]
    prepare(inputs, root / "out", train_tokenizer=True, vocab_size=VOCAB, progress="none")
    prepare([str(_write(root / "other.jsonl", 30, 5))], root / "other", train_tokenizer=True, vocab_size=280,
            progress="none")  # fmt: skip
    return root


def _spec(data: Path, *names: str, **more):
    paths = tuple(str(data / "out" / n) for n in names)
    values = {"data_paths": paths, "tokenizer_path": str(data / "out" / "tokenizer"), **more}
    return get_recipe("gpt_7b").replace(**values)


def test_the_vocabulary_is_the_tokenizers_and_the_plan_follows_it(data):
    spec = _spec(data, "plays")
    planned, report = read_data(spec)
    vocab = report.tokenizer.vocab_size
    assert planned.vocab_size == vocab == report.vocab_size and vocab != spec.vocab_size
    # Parameters (and so memory and throughput) follow: the embedding shrinks from GPT-2's 50,257 rows.
    assert spec.num_parameters - planned.num_parameters == (spec.padded_vocab_size - planned.padded_vocab_size) * (
        spec.hidden_size
    )
    assert not [p for p in report.problems if p.severity == ERROR]


def test_an_explicit_vocab_size_that_disagrees_with_the_tokenizer_is_an_error(data):
    _, report = read_data(_spec(data, "plays", vocab_size=VOCAB + 1), vocab_given=True)
    assert [(p.field, p.value) for p in report.errors] == [("vocab_size", VOCAB + 1)]
    _, agreeing = read_data(_spec(data, "plays", vocab_size=report.tokenizer.vocab_size), vocab_given=True)
    assert not agreeing.errors


def test_each_sources_tokens_and_epochs_with_a_warning_above_the_threshold(data):
    from nemo_recipes.data.manifest import read_manifest

    tokens = {n: read_manifest(data / "out" / n).tokens for n in ("plays", "poems")}
    # Weights 3:1 over 8 x the plays' tokens: plays 6.0 epochs (warned), poems 2 x plays / poems tokens.
    train = 8 * tokens["plays"]
    spec = _spec(data, "plays", "poems", data_weights=(3.0, 1.0), train_tokens=train, warmup_tokens=1, decay_tokens=2,
                 global_batch_size=1, micro_batch_size=1, seq_length=8)  # fmt: skip
    _, report = read_data(spec)
    plays, poems = report.sources
    assert (plays.tokens, poems.tokens) == (tokens["plays"], tokens["poems"]) and plays.manifest
    assert plays.weight == 0.75 and plays.epochs == pytest.approx(6.0)
    assert poems.epochs == pytest.approx(0.25 * train / tokens["poems"])
    warned = {p.value for p in report.problems if p.severity == WARNING and "epochs" in p.message}
    assert warned == {p.path for p in (plays, poems) if p.epochs > EPOCHS_WARNING}
    assert str(plays.path) in warned
    assert any("6.0 epochs" in line for line in report.format())


def test_a_prefix_that_does_not_exist_and_one_without_a_manifest(data, tmp_path):
    _, report = read_data(_spec(data, "plays", "missing"))
    assert [(p.field, Path(p.value).name) for p in report.errors] == [("data_paths", "missing")]
    # Without a manifest, the .idx still counts the tokens; the ids are not checked, which is said.
    for suffix in (".bin", ".idx"):
        (tmp_path / f"bare{suffix}").write_bytes((data / "out" / f"plays{suffix}").read_bytes())
    spec = get_recipe("gpt_7b").replace(data_paths=(str(tmp_path / "bare"),))
    _, bare = read_data(spec)
    assert not bare.errors and bare.sources[0].tokens > 0 and not bare.sources[0].manifest
    assert any(p.severity == WARNING and "no manifest" in p.message for p in bare.problems)


def test_a_manifest_written_by_another_tokenizer_is_refused(data):
    spec = _spec(data, "plays").replace(data_paths=(str(data / "other" / "other"),))
    _, report = read_data(spec)
    (problem,) = report.errors
    assert problem.field == "tokenizer_path" and str(data / "other" / "tokenizer") in problem.fix


def test_token_ids_beyond_the_vocabulary_are_refused(data):
    # No tokenizer_path: the NullTokenizer's vocab_size must hold the dataset's ids.
    spec = get_recipe("gpt_7b").replace(data_paths=(str(data / "out" / "plays"),), vocab_size=100)
    _, report = read_data(spec)
    (problem,) = report.errors
    assert problem.field == "data_paths" and "do not fit vocab_size=100" in problem.message
    assert "tokenizer_path=" in problem.fix
    _, fine = read_data(spec.replace(vocab_size=VOCAB))
    assert not fine.errors


def test_a_source_too_small_for_megatrons_split_is_refused(data):
    # Megatron's own split matrix, cut as its builder cuts it (blended_megatron_dataset_builder rounds the bounds
    # times the documents): the planner's count agrees for every size.
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )

    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(",".join(map(str, SPLIT))))
    for n in range(0, 400):
        assert split_documents(n) == [int(round(b * float(n))) - int(round(a * float(n))) for a, b in matrix], n
    # 12 documents leave the validation split empty, which Megatron-Core never finishes building.
    assert split_documents(12) == [11, 0, 1]
    _, report = read_data(_spec(data, "plays", "poems"))
    (problem,) = report.errors
    assert problem.value.endswith("poems") and "12 document(s)" in problem.message
    assert "validation split" in problem.message


def test_plan_shows_the_data_and_refuses_what_would_fail(data):
    out = data / "out"
    good = cli("plan", "gpt_7b", f"data_paths=[{out}/plays]", f"tokenizer_path={out}/tokenizer", "--json")
    assert good.returncode == 0, good.stderr
    payload = json.loads(good.stdout)
    assert payload["data"]["sources"][0]["tokens"] > 0 and payload["data"]["vocab_size"] < 1000
    bad = cli("plan", "gpt_7b", f"data_paths=[{out}/plays,{out}/nothere]", f"tokenizer_path={out}/nope")
    assert bad.returncode == 2
    assert "tokenizer_path='" in bad.stdout and "nothere.idx is missing" in bad.stdout


@pytest.mark.parametrize(
    "items, field",
    [
        (["data_paths=[/d/a,/d/b]", "data_weights=[1]"], "data_weights"),  # one weight for two paths
        (["data_paths=[/d/a.bin]"], "data_paths"),  # a file, not a prefix
        (["data_paths=[/d/a.idx]"], "data_paths"),
        (["data_paths=[/d/a.manifest.json]"], "data_paths"),
        (["tokenizer_path="], "tokenizer_path"),  # blank
        (["tokenizer_path=  "], "tokenizer_path"),
    ],
)
def test_show_refuses_what_the_factory_refuses(items, field):
    result = cli("show", "gpt_7b", *items)
    assert result.returncode == 2 and f"{field}=" in result.stderr, result.stderr


def test_smoke_plans_with_the_tokenizers_vocabulary_and_refuses_a_missing_tokenizer_before_training(data):
    out = data / "out"
    spec = get_recipe("gpt_70b")
    plan = smoke_shape(spec, overrides={"data_paths": (str(out / "plays"),), "tokenizer_path": str(out / "tokenizer")})
    assert plan.spec.vocab_size == read_data(plan.spec)[1].tokenizer.vocab_size
    assert plan.spec.data_paths == (str(out / "plays"),)
    with pytest.raises(InvalidRecipeError) as error:
        smoke_shape(spec, overrides={"data_paths": (str(out / "plays"),), "tokenizer_path": str(out / "nope")})
    assert [p.field for p in error.value.problems] == ["tokenizer_path"]
    assert "no such file" in error.value.problems[0].message and error.value.problems[0].fix


@pytest.mark.nemo
def test_the_recipe_plugin_refuses_missing_or_foreign_data_before_submitting(data):
    import nemo_recipes
    from nemo_recipes.executors import RecipePlugin, local

    out = data / "out"
    # Building the recipe opens no file: the missing prefix is found when the plugin attaches it to hardware.
    recipe = nemo_recipes.gpt_1_3b(data_paths=[str(out / "plays"), str(out / "gone")],
                                   tokenizer_path=str(data / "other" / "tokenizer"))  # fmt: skip
    with pytest.raises(InvalidRecipeError, match="not submitted") as error:
        RecipePlugin().setup(recipe, local(devices=8))
    found = {(p.field, Path(str(p.value)).name) for p in error.value.problems if p.severity == ERROR}
    assert found == {("data_paths", "gone"), ("tokenizer_path", "tokenizer")}
    fine = nemo_recipes.gpt_1_3b(data_paths=[str(out / "plays")], tokenizer_path=str(out / "tokenizer"))
    # The model config leaves the vocabulary to NeMo, which sizes the embedding from the tokenizer at configure time.
    assert fine.model.config.vocab_size is None
    assert fine.data.tokenizer.pretrained_model_name == str(out / "tokenizer")
    RecipePlugin().setup(fine, local(devices=8))


def test_relative_paths_are_made_absolute_where_they_are_checked(data, monkeypatch):
    """A Slurm job runs in its experiment directory (--chdir) and a pod in its image's: a relative prefix or
    tokenizer that the plan checked here would name nothing there (issue 33)."""
    monkeypatch.chdir(data)
    spec = get_recipe("gpt_7b").replace(data_paths=("out/plays",), tokenizer_path="out/tokenizer")
    planned, report = read_data(spec)
    assert not report.errors
    assert planned.data_paths == (str(data / "out" / "plays"),)
    assert planned.tokenizer_path == str(data / "out" / "tokenizer")
    assert [s.path for s in report.sources] == [str(data / "out" / "plays")]


def test_a_tokenizer_json_is_the_tokenizer_of_its_directory(data, tmp_path):
    """The docs let `data prepare` take DIR or DIR/tokenizer.json: either names the tokenizer that wrote the data,
    and the recipe gives NeMo the directory (AutoTokenizer loads directories)."""
    from nemo_recipes.data.prepare import prepare

    out = data / "out"
    planned, report = read_data(_spec(data, "plays", tokenizer_path=str(out / "tokenizer" / "tokenizer.json")))
    assert not report.errors, [p.message for p in report.errors]
    assert planned.tokenizer_path == str(out / "tokenizer")
    # Prepared from the file, read with the directory.
    prepare([str(_write(tmp_path / "plays.jsonl", 30, 1))], tmp_path / "by-file", progress="none",
            tokenizer_path=str(out / "tokenizer" / "tokenizer.json"))  # fmt: skip
    spec = get_recipe("gpt_7b").replace(data_paths=(str(tmp_path / "by-file" / "plays"),))
    for tokenizer in (out / "tokenizer", out / "tokenizer" / "tokenizer.json"):
        _, report = read_data(spec.replace(tokenizer_path=str(tokenizer)))
        assert not report.errors, [p.message for p in report.errors]
    # Another tokenizer's file is still refused.
    _, report = read_data(spec.replace(tokenizer_path=str(data / "other" / "tokenizer" / "tokenizer.json")))
    assert [p.field for p in report.errors] == ["tokenizer_path"]


@pytest.mark.nemo
def test_the_recipe_plugin_gives_the_job_absolute_paths_and_the_tokenizers_directory(data, monkeypatch):
    import nemo_recipes
    from nemo_recipes.executors import RecipePlugin, slurm

    monkeypatch.chdir(data)
    recipe = nemo_recipes.gpt_1_3b(data_paths=["out/plays", str(data / "out" / "plays")], data_weights=[2, 1],
                                   tokenizer_path="out/tokenizer/tokenizer.json")  # fmt: skip
    assert recipe.data.tokenizer.pretrained_model_name == "out/tokenizer"  # a directory, without opening a file
    executor = slurm(account="a", partition="p", nodes=1, gpus_per_node=8, container_image=None)
    RecipePlugin().setup(recipe, executor)
    out = data / "out"
    assert recipe.data.paths == [2.0, str(out / "plays"), 1.0, str(out / "plays")]
    assert recipe.data.tokenizer.pretrained_model_name == str(out / "tokenizer")


@pytest.mark.parametrize("damage", ["bin cut short", "bin grown", "idx of another dataset", "idx cut short"])
def test_files_changed_behind_an_intact_manifest_are_refused(data, tmp_path, damage):
    """Issue 33 (red team): plan read only the manifest, so a `.bin` cut short or an `.idx` replaced by another
    dataset's passed as valid, and the job failed (or trained on garbage) on the GPUs."""
    for suffix in (".bin", ".idx", ".manifest.json"):
        (tmp_path / f"plays{suffix}").write_bytes((data / "out" / f"plays{suffix}").read_bytes())
    spec = _spec(data, "plays").replace(data_paths=(str(tmp_path / "plays"),))
    _, intact = read_data(spec)
    assert not intact.errors, intact.errors
    bin_, idx = tmp_path / "plays.bin", tmp_path / "plays.idx"
    if damage == "bin cut short":
        bin_.write_bytes(bin_.read_bytes()[:-2])
    elif damage == "bin grown":
        bin_.write_bytes(bin_.read_bytes() + b"\0\0")
    elif damage == "idx of another dataset":  # poems: another document count, another .bin size
        idx.write_bytes((data / "out" / "poems.idx").read_bytes())
    else:
        idx.write_bytes(idx.read_bytes()[:-8])
    _, report = read_data(spec)
    (problem,) = report.errors
    assert problem.field == "data_paths" and problem.value == str(tmp_path / "plays"), problem
    assert "prepare the data again" in problem.fix
    if damage.startswith("bin"):  # each file's own size: the `.idx` still ends where the `.bin` ended when written
        size = (data / "out" / "plays.bin").stat().st_size
        assert f"ending at byte {size}, and plays.bin has {bin_.stat().st_size} bytes" in problem.message, problem


def test_an_idx_of_the_same_counts_but_other_offsets_is_refused(data, tmp_path):
    """The constant-time check reads where the last sequence ends: an index whose counts agree but whose offsets
    do not (rewritten by another tool) is refused too."""
    import struct

    for suffix in (".bin", ".idx", ".manifest.json"):
        (tmp_path / f"plays{suffix}").write_bytes((data / "out" / f"plays{suffix}").read_bytes())
    idx = tmp_path / "plays.idx"
    raw = bytearray(idx.read_bytes())
    sequences = struct.unpack_from("<Q", raw, 18)[0]
    last_pointer = 34 + 4 * sequences + 8 * (sequences - 1)
    struct.pack_into("<q", raw, last_pointer, struct.unpack_from("<q", raw, last_pointer)[0] - 2)
    idx.write_bytes(bytes(raw))
    _, report = read_data(_spec(data, "plays").replace(data_paths=(str(tmp_path / "plays"),)))
    (problem,) = report.errors
    assert problem.field == "data_paths" and "ending at byte" in problem.message
