"""Issue 13, generated: hostile values and argument lists for every entry point, each checked for the three
properties of the issue:

1. bad input is one message naming the field, the value and the fix, with exit code 2 (1 only for a failure
   outside the input), and never a traceback (in process: no exception other than InvalidRecipeError escapes);
2. nothing wrong is accepted: what is accepted passes an oracle written here, independently of the checks;
3. no file is written outside its directory (the CLI runs in an empty directory that must stay empty).

Example counts are bounded so that the fast entry points run in seconds; the NeMo-importing ones (factories
through NeMo-Run's parser, `launch`, the example) run fewer examples and carry the `nemo` marker. Run with
`--hypothesis-show-statistics` to see the number of cases.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from nemo_recipes.catalog import INT64_MAX, RECIPES, RecipeSpec, closest_recipe, field_names, get_recipe
from nemo_recipes.cli.main import main
from nemo_recipes.errors import InvalidRecipeError
from nemo_recipes.plan import GPU, Cluster, assess, fit, validate

REPO = Path(__file__).resolve().parent.parent


def fast(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# ---- hostile material ----

NASTY_TEXT = [
    "inf",
    "-inf",
    "nan",
    "NaN",
    "1e400",
    "-1e400",
    "-1",
    "0",
    "1e27",
    "9" * 40,
    "",
    " ",
    "four",
    "1.5",
    "0x10",
    "None",
    "null",
    "true",
    "maybe",
    "[1,2]",
    "[a, b]",
    "[]",
    "é",
    "∞",
    "١٢",
    "a\nb",
    "\x00",
    "../..",
    "../../x",
    "/",
    ".",
    "..",
    "1_000",
    "300B",
    "1.5T",
    "1e-400",
    "-0",
    "2**63",
    "1e19",
    "9223372036854775808",
    "\u202e",
    "x" * 300,
    # The red team's kinds (issue 33), so that every surface drawn from this list meets them:
    "1e308",  # weights whose sum overflows a float
    "1000000000000",  # --vocab-size 10^12 made the Rust trainer abort the process
    "2e20",
    "a" * 100_000,  # a path the system refuses to look up (File name too long)
    "/dev/null",  # a device where a file is expected
    "NAME=",  # a named input with nothing after the '='
    "data.jsonl.gz",  # a compressed input that does not exist (or is not that codec)
]
text_values = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.text(max_size=12),
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
python_values = st.one_of(
    st.sampled_from(
        [
            math.inf,
            -math.inf,
            math.nan,
            10**400,
            -(10**30),
            2**63,
            0,
            -1,
            1.5,
            True,
            False,
            None,
            "",
            "x" * 300,
            "a\nb",
            [],
            [1],
            (),
            {},
            {"a": 1},
            object(),
            b"bytes",
            1j,
        ]
    ),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
FIELDS = list(field_names())
keys = st.one_of(
    st.sampled_from(FIELDS), st.sampled_from(["tensor_paralel", "", " ", "=", "x.y", "NUM_NODES"]), st.text(max_size=6)
)
recipe_tokens = st.one_of(
    st.sampled_from(list(RECIPES)), st.sampled_from(["gpt70b", "GPT_7B", "", "-", "--", "x=1"]), st.text(max_size=8)
)


@st.composite
def override_items(draw, max_size: int = 4) -> list[str]:
    items = []
    for _ in range(draw(st.integers(0, max_size))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            items.append(draw(text_values))  # not key=value
        else:
            items.append(f"{draw(keys)}={draw(text_values)}")
    return items


# ---- oracles: what an accepted recipe must be, written without the catalog's checks ----


def assert_sane_spec(spec: RecipeSpec) -> None:
    for name in FIELDS:
        value = getattr(spec, name)
        if isinstance(value, float):
            assert math.isfinite(value), (name, value)
        if isinstance(value, int) and not isinstance(value, bool):
            assert 0 <= value <= INT64_MAX, (name, value)
    assert 0 < spec.max_lr < 1 and 0 < spec.adam_eps < 1 and spec.clip_grad > 0
    assert spec.weight_decay >= 0 and spec.max_lr * spec.weight_decay < 1
    assert spec.warmup_tokens <= spec.decay_tokens <= spec.train_tokens
    assert spec.global_batch_size * spec.seq_length <= spec.train_tokens
    assert spec.num_layers <= 4096 and spec.hidden_size <= 2**24 and spec.global_batch_size <= 2**24
    assert spec.name.strip() and "/" not in spec.name and "\\" not in spec.name and spec.name not in (".", "..")


def assert_runnable_plan(spec: RecipeSpec, cluster: Cluster) -> None:
    """A valid plan keeps the rules Megatron asserts at run time."""
    tp, pp, cp = spec.tensor_parallel, spec.pipeline_parallel, spec.context_parallel
    world = cluster.world_size
    assert world % (tp * pp * cp) == 0
    dp = world // (tp * pp * cp)
    assert spec.global_batch_size % (spec.micro_batch_size * dp) == 0
    # Megatron-Core splits the layers evenly over the stages and their chunks; with
    # account_for_{embedding,loss}_in_pipeline_split the embedding and the loss fill one slot each.
    slots = spec.num_layers + (2 if spec.pipeline_counts_embedding_and_loss and pp > 1 else 0)
    assert slots % (pp * (spec.virtual_pipeline or 1)) == 0
    assert spec.num_attention_heads % tp == 0 and spec.hidden_size % spec.num_attention_heads == 0
    if spec.sequence_parallel_enabled:
        assert tp > 1 and spec.seq_length % (tp * cp) == 0
    if cp > 1:
        assert spec.seq_length % (2 * cp) == 0


# ---- the CLI, in process ----


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # only --help and --version exit (an abbreviation such as --he is --help)
            assert exit_.code == 0, argv
            code = 0
    return code, out.getvalue(), err.getvalue()


def check_cli_answer(argv: list[str], code: int, out: str, err: str, *, allowed=(0, 2)) -> None:
    assert code in allowed, (argv, code, err)
    assert "Traceback" not in err, err
    if code == 2:
        usage = err.startswith("usage:")  # argparse's own errors come with the usage line
        # An invalid plan is a report on stdout: "Fix:" in the text, a "fix" of each problem in the JSON.
        assert usage or "Fix:" in err or "Fix:" in out or '"fix": "' in out, (argv, err)
    if "--json" in argv and not err.startswith("usage: nemo-recipes [") and out.strip():
        data = json.loads(out)
        if argv[:1] == ["plan"] and code in (0, 2) and "--help" not in argv:
            assert {"valid", "problems", "memory_gib"} <= set(data), data
            assert data["valid"] == (code == 0)


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def assert_nothing_written(folder: Path) -> None:
    assert list(folder.iterdir()) == [], list(folder.iterdir())


flag_values = st.one_of(text_values, st.integers(-3, 100).map(str))
PLAN_FLAGS = [
    "--nodes",
    "--gpus-per-node",
    "--gpu",
    "--tokens",
    "--lr-scaling",
    "--layers",
    "--hidden",
    "--heads",
    "--seq",
    "--tp",
    "--pp",
    "--cp",
    "--vp",
    "--mbs",
    "--gbs",
    "--ffn",
    "--query-groups",
    "--vocab",
    "--calibration",
    "--calibrate",
]
SWITCHES = ["--fit", "--scale-global-batch", "--custom", "--json", "--bogus", "-x", "--no-calibration"]


@st.composite
def plan_argv(draw) -> list[str]:
    argv = ["plan"]
    if draw(st.booleans()):
        argv.append(draw(recipe_tokens))
    argv += draw(override_items())
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            argv += [draw(st.sampled_from(PLAN_FLAGS)), draw(flag_values)]
        else:
            argv.append(draw(st.sampled_from(SWITCHES)))
    # A few well-formed cluster flags, so that valid plans are generated too.
    if draw(st.booleans()):
        argv += ["--nodes", str(draw(st.integers(1, 16))), "--gpu", draw(st.sampled_from(["h100", "h200", "a100"]))]
    return argv


@fast(250)
@given(argv=plan_argv())
def test_plan_answers_any_argument_list(empty_cwd, argv):
    code, out, err = run_cli(argv)
    check_cli_answer(argv, code, out, err)
    assert_nothing_written(empty_cwd)


@fast(200)
@given(recipe=recipe_tokens, items=override_items(), as_json=st.booleans())
def test_show_answers_any_override_and_accepts_only_sane_recipes(empty_cwd, recipe, items, as_json):
    argv = ["show", recipe, *items] + (["--json"] if as_json else [])
    code, out, err = run_cli(argv)
    check_cli_answer(argv, code, out, err)
    if code == 0 and as_json:
        fields = {name: entry["value"] for name, entry in json.loads(out)["fields"].items()}
        spec = RECIPES[recipe].replace(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
        assert_sane_spec(spec)
    assert_nothing_written(empty_cwd)


@fast(120)
@given(
    verb=st.sampled_from(["ls", "diff", "completion", "export", "launch", "bogus", ""]),
    rest=st.lists(
        st.one_of(
            text_values,
            recipe_tokens,
            st.sampled_from(["--json", "--names", "-o", "--format", "yaml", "bash", "--executor"]),
        ),
        max_size=4,
    ),
)
def test_other_fast_verbs_answer_any_argument_list(empty_cwd, verb, rest):
    argv = [verb, *rest]
    if verb in ("export", "launch"):
        # Only what is refused before NeMo is imported (fast): an unknown recipe first.
        argv = [verb, "gpt70b", *rest]
    # os.path.exists, not Path.exists: a name longer than the file system allows is "not a file", not an OSError.
    if verb == "diff" and any(os.path.exists(a) for a in rest if a):
        return  # a real file would be compared (NeMo for a recipe side): not this test's business
    code, out, err = run_cli(argv)
    check_cli_answer(argv, code, out, err)
    assert_nothing_written(empty_cwd)


DATA_FLAGS = ["--vocab-size", "--shard-size", "--tokenizer-sample", "--max-document-chars",
              "--workers", "--progress"]  # fmt: skip
hostile_paths = text_values.filter(lambda v: v not in ("/", "..", "../..", "-", "-h") and not v.startswith("-"))


@fast(80)
@given(
    inputs=st.lists(hostile_paths, min_size=1, max_size=2),
    out=hostile_paths,
    flags=st.lists(st.tuples(st.sampled_from(DATA_FLAGS), flag_values), max_size=3),
    tokenizer=st.one_of(st.just(["--train-tokenizer"]), hostile_paths.map(lambda path: ["--tokenizer", path])),
    switch=st.sampled_from([[], ["--json"], ["--skip-bad-lines"]]),
)
# Found by CI: a name over 255 bytes, which Path.is_dir() raises on (OSError 'File name too long').
@example(inputs=["x" * 300], out="inf", flags=[], tokenizer=["--train-tokenizer"], switch=[])
def test_data_prepare_answers_any_inputs_and_flags(empty_cwd, inputs, out, flags, tokenizer, switch):  # noqa: PLR0913
    """`data prepare` with hostile inputs, --out and flags (issue 33's kinds among them) in an empty directory:
    nothing there to read, so every answer is a refusal (exit 2 with the fix, or argparse's usage), never a
    traceback or a hang, and no --out is created for a refused run."""
    argv = ["data", "prepare", *inputs, "--out", out, *tokenizer, *switch, *(item for pair in flags for item in pair)]
    code, out_text, err = run_cli(argv)
    check_cli_answer(argv, code, out_text, err, allowed=(2,))
    assert_nothing_written(empty_cwd)


@fast(60)
@given(prefixes=st.lists(hostile_paths, min_size=1, max_size=2), tokenizer=st.one_of(st.none(), hostile_paths),
       sample=st.one_of(st.none(), flag_values))  # fmt: skip
def test_data_inspect_answers_any_prefix(empty_cwd, prefixes, tokenizer, sample):
    argv = ["data", "inspect", *prefixes]
    argv += ["--tokenizer", tokenizer] if tokenizer is not None else []
    argv += ["--sample-tokens", sample] if sample is not None else []
    code, out, err = run_cli(argv)
    check_cli_answer(argv, code, out, err, allowed=(2,))
    assert_nothing_written(empty_cwd)


# ---- the Python API ----


@fast(300)
@given(
    changes=st.dictionaries(st.sampled_from(FIELDS), python_values, max_size=3), recipe=st.sampled_from(list(RECIPES))
)
def test_replace_refuses_or_accepts_only_sane_recipes(changes, recipe):
    try:
        spec = RECIPES[recipe].replace(**changes)
    except InvalidRecipeError as error:
        assert all(p.fix and p.field for p in error.problems)
        assert str(error)  # printable, whatever the value
        json.dumps([p.to_dict() for p in error.problems], allow_nan=False)
        return
    assert_sane_spec(spec)


@fast(200)
@given(
    changes=st.dictionaries(
        st.sampled_from(
            [
                "tensor_parallel",
                "pipeline_parallel",
                "context_parallel",
                "seq_length",
                "micro_batch_size",
                "global_batch_size",
                "num_layers",
                "sequence_parallel",
                "virtual_pipeline",
            ]
        ),
        st.one_of(st.integers(-2, 70), st.sampled_from([None, True, False, 4095, 4097, 2048, 8192])),
        max_size=4,
    ),
    recipe=st.sampled_from(list(RECIPES)),
    nodes=st.integers(-1, 9),
    per_node=st.sampled_from([0, 1, 2, 4, 8, 16]),
    gpu=st.sampled_from([None, "h100", "a100-40gb", "gb200", "h100x", 7]),
)
# The 405B row's 126 layers split over PP 8 x VP 8 only with the embedding and the loss counted (CI, stop 39).
@example(changes={}, recipe="llama_405b", nodes=8, per_node=16, gpu=None)
@example(changes={"num_layers": 64}, recipe="llama_405b", nodes=8, per_node=16, gpu=None)
def test_planner_refuses_or_plans_only_runnable_layouts(changes, recipe, nodes, per_node, gpu):
    try:
        spec = RECIPES[recipe].replace(**changes)
        cluster = Cluster.of(nodes, per_node, gpu)
        report = assess(spec, cluster)
    except InvalidRecipeError as error:
        assert all(p.fix for p in error.problems)
        return
    json.dumps(report.to_dict())
    if report.valid:
        assert_runnable_plan(spec, cluster)


@fast(40)
@given(
    recipe=st.sampled_from(list(RECIPES)),
    nodes=st.integers(1, 12),
    gpu=st.sampled_from(["h100", "a100-40gb"]),
    seq=st.sampled_from([2048, 4095, 4096, 6000]),
    scale=st.booleans(),
)
def test_fit_refuses_or_fits_only_runnable_layouts(recipe, nodes, gpu, seq, scale):
    cluster = Cluster.of(nodes, 8, gpu)
    try:
        result = fit(RECIPES[recipe].replace(seq_length=seq), cluster, scale_global_batch=scale)
    except InvalidRecipeError as error:
        assert all(p.fix for p in error.problems)
        return
    assert result.report.valid
    assert_sane_spec(result.spec)
    assert_runnable_plan(result.spec, cluster)


@fast(150)
@given(
    value=python_values,
    which=st.sampled_from(
        ["get_recipe", "closest_recipe", "validate_spec", "validate_cluster", "cluster_nodes", "gpu_memory", "fit_spec"]
    ),
)
def test_api_entry_points_answer_wrong_types_with_a_problem(value, which):
    calls = {
        "get_recipe": lambda: get_recipe(value),
        "closest_recipe": lambda: closest_recipe(value),
        "validate_spec": lambda: validate(value, Cluster.of(1, 8)),
        "validate_cluster": lambda: validate(RECIPES["gpt_7b"], value),
        "cluster_nodes": lambda: Cluster.of(value, 8, "h100"),
        "gpu_memory": lambda: GPU(
            name="g",
            memory_gib=value,
            bf16_tflops=1e3,
            fp8_tflops=None,
            hbm_tb_s=3,
            nvlink_gb_s=450,
            network_gb_s=50,
            nvlink_domain=8,
        ),
        "fit_spec": lambda: fit(value, Cluster.of(1, 8)),
    }
    try:
        calls[which]()
    except InvalidRecipeError as error:
        assert all(p.fix for p in error.problems)
        assert str(error)


# ---- executor presets and profiles ----

SECRET = "hf_Zq8Wm3Xn5Vb7Lk2JpR4tY6uI"  # shaped like a Hugging Face token; must never be echoed
preset_values = st.one_of(
    python_values,
    st.sampled_from(
        [
            "a\nb",
            "acct",
            "batch",
            "04:00:00",
            "04:00:00\n",
            SECRET,
            [SECRET],
            {"HF_TOKEN": SECRET},
            {"X": SECRET},
            ["/a:/b"],
            [{"name": "v"}],
            "default",
        ]
    ),
)
PRESET_ARGS = {
    "local": ["devices", "gpu", "env", "secrets", "torchrun", "devicez"],
    "slurm": [
        "account",
        "partition",
        "nodes",
        "gpus_per_node",
        "processes_per_node",
        "gpu",
        "container_image",
        "container_mounts",
        "time",
        "exclusive",
        "mem",
        "retries",
        "tunnel",
        "host",
        "user",
        "job_dir",
        "identity",
        "env",
        "secrets",
        "qos",
        "constraint",
        "setup_lines",
        "packager",
        "acount",
    ],
    "kubernetes": [
        "image",
        "namespace",
        "nodes",
        "gpus_per_node",
        "processes_per_node",
        "gpu",
        "runtime",
        "pvcs",
        "volumes",
        "volume_mounts",
        "tolerations",
        "node_selector",
        "env",
        "secrets",
        "cpu",
        "memory",
        "image_pull_secrets",
        "shm_size",
        "shared_home_pvc",
        "affinity",
        "trainer_version",
    ],
}


@st.composite
def preset_calls(draw) -> tuple[str, dict]:
    preset = draw(st.sampled_from(list(PRESET_ARGS)))
    names = draw(st.lists(st.sampled_from(PRESET_ARGS[preset]), max_size=3, unique=True))
    args = {name: draw(preset_values) for name in names}
    if preset == "slurm" and draw(st.booleans()):
        args.setdefault("account", "acct")
    return preset, args


@pytest.mark.nemo
@fast(200)
@given(call=preset_calls())
def test_presets_refuse_or_build_and_never_echo_a_secret(kubeconfig_file, call):
    from nemo_recipes.executors.profiles import executor_for

    preset, args = call
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig_file)
    try:
        executor_for(preset, **args)
    except InvalidRecipeError as error:
        assert SECRET not in str(error)
        assert all(p.fix for p in error.problems)
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved


profile_settings = st.dictionaries(
    st.one_of(
        st.sampled_from(
            [
                "preset",
                "gpu",
                "account",
                "nodes",
                "devices",
                "partition",
                "secrets",
                "time",
                "trainer_version",
                "acount",
            ]
        ),
        st.text(max_size=5),
        st.integers(0, 3),
    ),
    st.one_of(
        st.sampled_from(
            [
                "local",
                "slurm",
                "kubernetes",
                "slurmm",
                "h100",
                "a\nb",
                "04:00:00",
                SECRET,
                2,
                -1,
                None,
                [],
                {},
                1e400,
                "v2.1",
            ]
        ),
        st.text(max_size=5),
    ),
    max_size=4,
)


@pytest.mark.nemo
@fast(150)
@given(
    profiles=st.dictionaries(
        st.one_of(st.sampled_from(["eos", "slurm", "local", "", "a b"]), st.integers(0, 2), st.text(max_size=4)),
        st.one_of(profile_settings, st.sampled_from([None, 3, "x", []])),
        max_size=3,
    ),
    duplicate=st.booleans(),
    garbage=st.sampled_from([b"", b"\xff\xfe", b"a: [", b"- 1\n- 2\n", b"\x00"]),
)
def test_profile_files_are_read_or_refused_and_each_profile_builds_or_is_refused(
    tmp_path_factory, kubeconfig_file, profiles, duplicate, garbage
):
    import yaml

    from nemo_recipes.executors.profiles import load_profiles

    path = tmp_path_factory.mktemp("profiles") / "clusters.yaml"
    text = yaml.safe_dump(profiles, allow_unicode=True).encode() if profiles else garbage
    if duplicate and profiles:
        text += text.split(b"\n", 1)[0] + b"\n  preset: local\n"
    path.write_bytes(text)
    os.environ["KUBECONFIG"] = str(kubeconfig_file)
    try:
        loaded = load_profiles(path)
    except InvalidRecipeError as error:
        assert SECRET not in str(error) and all(p.fix for p in error.problems)
        return
    for profile in loaded.values():
        assert profile.preset in ("local", "slurm", "kubernetes")
        try:
            profile.executor()
        except InvalidRecipeError as error:
            assert SECRET not in str(error)


# ---- NeMo-facing entry points: the factories through NeMo-Run's parser, `launch`, the example ----


@pytest.fixture(scope="module")
def factories():
    pytest.importorskip("nemo.collections.llm")
    import nemo_recipes

    return {name: getattr(nemo_recipes, name) for name in RECIPES}


identifier_keys = st.one_of(
    st.sampled_from([f for f in FIELDS if f not in ("size_label", "default_gpu")]),
    st.sampled_from(["name", "dir", "micro_batch_sise", "unknown"]),
    st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
)
factory_values = st.one_of(
    st.sampled_from(
        [
            v
            for v in NASTY_TEXT
            if "\n" not in v
            and "\x00" not in v
            and "," not in v
            and "=" not in v
            and "(" not in v
            and "'" not in v
            and '"' not in v
            and v.strip() == v
            and v
        ]
    ),
    st.integers(-10, 10**6).map(str),
    st.from_regex(r"[a-z0-9.]{1,6}", fullmatch=True),
)


@pytest.mark.nemo
@fast(80)
@given(
    name=st.sampled_from(list(RECIPES)),
    items=st.lists(
        st.one_of(st.builds(lambda k, v: f"{k}={v}", identifier_keys, factory_values), factory_values), max_size=3
    ),
)
# A key spelled like the factory's catch-all parameter (CI, stop 39).
@example(name="gpt_1_3b", items=["name=inf", "unknown=None"])
@example(name="gpt_1_3b", items=["unknown=0x10"])
def test_factories_through_nemo_runs_parser_refuse_with_our_message_or_build(factories, name, items):
    """What `nemo llm pretrain --factory "gpt_7b(ITEMS)"` does with ITEMS: NeMo-Run parses them by the factory's
    annotations and calls it."""
    import fiddle as fdl
    from nemo_run.cli.cli_parser import parse_cli_args

    positional_after_keyword = any(
        "=" not in item for item in items[next((i for i, item in enumerate(items) if "=" in item), len(items)) :]
    )
    assume(not positional_after_keyword)  # NeMo-Run's own syntax error, before any factory is called
    try:
        partial = fdl.build(parse_cli_args(factories[name], items))()
    except InvalidRecipeError as error:
        assert all(p.fix for p in error.problems)
        return
    from nemo_recipes.training.introspect import spec_from_partial

    assert_sane_spec(spec_from_partial(partial))


@pytest.mark.nemo
@fast(25)
@given(
    items=override_items(max_size=2),
    executor_args=st.lists(
        st.one_of(
            st.builds(
                lambda k, v: f"{k}={v}", st.sampled_from(["devices", "devicez", "gpu", "nodes", ""]), text_values
            ),
            text_values,
        ),
        max_size=2,
    ),
    name=st.one_of(st.none(), st.sampled_from(["../../x", "a/b", "..", "ok", "é"])),
)
@example(items=["train_tokens=1T"], executor_args=["devices=8"], name="ok")  # accepted: a real dry run
def test_launch_refuses_or_dry_runs_inside_nemorun_home(factories, empty_cwd, items, executor_args, name):
    from nemo_run.config import get_nemorun_home

    home = Path(get_nemorun_home())
    before = set(home.rglob("*")) if home.exists() else set()
    argv = ["launch", "gpt_1_3b", *items, "--executor", "local", "--dryrun"]
    argv += [a for item in executor_args for a in ("-E", item)]
    argv += ["--name", name] if name is not None else []
    code, out, err = run_cli(argv)
    check_cli_answer(argv, code, out, err, allowed=(0, 2))
    assert code == 2 or name in (None, "ok", "é")
    assert_nothing_written(empty_cwd)
    written = (set(home.rglob("*")) if home.exists() else set()) - before
    assert all(home in p.parents for p in written)


@pytest.mark.nemo
@fast(25)
@given(
    argv=st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "--recipe",
                    "--executor",
                    "--set",
                    "--devices",
                    "--nodes",
                    "--account",
                    "--name",
                    "--gpus-per-node",
                    "--namespace",
                    "--no-container",
                    "--check",
                ]
            ),
            st.sampled_from(
                [
                    "gpt_1_3b",
                    "gpt_8b",
                    "local",
                    "slurm",
                    "kubernetes",
                    "nowhere",
                    "tensor_parallel=2",
                    "key",
                    "max_lr=inf",
                    "../x",
                    "2",
                    "-1",
                ]
            ),
            text_values,
        ),
        max_size=6,
    )
)
@example(argv=["--recipe", "gpt_1_3b", "--executor", "local", "--devices", "8", "--set", "train_tokens=1T"])
def test_the_example_refuses_or_dry_runs(factories, empty_cwd, kubeconfig_file, argv):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import pretrain_gpt
    finally:
        sys.path.pop(0)
    full = [*argv, "--dryrun"]
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig_file)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = pretrain_gpt.main(full)
            except SystemExit as exit_:  # argparse: usage errors (2), --help (0)
                code = exit_.code
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved
    assert code in (0, 2), (full, code, err.getvalue()[-2000:])
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert "Fix:" in err.getvalue() or "usage:" in err.getvalue()
    assert_nothing_written(empty_cwd)


def test_the_strategies_include_the_issues_examples():
    assert {"inf", "nan", "1e400", "1e27", "../../x"} <= set(NASTY_TEXT)
    assert re.fullmatch(r"hf_\w+", SECRET)
