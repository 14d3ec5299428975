"""Tier (b): the DeepSeek-V3 row against NeMo 2.7.3's own DeepSeekV3Config and deepseek_v3 recipe, on the CPU.

The counts are those of the model NeMo builds from its own config on the meta device. Multi-latent attention does
not build here as shipped (no Transformer Engine): two stand-ins, neither of which holds a parameter, let it build
for counting only: Megatron-Core's local attention core is given MLA's k_channels/v_channels and drops them (the
softmax core has no weights), and YaRN's table is built on the CPU (`torch.cuda.current_device()`, a buffer). A
model's count is affine in its expert layers, so NeMo's config built with its 3 dense layers and 1, then 2 expert
layers (and the recipe's MTP layer) gives the full model's exactly (a full build of 58 x 256 expert modules takes
half a minute; it gave the same 682,636,472,320). Our config class equals NeMo's recipe's in every field but those
named with their reason, and NeMo's own `deepseek_v3` factory stays reachable beside ours."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("nemo.collections.llm", reason="NeMo is not installed (tier b)")

import fiddle as fdl  # noqa: E402
import torch  # noqa: E402
from megatron.core.transformer.dot_product_attention import DotProductAttention  # noqa: E402
from nemo.collections.common.tokenizers.null_tokenizer import NullTokenizer  # noqa: E402
from nemo.collections.llm.gpt.model.deepseek import DeepSeekV3Config  # noqa: E402
from nemo.collections.llm.recipes import deepseek_v3  # noqa: E402
from test_catalog_nemo_counts import CPU  # noqa: E402
from test_deepseek import ACTIVE_WITH_MTP, ACTIVE_WITHOUT_MTP, NAME, WITH_MTP, WITHOUT_MTP  # noqa: E402
from test_training_objects import single_rank_megatron  # noqa: E402, F401  (the one-rank process group fixture)

from nemo_recipes.catalog import RECIPES  # noqa: E402
from nemo_recipes.smoke_training import cpu_compat  # noqa: E402
from nemo_recipes.training.model import model_config  # noqa: E402

pytestmark = pytest.mark.nemo
#: What the CPU lacks (Transformer Engine's grouped GEMM and fused permutation, the all-to-all's CUDA stream, the
#: shared expert's overlap stream, Apex's fused weight-gradient accumulation); no parameter changes.
CPU_MOE = dict(CPU, moe_grouped_gemm=False, moe_permute_fusion=False, moe_token_dispatcher_type="allgather",
               moe_shared_expert_overlap=False, gradient_accumulation_fusion=False)  # fmt: skip


def _built(expert_layers: int, monkeypatch) -> torch.nn.Module:
    original = DotProductAttention.__init__

    def without_mla_channels(self, *args, k_channels=None, v_channels=None, **kwargs):
        original(self, *args, **kwargs)

    monkeypatch.setattr(DotProductAttention, "__init__", without_mla_channels)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    layers = 3 + expert_layers
    config = DeepSeekV3Config(num_layers=layers, moe_layer_freq=[0] * 3 + [1] * expert_layers, mtp_num_layers=1,
                              mtp_loss_scaling_factor=0.1, **CPU_MOE)  # fmt: skip
    config.init_model_with_meta_device = True
    config.use_cpu_initialization = True
    config.perform_initialization = False
    tokenizer = NullTokenizer(vocab_size=RECIPES[NAME].vocab_size - 1)  # NullTokenizer adds an end-of-document id
    with torch.device("meta"):
        return config.configure_model(tokenizer, pre_process=True, post_process=True)


@pytest.mark.usefixtures("single_rank_megatron")
def test_the_row_counts_what_nemo_builds_from_its_own_deepseek_v3_config(monkeypatch):
    spec = RECIPES[NAME]
    one, two = _built(1, monkeypatch), _built(2, monkeypatch)
    count = lambda model, mtp: sum(p.numel() for n, p in model.named_parameters() if n.startswith("mtp.") == mtp)  # noqa: E731
    per_expert_layer = count(two, False) - count(one, False)
    without = count(one, False) + 57 * per_expert_layer
    mtp = count(one, True)
    # Active: the experts a token skips, counted on Megatron's own first expert module of an expert layer.
    expert = sum(p.numel() for p in one.decoder.layers[3].mlp.experts.local_experts[0].parameters())
    idle = (spec.num_moe_experts - spec.moe_router_topk) * expert
    assert (without, without - 58 * idle) == (WITHOUT_MTP, ACTIVE_WITHOUT_MTP)
    assert (without + mtp, without + mtp - 59 * idle) == (WITH_MTP, ACTIVE_WITH_MTP)
    assert (spec.num_parameters, spec.active_parameters) == (WITH_MTP, ACTIVE_WITH_MTP)
    # Megatron's names of multi-latent attention's tensors are the block's (local spec: the latents' norms apart).
    names = {
        n.removeprefix("decoder.layers.0.") for n, _ in one.named_parameters() if n.startswith("decoder.layers.0.")
    }
    assert {"self_attention.linear_q_down_proj.weight", "self_attention.q_layernorm.weight",
            "self_attention.linear_kv_up_proj.weight", "input_layernorm.weight"} <= names  # fmt: skip


#: The fields in which our config differs from NeMo's deepseek_v3 recipe's on purpose.
DIFFERENT = {
    # The catalog's one initialisation rule, sqrt(2 / 5h) = 0.00747, for every row (NeMo's DeepSeekConfig: 0.006),
    # and the initialisers Megatron derives from it.
    "init_method_std", "init_method", "output_layer_init_method", "embedding_init_method",
    "embedding_init_method_std",
    # 129,280 = 256 x 505, never padded (NeMo's 1280 pads to 130,560 at the recipe's TP 2): families/deepseek.py.
    "make_vocab_size_divisible_by",
    # NeMo's recipe recomputes MLA's up projections and the norms; the catalog's `selective` is Megatron-Core's
    # default (core_attn), which the planner models.
    "recompute_modules",
    # functools.partial(gpt_data_step, use_mtp=True) on both sides: partials compare by identity.
    "data_step_fn",
}  # fmt: skip


def test_the_built_config_is_nemos_deepseek_v3_recipe_config_in_every_other_field():
    def on_cpu(config):
        config = cpu_compat.cpu_model_settings(config)
        config.moe_permute_fusion = False  # Megatron-Core imports Transformer Engine's fused permutation otherwise
        return fdl.build(config)

    ours, theirs = on_cpu(model_config(RECIPES[NAME])), on_cpu(deepseek_v3.pretrain_recipe().model.config)
    differ = {
        f.name: (getattr(ours, f.name, "missing"), getattr(theirs, f.name))
        for f in dataclasses.fields(theirs)
        if getattr(ours, f.name, "missing") != getattr(theirs, f.name)
    }
    assert set(differ) <= DIFFERENT, {k: v for k, v in differ.items() if k not in DIFFERENT}
    assert isinstance(ours, DeepSeekV3Config) and ours.multi_latent_attention
    assert (ours.data_step_fn.func, ours.data_step_fn.keywords) == (theirs.data_step_fn.func, {"use_mtp": True})
    assert (ours.moe_layer_freq, ours.mtp_num_layers, ours.recompute_granularity) == (
        [0] * 3 + [1] * 58,
        1,
        "selective",
    )


def test_nemos_own_deepseek_v3_factory_still_resolves_beside_ours():
    import nemo_run as run
    from nemo.collections import llm

    import nemo_recipes.training.register  # noqa: F401  (the entry point `nemo llm` loads)

    theirs, ours = (run.cli.resolve_factory(llm.pretrain, name) for name in ("deepseek_v3", NAME))
    assert theirs.__module__ == "nemo.collections.llm.recipes.deepseek_v3"
    assert ours.__module__.startswith("nemo_recipes.")
