"""Tier (b): the recipes as real NeMo objects, built on CPU with the network blocked."""

from __future__ import annotations

import dataclasses
import os

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

import fiddle as fdl  # noqa: E402
import nemo_run as run  # noqa: E402
import torch  # noqa: E402
from nemo.collections.llm.api import pretrain  # noqa: E402
from nemo.collections.llm.gpt.model.base import GPTConfig  # noqa: E402

import nemo_recipes  # noqa: E402
from nemo_recipes.catalog import RECIPES, field_names  # noqa: E402
from nemo_recipes.errors import InvalidRecipeError  # noqa: E402
from nemo_recipes.families import Architecture  # noqa: E402
from nemo_recipes.plan.layout import Layout  # noqa: E402
from nemo_recipes.smoke_training import cpu_compat  # noqa: E402
from nemo_recipes.training import parts  # noqa: E402
from nemo_recipes.training.factories import FACTORIES, knob_names  # noqa: E402
from nemo_recipes.training.introspect import spec_from_partial  # noqa: E402
from nemo_recipes.training.model import CONFIG_CLASSES, model_config  # noqa: E402
from nemo_recipes.training.preflight import Preflight, fp8_problems  # noqa: E402

pytestmark = pytest.mark.nemo
NAMES = list(RECIPES)


def test_every_catalog_row_has_an_exported_factory_and_config():
    assert set(FACTORIES) == set(RECIPES) == set(CONFIG_CLASSES)
    for name in NAMES:
        assert getattr(nemo_recipes, name) is FACTORIES[name]
    exported = {"GPTConfig1_3B", "GPTConfig7B", "GPTConfig13B", "GPTConfig70B", "GPTConfig175B"}
    assert exported <= set(nemo_recipes.__all__)
    for cls_name in exported:
        assert issubclass(getattr(nemo_recipes, cls_name), GPTConfig)


@pytest.mark.parametrize("name", NAMES)
def test_factory_builds_offline_with_defaults(name, no_network):
    recipe = FACTORIES[name]()
    assert isinstance(recipe, run.Partial)
    assert recipe.__fn_or_cls__ is pretrain
    assert set(recipe.__arguments__) == {"model", "trainer", "data", "optim", "log", "resume"}
    assert no_network == []


@pytest.mark.parametrize("name", NAMES)
def test_parts_build_into_nemo_objects_with_the_table_values(name, no_network):
    spec = RECIPES[name]
    recipe = FACTORIES[name]()

    # Megatron-Core refuses the RoPE rows' fused RoPE without Transformer Engine (as NeMo's own Llama3Config8B): on
    # this machine the config builds with the CPU layer's model settings, as a smoke run builds it
    if spec.num_moe_experts is not None:  # Transformer Engine's fused permutation, which Megatron-Core refuses without
        recipe.model.config.moe_permute_fusion = False  # TE; the CPU layer's MoE settings are issue 45 item 4's
    config = fdl.build(cpu_compat.cpu_model_settings(recipe.model.config))
    assert type(config) is CONFIG_CLASSES[name]
    assert (
        config.num_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.num_query_groups,
        config.ffn_hidden_size,
        config.seq_length,
    ) == (
        spec.num_layers,
        spec.hidden_size,
        spec.num_attention_heads,
        spec.kv_groups,
        spec.ffn_hidden_size,
        spec.seq_length,
    )
    assert config.recompute_granularity == {"selective": "selective", "full": "full", "none": None}[spec.recompute]

    # Lightning refuses accelerator="gpu" without a GPU; everything else is built as the recipe says.
    recipe.trainer.accelerator = "cpu"
    trainer = fdl.build(recipe.trainer)
    strategy = trainer.strategy
    assert (
        strategy.tensor_model_parallel_size,
        strategy.pipeline_model_parallel_size,
        strategy.context_parallel_size,
    ) == (spec.tensor_parallel, spec.pipeline_parallel, spec.context_parallel)
    assert strategy.sequence_parallel == (spec.tensor_parallel > 1)
    assert strategy.ddp_config.use_distributed_optimizer and strategy.ddp_config.grad_reduce_in_fp32
    assert strategy.ddp_config.overlap_grad_reduce and strategy.ddp_config.overlap_param_gather
    assert (trainer.num_nodes, trainer.num_devices) == (spec.num_nodes, spec.num_gpus_per_node)
    assert trainer.max_steps == spec.train_steps

    optim = fdl.build(recipe.optim)
    assert (optim.config.optimizer, optim.config.adam_beta1, optim.config.adam_beta2) == ("adam", 0.9, 0.95)
    assert (optim.config.weight_decay, optim.config.clip_grad) == (0.1, 1.0)
    assert optim.config.adam_eps == spec.adam_eps  # GPT-3's 1e-8, Llama's 1e-5
    assert optim.config.lr == spec.max_lr and optim.config.bf16
    schedule = optim.lr_scheduler
    assert schedule.min_lr == pytest.approx(spec.min_lr_ratio * spec.max_lr)
    assert schedule.warmup_steps == spec.warmup_steps and schedule.max_steps == spec.train_steps
    assert schedule.constant_steps == spec.train_steps - spec.decay_steps

    data = fdl.build(recipe.data)
    assert type(data).__name__ == "MockDataModule"
    assert (data.seq_length, data.micro_batch_size, data.global_batch_size) == (
        spec.seq_length,
        spec.micro_batch_size,
        spec.global_batch_size,
    )
    assert type(data.tokenizer).__name__ == "NullTokenizer"
    assert type(fdl.build(recipe.log)).__name__ == "NeMoLogger"
    assert type(fdl.build(recipe.resume)).__name__ == "RecipeResume"  # an AutoResume (tests/test_training_resume.py)
    assert no_network == []


