"""The table of truth: every family's rows (`families/`: the five GPT recipes of the seed, three Llama-3-shaped ones,
two Qwen3 dense ones, two Mixtral and two Qwen3-MoE Mixtures of Experts) as `RecipeSpec` rows, and every value a
recipe needs.

Plain data, standard library only (no nemo, torch, megatron or nemo_run), so that listing recipes, planning and the
fast CLI verbs answer at once. Everything else (NeMo objects, executors, the planner) reads its numbers from here.

The seed (`megatron-recipes.txt`, "Common Model Configurations") gives layers, hidden, heads, TP, PP, micro batch,
global batch and sequence length of the GPT rows. Every other value is a choice, and `SOURCES` (GPT rows and field
defaults) and each family's `sources` (its rows) say where each comes from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from dataclasses import replace as replace_fields
from typing import Any, Literal, Optional

from nemo_recipes import budget
from nemo_recipes.errors import InvalidInputError, Problem, did_you_mean
from nemo_recipes.families import DEFAULT as DEFAULT_FAMILY
from nemo_recipes.families import REGISTRY, Architecture, family_of, get_family
from nemo_recipes.families.blocks import channels_per_head
from nemo_recipes.recipe_checks import (  # noqa: F401  (re-exported: the catalog's names for the checks and bounds)
    COUNT_MAX,
    DATASET_SUFFIXES,
    INT64_MAX,
    INT_BOUNDS,
    MAX_NAME_BYTES,
    MINUTES_PER_YEAR,
    data_problems,
    field_types,
    is_finite,
    plain_name_problems,
    type_problems,
)
from nemo_recipes.recipe_fields import RECIPE_FIELDS, default_sources

Precision = Literal["bf16", "fp16", "fp8", "fp8_tensorwise", "fp8_blockwise", "mxfp8"]
#: Each FP8 precision -> Transformer Engine's scaling recipe, as NeMo 2.7.3's presets set `fp8_recipe`
#: (llm/recipes/precision/mixed_precision.py): delayed scaling (bf16_with_fp8_mixed), per-tensor current scaling
#: (bf16_with_fp8_current_scaling_mixed: the published tables' "FP8-CS"), 128 x 128 / 1 x 128 blockwise scaling
#: (bf16_with_fp8_subchannel_scaling_mixed: DeepSeek-V3's), MXFP8 with 32-element blocks (bf16_with_mxfp8_mixed:
#: "FP8-MX", Blackwell only).
FP8_RECIPES: dict[str, str] = {
    "fp8": "delayed",
    "fp8_tensorwise": "tensorwise",
    "fp8_blockwise": "blockwise",
    "mxfp8": "mxfp8",
}
Recompute = Literal["none", "selective", "full"]
PositionEmbedding = Literal["learned_absolute", "rope"]
Normalization = Literal["LayerNorm", "RMSNorm"]
# gelu: GPT-3's MLP. swiglu: gated linear unit with SiLU (Llama). geglu: gated linear unit with GELU, what Megatron-Core
# builds from gated_linear_unit=True alone (its activation_func defaults to GELU).
Activation = Literal["gelu", "geglu", "swiglu"]
# Megatron-Core's router and dispatcher choices that this stack builds (the 'flex' dispatcher needs DeepEP, and
# 'global_aux_loss' is newer than what NeMo 2.7.3's recipes use).
RouterScore = Literal["softmax", "sigmoid"]
LoadBalancing = Literal["aux_loss", "seq_aux_loss", "sinkhorn", "none"]
Dispatcher = Literal["allgather", "alltoall"]

#: The default vocabulary: GPT-2's byte-level BPE (Radford et al. 2019), the tokenizer of GPT-3 and Megatron's GPT
#: examples.
DEFAULT_VOCAB_SIZE = 50257


@dataclass(frozen=True, kw_only=True)
class RecipeSpec:
    """Everything a GPT pretraining recipe needs, as plain values. Flat on purpose: each field is also a keyword of
    the recipe factories (`gpt_70b(tensor_parallel=4)`) and a key of `RecipeSpec.replace`."""

    name: str
    size_label: str

    # Architecture. Defaults are GPT-3's (learned positions, LayerNorm, GELU, biases, tied embeddings); the Llama
    # rows state RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases and an untied output layer.
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    seq_length: int
    num_query_groups: Optional[int] = None
    kv_channels: Optional[int] = None
    vocab_size: int = DEFAULT_VOCAB_SIZE
    make_vocab_size_divisible_by: int = 128
    position_embedding_type: PositionEmbedding = "learned_absolute"
    rotary_base: int = 10000
    rotary_percent: float = 1.0
    normalization: Normalization = "LayerNorm"
    norm_epsilon: float = 1e-5
    qk_layernorm: bool = False  # a norm of each head's queries and keys before RoPE (Megatron-Core's qk_layernorm)
    # Multi-latent attention (DeepSeek-V2/V3) in place of multi-head attention when kv_lora_rank is set; a model with
    # MLA states all five, Megatron-Core's MLATransformerConfig names and defaults.
    q_lora_rank: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    # Multi-token prediction (DeepSeek-V3's MTP module): extra layers that predict further tokens during training.
    mtp_num_layers: Optional[int] = None
    mtp_loss_scaling_factor: Optional[float] = None
    activation: Activation = "gelu"
    add_bias_linear: bool = True
    share_embeddings: bool = True
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    # Mixture of Experts (`expert_fields`): Megatron-Core's names and defaults; a dense model leaves them so.
    num_moe_experts: Optional[int] = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: Optional[int] = None
    moe_shared_expert_intermediate_size: Optional[int] = None
    moe_router_score_function: RouterScore = "softmax"
    moe_router_pre_softmax: bool = False
    moe_router_load_balancing_type: LoadBalancing = "aux_loss"
    moe_aux_loss_coeff: float = 0.0
    moe_router_enable_expert_bias: bool = False
    moe_expert_capacity_factor: Optional[float] = None
    moe_token_dispatcher_type: Dispatcher = "allgather"
    moe_grouped_gemm: bool = False
    moe_permute_fusion: bool = False
    # DeepSeek-style routing (`routing_fields`): group-limited, scaled, its bias's rate, leading dense layers.
    moe_router_num_groups: Optional[int] = None
    moe_router_group_topk: Optional[int] = None
    moe_router_topk_scaling_factor: Optional[float] = None
    moe_router_bias_update_rate: float = 1e-3
    moe_first_dense_layers: int = 0

    # Parallelism.
    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int = 1
    virtual_pipeline: Optional[int] = None
    sequence_parallel: Optional[bool] = None
    pipeline_counts_embedding_and_loss: bool = False
    pipeline_first_stage_layers: Optional[int] = None
    pipeline_last_stage_layers: Optional[int] = None
    expert_parallel: int = 1
    expert_tensor_parallel: Optional[int] = None
    moe_imbalance: float = 1.0

    # Batch.
    micro_batch_size: int
    global_batch_size: int

    # Precision and memory.
    precision: Precision = "bf16"
    recompute: Recompute = "selective"
    recompute_num_layers: Optional[int] = None
    distributed_optimizer: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: Optional[bool] = None

    # Optimizer: AdamW.
    max_lr: float
    min_lr_ratio: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    weight_decay: float = 0.1
    clip_grad: float = 1.0

    # Schedule, in tokens so that it survives a change of batch or sequence; steps are derived.
    warmup_tokens: int = 375_000_000
    decay_tokens: int = 260_000_000_000
    train_tokens: int = 300_000_000_000

    # Checkpointing: whichever interval comes first; the end-of-training checkpoint always carries the optimizer.
    checkpoint_every_steps: Optional[int] = 1000
    checkpoint_every_minutes: Optional[float] = 15.0
    checkpoint_async: bool = True

    # Data: empty paths mean mock data with a NullTokenizer (no download).
    data_paths: tuple[str, ...] = ()
    data_weights: tuple[float, ...] = ()
    # Or a budget per path, which decides the weights (`budget`): epochs of each source, or tokens of each source.
    data_epochs: tuple[float, ...] = ()
    data_tokens: tuple[int, ...] = ()
    tokenizer_path: Optional[str] = None
    # Initial weights: a checkpoint (`hf import`'s, or another run's) whose model state the run starts from.
    restore_from: Optional[str] = None

    # The smallest cluster that holds one model replica, on the GPU the defaults are checked against.
    num_nodes: int = 1
    num_gpus_per_node: int = 8
    default_gpu: str = "h100-80gb"

    def __post_init__(self) -> None:
        for name in ("data_paths", "data_weights", *budget.FIELDS):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        problems = type_problems(self)
        if problems:
            raise InvalidInputError(problems, context=f"recipe {self.name!r}")

    # ---- derived values: computed here, never written twice ----

    @property
    def sequence_parallel_enabled(self) -> bool:
        """Sequence parallelism is on whenever TP > 1 unless switched off explicitly."""
        if self.sequence_parallel is None:
            return self.tensor_parallel > 1
        return self.sequence_parallel

    @property
    def tp_comm_overlap_enabled(self) -> bool:
        """TP communication overlap is asked for whenever TP > 1 with sequence parallelism (the only case Transformer
        Engine's userbuffers overlap) unless switched off; the planner and the job's callback add the conditions of
        the machine (Transformer Engine, a Hopper or newer GPU)."""
        wanted = True if self.tp_comm_overlap is None else self.tp_comm_overlap
        return wanted and self.tensor_parallel > 1 and self.sequence_parallel_enabled

    @property
    def input_paths(self) -> list[tuple[str, str]]:
        """(field, path) of every file or directory the recipe reads: each data prefix's .bin and .idx, the
        tokenizer, the checkpoint it restores from; what no verb may write over (`user_paths.output_problems`)."""
        found = [("data_paths", f"{p}{suffix}") for p in self.data_paths for suffix in (".bin", ".idx")]
        found += [(name, path) for name in ("tokenizer_path", "restore_from") if (path := getattr(self, name))]
        return found

    @property
    def kv_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Channels per attention head: kv_channels, or hidden / heads as Megatron-Core derives it when unset."""
        return channels_per_head(self.hidden_size, self.num_attention_heads, self.kv_channels)

    @property
    def gated_linear_unit(self) -> bool:
        """Megatron-Core's gated_linear_unit, derived from `activation` (read-only: the activation says which gate)."""
        return self.activation != "gelu"

    @property
    def family(self) -> str:
        """The name of the family whose module lists this row (`families.registry.family_of`), which names the model
        config class (`config_class_name`)."""
        return family_of(self.name)

    @property
    def expert_tensor_parallel_size(self) -> int:
        """ETP as Megatron-Core takes it: the field, or TP when unset (parallel_state.initialize_model_parallel)."""
        return self.expert_tensor_parallel or self.tensor_parallel

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses (a Mixture of Experts: its top-k experts'); a dense model's total."""
        return Architecture.of(self).active_parameters

    @property
    def fp8(self) -> bool:
        """Whether the transformer blocks' GEMMs run in FP8 (any of `FP8_RECIPES`)."""
        return self.precision in FP8_RECIPES

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.num_gpus_per_node

    @property
    def padded_vocab_size(self) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP."""
        multiple = self.make_vocab_size_divisible_by * self.tensor_parallel
        return int(math.ceil(self.vocab_size / multiple) * multiple)

    @property
    def min_lr(self) -> float:
        return self.max_lr * self.min_lr_ratio

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length

    @property
    def warmup_steps(self) -> int:
        return _steps(self.warmup_tokens, self.tokens_per_step)

    @property
    def decay_steps(self) -> int:
        return _steps(self.decay_tokens, self.tokens_per_step)

    @property
    def train_steps(self) -> int:
        return _steps(self.train_tokens, self.tokens_per_step)

    @property
    def constant_lr_steps(self) -> int:
        """Steps at min LR after the cosine decay ends (NeMo's CosineAnnealing `constant_steps`): the schedule the job
        runs and the smoke judge expects."""
        return max(0, self.train_steps - self.decay_steps)

    @property
    def init_method_std(self) -> float:
        """'Small init' sqrt(2 / (5 h)) (Nguyen & Salazar 2019, used by GPT-NeoX); 0.0057 at h=12288, close to
        the 0.006 of Megatron-LM's GPT-3 175B example."""
        return round(math.sqrt(2.0 / (5.0 * self.hidden_size)), 6)

    @property
    def num_parameters(self) -> int:
        return parameter_count(self)

    # ---- changing a recipe ----

    def replace(self, **overrides: Any) -> "RecipeSpec":
        """A copy with `overrides`; unknown keys and wrong types are all reported in one InvalidInputError."""
        known = field_names()
        problems = [
            _RETIRED_FIELDS[key](value)
            if key in _RETIRED_FIELDS
            else Problem(
                key,
                value,
                f"unknown recipe field{did_you_mean(key, known)}.",
                f"use one of the fields listed by `nemo-recipes show {self.name}`.",
            )
            for key, value in overrides.items()
            if key not in known
        ]
        valid = {k: v for k, v in overrides.items() if k in known}
        try:
            changed = replace_fields(self, **valid)
        except InvalidInputError as error:
            problems += error.problems
        if problems:
            raise InvalidInputError(problems, context=f"recipe {self.name!r}")
        return changed

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _gated_linear_unit_retired(value: Any) -> Problem:
    return Problem(
        "gated_linear_unit",
        value,
        "is no recipe field: the activation decides the gate. Megatron-Core's gated_linear_unit=True alone builds "
        "GeGLU, not Llama's SwiGLU, because its activation_func stays GELU unless set to SiLU.",
        "set activation=swiglu (gated linear unit with SiLU, as Llama), activation=geglu (gated with GELU), or "
        "activation=gelu (no gate, as GPT-3).",
    )


# Keys that were recipe fields once, or that Megatron users reach for, each with its own explanation.
_RETIRED_FIELDS = {"gated_linear_unit": _gated_linear_unit_retired}


def parameter_count(spec: RecipeSpec) -> int:
    """Exact parameter count of the model NeMo builds for `spec` (Megatron-Core GPTModel, padded vocabulary): the
    family architecture's count (`families.architecture`), which every other count reads too."""
    return Architecture.of(spec).num_parameters


def _steps(tokens: int, tokens_per_step: int) -> int:
    return max(1, math.ceil(tokens / tokens_per_step))


# ---- the table ----

#: Every family's rows (each family module owns its rows and the sources of their values), in the families' order.
RECIPES: dict[str, RecipeSpec] = {
    name: RecipeSpec(name=name, **values) for family in REGISTRY.values() for name, values in family.rows.items()
}

SEED_COLUMNS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "tensor_parallel",
    "pipeline_parallel",
    "micro_batch_size",
    "global_batch_size",
    "seq_length",
)

SEED = "seed table (megatron-recipes.txt, Common Model Configurations)"
#: Where the GPT rows' own values come from (the fields without a default); the Llama rows' are `families.llama`'s.
GPT_ROW_SOURCES: dict[str, str] = {
    **{column: SEED for column in SEED_COLUMNS},
    "ffn_hidden_size": "4 x hidden, as in GPT-3 (Brown et al. 2020, Sec. 2.1) and Megatron's GPT examples",
    "max_lr": "GPT-3 paper Table 2.1 (1.3B 2.0e-4, 6.7B 1.2e-4, 13B 1.0e-4, 175B 0.6e-4); 70B: 0.8e-4, between the "
    "13B and 175B rows on a log-parameter scale (0.75e-4) rounded towards the 13B value, since our 70B row "
    "has 65B parameters",
}
#: Field -> where its value comes from, for the GPT rows and every field default (`recipe_fields`: each field's
#: source is declared there, with its bounds and NeMo path).
SOURCES: dict[str, str] = {**GPT_ROW_SOURCES, **default_sources()}

#: Recipe name prefix -> the family's display name, which also prefixes its NeMo config classes (the family modules
#: own them: `nemo_recipes.families`).
FAMILIES: dict[str, str] = {prefix: family.display_name for prefix, family in REGISTRY.items()}


def source(spec: RecipeSpec, field: str) -> str:
    """Where the value of `field` in the table row `spec` comes from."""
    return get_family(spec.family).sources.get(field) or SOURCES.get(field, "")


#: Each derived value and how it is derived; `plan.layout.derived_values(spec)` gives their values (DP and gradient
#: accumulation come from the layout, the rest are properties of RecipeSpec).
DERIVED_SOURCES: dict[str, str] = {
    "sequence_parallel_enabled": "on when TP > 1 unless sequence_parallel is set",
    "tp_comm_overlap_enabled": "on when TP > 1 with sequence parallelism unless tp_comm_overlap is False",
    "data_parallel_size": "world size / (TP x PP x CP)",
    "grad_accumulation_steps": "global batch / (micro batch x DP)",
    "padded_vocab_size": "vocabulary padded to a multiple of 128 x TP (NeMo's get_vocab_size)",
    "head_dim": "kv_channels, or hidden / heads when unset",
    "gated_linear_unit": "on for activation swiglu or geglu (Megatron-Core's gated_linear_unit)",
    "min_lr": "max LR x min_lr_ratio",
    "warmup_steps": "warmup tokens / (global batch x sequence), rounded up",
    "decay_steps": "decay tokens / (global batch x sequence), rounded up",
    "train_steps": "train tokens / (global batch x sequence), rounded up",
    "init_method_std": "sqrt(2 / (5 x hidden)), 'small init' (Nguyen & Salazar 2019; GPT-NeoX)",
    "num_parameters": "exact count of the model NeMo builds (padded vocabulary; GQA, gating, biases, tied or "
    "untied output layer, learned or rotary positions as the row says)",
}


def not_a_spec(value: Any, field: str = "spec") -> list[Problem]:
    """The problem of passing something else where a RecipeSpec belongs (the Python API's wrong types)."""
    if isinstance(value, RecipeSpec):
        return []
    return [
        Problem(
            field,
            value,
            "must be a RecipeSpec.",
            "pass nemo_recipes.get_recipe(name), or a RecipeSpec made from one with .replace().",
        )
    ]


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(RecipeSpec))


def fields_of(spec: RecipeSpec) -> tuple[str, ...]:
    """The fields that belong to `spec`, in table order: every field, but the expert ones (`recipe_fields`'
    `experts_only`) only in a recipe with experts, so that a dense recipe reads as it always did (`show`, `diff`)."""
    return tuple(f.name for f in RECIPE_FIELDS if f.applies(spec))


def config_class_name(spec: RecipeSpec) -> str:
    """GPTConfig7B for gpt_7b, GPTConfig1_3B for gpt_1_3b, LlamaConfig70B for llama_70b: the name of the recipe's NeMo
    model config class (nemo_recipes.training.model), which NeMo-Run writes as the config's target. The family's
    display name keeps GPT 70B and Llama 70B apart; a label's dots and dashes become underscores
    (Qwen3MoEConfig30B_A3B)."""
    return FAMILIES[spec.family] + "Config" + spec.size_label.replace(".", "_").replace("-", "_")


def recipe_names() -> tuple[str, ...]:
    return tuple(RECIPES)


def get_recipe(name: str) -> RecipeSpec:
    """The table row called `name`, or an error listing the known names."""
    if not isinstance(name, str):
        raise InvalidInputError(
            [Problem("recipe", name, "must be a recipe name (a string).", f"use one of: {', '.join(RECIPES)}.")]
        )
    try:
        return RECIPES[name]
    except KeyError:
        raise InvalidInputError(
            [
                Problem(
                    "recipe",
                    name,
                    f"unknown recipe{did_you_mean(name, RECIPES)}.",
                    f"use one of: {', '.join(RECIPES)}.",
                )
            ]
        ) from None


def closest_recipe(num_parameters: float, family: str = DEFAULT_FAMILY) -> RecipeSpec:
    """The recipe of `family` (a name in `families.REGISTRY`) whose parameter count is closest to `num_parameters` on
    a log scale. The default family by default (its values are the field defaults): a custom shape takes the rest of
    its choices from it, and another family's row would give it choices (RoPE, SwiGLU, query groups) it did not ask
    for."""
    problems = []
    if not is_finite(num_parameters) or not num_parameters > 0:
        problems.append(
            Problem(
                "num_parameters",
                num_parameters,
                "must be a positive, finite number.",
                "give a parameter count such as 30e9.",
            )
        )
    if family not in FAMILIES:
        problems.append(Problem("family", family, "unknown recipe family.", f"use one of: {', '.join(FAMILIES)}."))
    if problems:
        raise InvalidInputError(problems)
    # Compared as logarithms, so that no ratio of two counts can overflow or vanish.
    target = math.log(num_parameters)
    rows = [spec for spec in RECIPES.values() if spec.family == family]
    return min(rows, key=lambda s: abs(math.log(s.num_parameters) - target))