@pytest.fixture(scope="module")
def single_rank_megatron():
    """A one-process gloo group and Megatron's parallel state, enough to build Megatron models on the meta device."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from nemo_recipes.smoke_training.launchers import free_port

    # A port free now, and the environment restored afterwards: processes started later in this session (the
    # smoke runs) must not inherit a port this group may still hold.
    saved = {key: os.environ.get(key) for key in ("MASTER_ADDR", "MASTER_PORT")}
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    yield
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.mark.parametrize("name", NAMES)
def test_megatron_model_has_exactly_the_catalog_parameter_count(name, single_rank_megatron):
    # One rank holds the whole model at TP1 PP1; the catalog pads the vocabulary for TP1 too.
    spec = RECIPES[name].replace(tensor_parallel=1, pipeline_parallel=1)
    if spec.num_moe_experts is not None:
        # Two layers (235B-A22B whole is 12,032 expert modules; its count is affine in the layers, and
        # tests/test_moe_nemo.py proves the whole against NeMo's own configs); what the CPU lacks (Transformer
        # Engine's grouped GEMM and permutation, the all-to-all dispatcher's CUDA stream) holds no parameter.
        cpu = dict(moe_token_dispatcher_type="allgather", moe_grouped_gemm=False, moe_permute_fusion=False)
        spec = spec.replace(num_layers=2, expert_parallel=1, pipeline_counts_embedding_and_loss=False, **cpu)
    config = fdl.build(cpu_compat.cpu_model_settings(model_config(spec)))
    config.init_model_with_meta_device = True  # shapes only: 175B parameters, no memory
    config.perform_initialization = False
    model = config.configure_model(fdl.build(parts.tokenizer(spec)), pre_process=True, post_process=True)
    assert sum(p.numel() for p in model.parameters()) == spec.num_parameters


def _megatron_split(name: str) -> str:
    if "linear_qkv." in name or "linear_fc1." in name:
        return "replicated" if "layer_norm" in name else "column"  # TE fuses the norm into the next linear layer
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return "row"
    return "replicated"


@pytest.mark.parametrize("name", ["gpt_1_3b", "llama_8b"])
def test_megatron_layer_has_the_architectures_tensors(name, single_rank_megatron):
    # One family's row each: Megatron's first layer holds the shapes the architecture lists, each split as its
    # Megatron module splits it (linear_qkv and linear_fc1 are ColumnParallelLinear, linear_proj and linear_fc2
    # RowParallelLinear, whose bias is added after the all-reduce; norms are whole). Megatron's own
    # tensor_model_parallel mark is set only where it initialises a weight, which a meta-device build skips.
    spec = RECIPES[name].replace(tensor_parallel=1, pipeline_parallel=1, num_layers=1)
    config = fdl.build(cpu_compat.cpu_model_settings(model_config(spec)))
    config.init_model_with_meta_device = True
    config.perform_initialization = False
    model = config.configure_model(fdl.build(parts.tokenizer(spec)), pre_process=True, post_process=True)
    megatron = sorted((tuple(p.shape), _megatron_split(name)) for name, p in model.decoder.layers[0].named_parameters())
    ours = sorted((t.shape, t.split) for t in Architecture.of(spec).layer_tensors())
    assert megatron == ours


def test_overrides_reach_every_part():
    recipe = nemo_recipes.gpt_7b(
        num_nodes=2,
        tensor_parallel=2,
        micro_batch_size=1,
        global_batch_size=256,
        seq_length=2048,
        max_lr=3e-4,
        name="run7",
        dir="/tmp/out",
    )
    assert recipe.trainer.num_nodes == 2
    assert recipe.trainer.strategy.tensor_model_parallel_size == 2 and recipe.trainer.strategy.sequence_parallel
    assert recipe.model.config.seq_length == recipe.data.seq_length == 2048
    assert (recipe.data.micro_batch_size, recipe.data.global_batch_size) == (1, 256)
    assert recipe.optim.config.lr == 3e-4 and recipe.optim.lr_scheduler.min_lr == pytest.approx(3e-5)
    assert (recipe.log.name, recipe.log.log_dir) == ("run7", "/tmp/out")


def test_factories_take_every_knob_of_the_catalog():
    import inspect

    parameters = inspect.signature(nemo_recipes.gpt_70b).parameters
    # `_positional` first: NeMo-Run hands `gpt_70b(4)` to the first parameter, and the factory refuses it there.
    assert list(parameters)[:3] == ["_positional", "name", "dir"]
    assert set(knob_names()) == set(field_names()) - {"name", "size_label", "default_gpu"}
    assert parameters["num_nodes"].default == 4 and parameters["tensor_parallel"].default == 8


def test_bad_overrides_are_all_reported_with_field_and_fix():
    with pytest.raises(InvalidRecipeError) as error:
        nemo_recipes.gpt_13b(tensor_parallel=3)
    heads = [p for p in error.value.problems if "num_attention_heads=40" in p.message]
    assert len(heads) == 1 and heads[0].field == "tensor_parallel" and "1, 2, 4, 8" in heads[0].fix
    assert {p.field for p in error.value.problems} >= {"world_size", "tensor_parallel"}
    with pytest.raises(InvalidRecipeError, match="did you mean 'tensor_parallel'"):
        nemo_recipes.gpt_13b(tensor_paralel=2)
    with pytest.raises(InvalidRecipeError, match="micro_batch_size='2': must be an integer"):
        nemo_recipes.gpt_13b(micro_batch_size="2")


def test_custom_architecture_starts_from_the_closest_recipe():
    spec = nemo_recipes.closest_recipe(3e9).replace(
        num_layers=16, hidden_size=3072, num_attention_heads=24, ffn_hidden_size=12288
    )
    recipe = nemo_recipes.build_recipe(spec)
    config = fdl.build(recipe.model.config)
    assert (config.num_layers, config.hidden_size, config.num_attention_heads) == (16, 3072, 24)
    # The model config records only what differs from its class, so the edit is visible.
    assert set(recipe.model.config.__arguments__) >= {"num_layers", "hidden_size"}
    # A novel objective keeps the recipe's optimizer and schedule as they are.
    assert fdl.build(parts.optim(spec)).config.lr == spec.max_lr


def test_real_data_blend_and_local_tokenizer_build_without_reading_files(no_network):
    recipe = nemo_recipes.gpt_1_3b(
        data_paths=["/data/web_text_document", "/data/code_text_document"],
        data_weights=[0.7, 0.3],
        tokenizer_path="/models/tok.model",
    )
    assert type(recipe.data).__name__ == "Config" and recipe.data.__fn_or_cls__.__name__ == "PreTrainingDataModule"
    assert recipe.data.paths == [0.7, "/data/web_text_document", 0.3, "/data/code_text_document"]
    assert recipe.data.tokenizer.__fn_or_cls__.__name__ == "SentencePieceTokenizer"
    hf = nemo_recipes.gpt_1_3b(data_paths=["/data/a"], tokenizer_path="/models/gpt2-tokenizer")
    assert hf.data.tokenizer.__fn_or_cls__.__name__ == "AutoTokenizer"
    assert hf.data.paths == [1.0, "/data/a"]


def test_bad_blend_is_refused():
    with pytest.raises(InvalidRecipeError) as error:
        nemo_recipes.gpt_1_3b(data_paths=["/a", "/b"], data_weights=[1.0, -1.0, 2.0])
    assert {p.field for p in error.value.problems} >= {"data_weights"}


def test_real_blend_builds_into_a_pretraining_data_module(tmp_path):
    """Real Megatron indexed files and a real SentencePiece model, made here, reach NeMo's data module."""
    import numpy
    import sentencepiece as spm
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i} about pretraining recipes" for i in range(200)))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "tok"), vocab_size=40, minloglevel=2)
    prefixes = []
    for shard in ("web", "code"):
        prefix = tmp_path / f"{shard}_text_document"
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.int32)
        for i in range(16):
            builder.add_document(torch.arange(i, i + 40, dtype=torch.int32), [40])
        builder.finalize(f"{prefix}.idx")
        prefixes.append(str(prefix))
    recipe = nemo_recipes.gpt_1_3b(
        data_paths=prefixes, data_weights=[3.0, 1.0], tokenizer_path=str(tmp_path / "tok.model"), seq_length=32
    )
    data = fdl.build(recipe.data)
    assert type(data).__name__ == "PreTrainingDataModule"
    assert data.build_kwargs["blend"] == [prefixes, [3.0, 1.0]]
    assert data.tokenizer.vocab_size == 40 and data.seq_length == 32


def test_fp8_builds_anywhere_and_is_refused_at_launch_without_te_or_gpu():
    recipe = nemo_recipes.gpt_7b(precision="fp8")
    plugin = fdl.build(recipe.trainer.plugins)
    assert plugin.dtype_config.fp8 == "hybrid"
    preflight = [c for c in recipe.trainer.callbacks if c.__fn_or_cls__ is Preflight]
    assert len(preflight) == 1 and preflight[0].precision == "fp8"
    # This machine has neither Transformer Engine nor a GPU: the check that runs on the node says so.
    with pytest.raises(InvalidRecipeError) as error:
        fdl.build(preflight[0]).setup(None, None, "fit")
    text = str(error.value)
    assert "Transformer Engine" in text and "CUDA GPU" in text
    assert {p.field for p in error.value.problems} == {"precision"}
    # The rule itself, for the machines we do not have here.
    assert fp8_problems(True, (9, 0), "NVIDIA H100 80GB HBM3") == []
    a100 = fp8_problems(True, (8, 0), "NVIDIA A100-SXM4-80GB")
    assert len(a100) == 1 and "no FP8 tensor cores" in a100[0].message
    # BF16 needs no such check (the checkpoint half of the preflight reads the strategy only).
    trainer = type("Trainer", (), {"strategy": type("Strategy", (), {"async_save": False})()})()
    fdl.build(nemo_recipes.gpt_7b().trainer.callbacks[1]).setup(trainer, None, "fit")


@pytest.mark.parametrize("name", NAMES)
def test_spec_read_back_from_the_partial_equals_the_catalog(name):
    assert spec_from_partial(FACTORIES[name]()) == RECIPES[name]


def test_spec_read_back_sees_edits_made_on_the_partial():
    recipe = nemo_recipes.gpt_70b()
    recipe.trainer.num_nodes = 8
    recipe.trainer.strategy.pipeline_model_parallel_size = 8
    spec = spec_from_partial(recipe)
    assert (spec.num_nodes, spec.pipeline_parallel, Layout.of(spec).dp) == (8, 8, 1)
    assert dataclasses.replace(spec, num_nodes=4, pipeline_parallel=4) == RECIPES["gpt_70b"]


@pytest.mark.parametrize(
    "name, activation",
    [("gpt_7b", "swiglu"), ("llama_8b", "geglu"), ("llama_70b", "gelu")],  # gelu without biases: unfused
)
def test_an_activation_override_survives_export_in_every_format(name, activation, tmp_path):
    """activation_func is a callable: F.silu a Python function, F.gelu a C builtin that NeMo-Run's YAML writer (and
    so its JSON and TOML) could not represent until training/model.py taught it; both come back as themselves."""
    from nemo_recipes.training.model import ACTIVATIONS
    from nemo_recipes.training.serialization import dumps, load
    from nemo_recipes.yaml_files import CONFIG_FORMATS

    overrides = {"activation": activation}
    recipe = FACTORIES[name](**overrides)
    for fmt in CONFIG_FORMATS:
        path = tmp_path / f"recipe.{fmt}"
        path.write_text(dumps(recipe, fmt))
        back = load(str(path))
        assert (back.model.config.activation_func, back.model.config.gated_linear_unit) == ACTIVATIONS[activation]
        assert spec_from_partial(back) == RECIPES[name].replace(**overrides)
    # and Megatron-Core accepts it (it refuses fused bias-GeLU without biases, which gelu on a Llama row has)
    fdl.build(cpu_compat.cpu_model_settings(recipe.model.config))


@pytest.mark.parametrize(
    "target, call, why",
    [
        ("os.system", True, "not a class of the packages"),  # outside the packages: refused before any import
        ("shutil.rmtree", False, "not an object of the packages"),  # not even as a reference
        ("planted_on_import.Anything", True, "not a class of the packages"),  # importing it would run its code
        ("nemo_recipes.yaml_files.write_atomic", True, "is a function, not a class"),  # inside, but it writes files
        ("torch.hub.load", True, "not a class of the packages"),  # torch only as a value (dtypes, activations)
        ("nemo.lightning.io.load_context", True, "is a function, not a class"),
        ("os.system; x", True, "not a class of the packages"),
    ],
)
def test_a_loaded_file_names_only_classes_of_the_recipe_packages(tmp_path, monkeypatch, target, call, why):
    """A recipe file is untrusted: a `_target_` outside NeMo, Megatron-Core, Lightning, nemo-recipes and datetime
    (or a function inside them, which building the recipe would call) is refused before anything is imported."""
    from nemo_recipes.errors import InvalidInputError
    from nemo_recipes.training.serialization import dumps, load

    marker = tmp_path / "ran"
    (tmp_path / "planted_on_import.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Anything: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import yaml

    document = yaml.safe_load(dumps(FACTORIES["gpt_1_3b"](), "yaml"))
    document["trainer"]["planted"] = {"_target_": target, "_call_": call, "command": f"touch {marker}"}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(InvalidInputError) as refused:
        load(str(path))
    assert f"_target_={target!r}" in str(refused.value) and why in str(refused.value), str(refused.value)
    assert not marker.exists()


def test_a_loaded_file_is_read_by_the_bounded_reader(tmp_path):
    """Nested aliases (a few hundred bytes that expand to billions of values) are refused, not expanded."""
    from nemo_recipes.errors import InvalidInputError
    from nemo_recipes.training.serialization import load

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "recipe.yaml"
    path.write_text("\n".join(lines) + "\n_target_: nemo.collections.llm.api.pretrain\n")
    with pytest.raises(InvalidInputError, match="file="):
        load(str(path))
