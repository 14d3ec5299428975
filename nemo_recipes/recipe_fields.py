"""One entry per recipe field: its section, its help, the source of its default, its bounds and where NeMo keeps it.

The field's type and default are its declaration in `catalog.RecipeSpec` (a typed dataclass, so that mypy and the
factories' signatures read them); everything else about the field is declared here, once, and read by:

- `recipe_checks` (the bounds: each `Limit` with the problem a value beyond it is told);
- the catalog (`catalog.SOURCES`: where each default comes from; the rows' own values have their family's sources);
- the NeMo side (`training/nemo_fields.py`): `nemo` names the NeMo-Run configuration paths the value is written to,
  copied as it is, or through the named `conversion` (activation -> activation_func and gated_linear_unit); the
  recipe's NeMo objects are built from these paths and `training/introspect.py` reads a configuration back through
  the same paths, so neither direction is written by hand;
- whoever compares what was built with the recipe (`fields_in(SECTION)`: the model, precision and optimizer fields
  with their paths).

A field NeMo does not hold says why in `not_in_nemo`; a field without a default of its own (every row gives it) says
so in `source` = None and its rows' sources are their family's. Standard library only: it is on the fast path.
"""

from __future__ import annotations

from typing import Any, Optional

from nemo_recipes.expert_fields import EXPERT_MODEL_FIELDS, EXPERT_PARALLEL_FIELDS
from nemo_recipes.field_limits import (
    COUNT_MAX,
    FRACTION,
    INT64_MAX,
    MINUTES_PER_YEAR,
    NODES_MAX,
    POSITIVE,
    SIZE_MAX,
    Limit,
    RecipeField,
    at_least_one,
    at_most,
    count,
)
from nemo_recipes.latent_fields import LATENT_ATTENTION_FIELDS
from nemo_recipes.routing_fields import ROUTING_FIELDS

#: The sections of the table, in the order of `RecipeSpec`'s fields.
SECTIONS = (
    "row",
    "model",
    "parallel",
    "batch",
    "precision",
    "memory",
    "optimizer",
    "schedule",
    "checkpoint",
    "data",
    "cluster",
)


_ROTARY_PERCENT = (
    "must be in (0, 1]: the share of each head's channels that RoPE rotates.",
    "set rotary_percent to 1.0 (all channels, as Llama) or e.g. 0.5.",
)
_NORM_EPSILON = (
    "must be in (0, 1): the norms add it to the variance they divide by (published: 1e-6 to 1e-5).",
    "set norm_epsilon to e.g. 1e-5 (Megatron-Core's default) or 1e-6.",
)
_CHECKPOINT_MINUTES = (
    f"must be a positive number of minutes up to a year ({MINUTES_PER_YEAR:,}), or unset.",
    "set checkpoint_every_minutes to e.g. 15, or None for no time interval.",
)


def _model(name: str, help: str, source: Optional[str], limits: tuple[Limit, ...] = (), **more: Any) -> RecipeField:
    """A field of Megatron-Core's TransformerConfig under its own name, unless `nemo` says otherwise."""
    more.setdefault("nemo", (f"model.config.{name}",))
    return RecipeField(name, "model", help, source, limits, **more)


_ROW = "names the row; NeMo's model config class is named from it (`catalog.config_class_name`), which is how a "
_ROW += "configuration is read back as its row"
_STEPS = "NeMo counts steps: tokens / (global batch x sequence), rounded up; the steps do not give the tokens back"
_STEP_PATHS = "optim.lr_scheduler.max_steps", "trainer.max_steps"

RECIPE_FIELDS: tuple[RecipeField, ...] = (
    RecipeField(
        "name", "row", "the recipe's name (a directory name: the experiment and its logs)", None, not_in_nemo=_ROW
    ),
    RecipeField("size_label", "row", "the size in the recipe's name (1.3B, 70B)", None, not_in_nemo=_ROW),
    # ---- model: Megatron-Core's TransformerConfig, through NeMo's GPTConfig ----
    _model("num_layers", "transformer layers", None, count(COUNT_MAX)),
    _model("hidden_size", "width of the residual stream", None, count(SIZE_MAX)),
    _model("num_attention_heads", "query heads per layer", None, count(COUNT_MAX)),
    _model("ffn_hidden_size", "width of the MLP's hidden layer", None, count(SIZE_MAX)),
    _model(
        "seq_length",
        "tokens per sequence, of the model and of the data",
        None,
        count(SIZE_MAX),
        nemo=("data.seq_length", "model.config.seq_length"),
    ),
    _model(
        "num_query_groups",
        "key/value heads (grouped-query attention); unset: one per query head",
        "multi-head attention (no GQA), as GPT-3",
        count(COUNT_MAX, optional=True),
    ),
    _model(
        "kv_channels",
        "channels per attention head; unset: hidden / heads",
        "none: hidden / heads per head, as GPT-3 and Megatron-Core's default",
        count(COUNT_MAX, optional=True),
    ),
    _model(
        "vocab_size",
        "the tokenizer's vocabulary (mock data: the NullTokenizer's)",
        "GPT-2 BPE, 50257 tokens (Radford et al. 2019), the GPT-3 tokenizer",
        count(SIZE_MAX),
        nemo=("data.tokenizer",),
        conversion="tokenizer",
    ),
    _model(
        "make_vocab_size_divisible_by",
        "the vocabulary is padded to a multiple of this x TP",
        "Megatron pads the vocabulary to a multiple of 128 x TP (NeMo GPTConfig default)",
        count(SIZE_MAX),
    ),
    _model(
        "position_embedding_type",
        "learned_absolute or rope",
        "learned absolute positions, as GPT-3 and NeMo's GPTConfig",
    ),
    _model(
        "rotary_base",
        "RoPE's base (rope only)",
        "10000, RoPE's base (Su et al. 2021) and Megatron-Core's default; used only with position_embedding_type=rope",
        (at_least_one(), at_most(2**40)),
    ),
    _model(
        "rotary_percent",
        "share of each head's channels RoPE rotates (rope only)",
        "1.0: RoPE rotates every channel of a head (Megatron-Core default); used only with RoPE",
        (Limit(">", 0, *_ROTARY_PERCENT), Limit("<=", 1.0, *_ROTARY_PERCENT)),
    ),
    _model("normalization", "LayerNorm or RMSNorm", "LayerNorm, as GPT-3 and NeMo's GPTConfig"),
    _model(
        "norm_epsilon",
        "the epsilon every norm adds to the variance it divides by",
        "1e-5, Megatron-Core's layernorm_epsilon default, as NeMo's GPTConfig and Llama3Config",
        (Limit(">", 0, *_NORM_EPSILON), Limit("<", 1, *_NORM_EPSILON)),
        nemo=("model.config.layernorm_epsilon",),
    ),
    _model(
        "qk_layernorm",
        "a norm of each head's queries and keys before attention (QK-norm)",
        "off: queries and keys enter attention unnormalised, as GPT-3, Llama 3 and Megatron-Core's default",
    ),
    *LATENT_ATTENTION_FIELDS,
    _model(
        "activation",
        "the MLP: gelu, geglu (gated GELU) or swiglu (gated SiLU)",
        "GELU MLP without gating, as GPT-3 (Megatron-Core's default activation_func)",
        nemo=("model.config.activation_func", "model.config.gated_linear_unit"),
        conversion="activation",
    ),
    _model(
        "add_bias_linear",
        "biases in every linear layer",
        "biases in every linear layer, as GPT-3 and Megatron-Core's default",
    ),
    _model(
        "share_embeddings",
        "the output layer is the input embedding (tied)",
        "input and output embeddings tied, as GPT-3 and NeMo's GPTConfig",
        nemo=("model.config.share_embeddings_and_output_weights",),
    ),
    _model(
        "hidden_dropout",
        "dropout after attention and MLP",
        "0.1, NeMo GPTConfig default; the activation-memory model (Korthikanti et al. 2022) counts its masks",
        FRACTION,
    ),
    _model("attention_dropout", "dropout of the attention probabilities", "0.1, NeMo GPTConfig default", FRACTION),
    *EXPERT_MODEL_FIELDS,
    *ROUTING_FIELDS,
    # ---- parallelism: NeMo's MegatronStrategy ----
    RecipeField(
        "tensor_parallel",
        "parallel",
        "tensor-parallel size (TP)",
        None,
        count(COUNT_MAX),
        nemo=("trainer.strategy.tensor_model_parallel_size",),
    ),
    RecipeField(
        "pipeline_parallel",
        "parallel",
        "pipeline-parallel size (PP)",
        None,
        count(COUNT_MAX),
        nemo=("trainer.strategy.pipeline_model_parallel_size",),
    ),
    RecipeField(
        "context_parallel",
        "parallel",
        "context-parallel size (CP)",
        "1: the seed names no CP; sequences of 2048-4096 fit without it",
        count(COUNT_MAX),
        nemo=("trainer.strategy.context_parallel_size",),
    ),
    RecipeField(
        "virtual_pipeline",
        "parallel",
        "model chunks per pipeline stage (interleaved schedule); unset: one",
        "none: the seed names no interleaving; with DP=1 the micro-batch count (>= 1024) makes the 1F1B "
        "bubble (p-1)/m below 0.7 %",
        count(COUNT_MAX, optional=True),
        nemo=("trainer.strategy.virtual_pipeline_model_parallel_size",),
    ),
    RecipeField(
        "sequence_parallel",
        "parallel",
        "sequence parallelism; unset: on whenever TP > 1",
        "on whenever TP > 1 (Korthikanti et al. 2022: divides the activations outside attention by TP at no "
        "extra communication)",
        nemo=("trainer.strategy.sequence_parallel",),
        conversion="sequence_parallel",
    ),
    RecipeField(
        "pipeline_counts_embedding_and_loss",
        "parallel",
        "the pipeline split counts the input embedding and the loss as one layer each",
        "off: every recipe's layers divide evenly over its stages; on, the pipeline split counts the input "
        "embedding and the loss as one layer each (Megatron-Core account_for_embedding_in_pipeline_split and "
        "account_for_loss_in_pipeline_split, as NeMo's Llama 3.1 405B recipe: 126 layers + 2 over PP 8 x "
        "VP 8)",
        nemo=(
            "trainer.strategy.account_for_embedding_in_pipeline_split",
            "trainer.strategy.account_for_loss_in_pipeline_split",
        ),
        conversion="pipeline_split",
    ),
    RecipeField(
        "pipeline_first_stage_layers",
        "parallel",
        "transformer layers on the first pipeline stage; unset: an even share",
        "none: the stages share the layers evenly (Megatron-Core's default); set, the other stages share the rest "
        "evenly (num_layers_in_first_pipeline_stage, as NeMo's deepseek_v3 recipe: 3 of 61 over PP 16)",
        count(COUNT_MAX, optional=True),
        nemo=("trainer.strategy.num_layers_in_first_pipeline_stage",),
        applies_when="pipeline_first_stage_layers",
    ),
    RecipeField(
        "pipeline_last_stage_layers",
        "parallel",
        "transformer layers on the last pipeline stage (which also runs the output layer); unset: an even share",
        "none: the stages share the layers evenly (Megatron-Core's default); set, the other stages share the rest "
        "evenly (num_layers_in_last_pipeline_stage, as NeMo's deepseek_v3 recipe: 2 of 61 over PP 16)",
        count(COUNT_MAX, optional=True),
        nemo=("trainer.strategy.num_layers_in_last_pipeline_stage",),
        applies_when="pipeline_last_stage_layers",
    ),
    *EXPERT_PARALLEL_FIELDS,
    # ---- batch: the data module ----
    RecipeField(
        "micro_batch_size",
        "batch",
        "sequences per GPU per forward pass",
        None,
        count(COUNT_MAX),
        nemo=("data.micro_batch_size",),
    ),
    RecipeField(
        "global_batch_size",
        "batch",
        "sequences per optimizer step",
        None,
        count(SIZE_MAX),
        nemo=("data.global_batch_size",),
    ),
    # ---- precision ----
    RecipeField(
        "precision",
        "precision",
        "bf16, fp16 or fp8 (Transformer Engine)",
        "BF16 mixed (seed: BF16 or FP8); FP8 is a switch that needs Transformer Engine and Hopper or newer",
        nemo=("trainer.plugins", "trainer.strategy.pipeline_dtype", "optim.config.bf16", "optim.config.fp16"),
        conversion="precision",
    ),
    # ---- memory and communication ----
    RecipeField(
        "recompute",
        "memory",
        "activation recomputation: none, selective (attention core) or full",
        "selective (attention core) recomputation, Korthikanti et al. 2022; the 7B row needs full "
        "recomputation to fit 80 GB at micro batch 2 and sequence 4096 (see `nemo-recipes plan gpt_7b`)",
        nemo=("model.config.recompute_granularity", "model.config.recompute_method"),
        conversion="recompute",
    ),
    RecipeField(
        "recompute_num_layers",
        "memory",
        "layers of each model chunk recomputed in full; unset: all",
        "all layers of a stage when recompute is full",
        count(COUNT_MAX, optional=True),
        nemo=("model.config.recompute_num_layers",),
        conversion="recompute",
    ),
    RecipeField(
        "distributed_optimizer",
        "optimizer",
        "shard the optimizer state over data-parallel ranks",
        "on: shards fp32 master weights and Adam state over DP (Megatron-Core distributed optimizer)",
        nemo=("optim.config.use_distributed_optimizer", "trainer.strategy.ddp.use_distributed_optimizer"),
    ),
    RecipeField(
        "overlap_grad_reduce",
        "memory",
        "overlap the gradient reduce-scatter with the backward pass",
        "on: overlaps the DP gradient reduce-scatter with the backward pass (Megatron-Core)",
        nemo=("trainer.strategy.ddp.overlap_grad_reduce",),
    ),
    RecipeField(
        "overlap_param_gather",
        "memory",
        "overlap the parameter all-gather with the next forward pass (with the distributed optimizer)",
        "on: overlaps the DP parameter all-gather with the next forward pass (Megatron-Core)",
        nemo=("trainer.strategy.ddp.overlap_param_gather",),
        conversion="param_gather",
    ),
    RecipeField(
        "tp_comm_overlap",
        "memory",
        "overlap TP communication with the GEMMs (Transformer Engine); unset: "
        "on whenever TP > 1 with sequence parallelism",
        "auto (on whenever TP > 1 with sequence parallelism): Transformer Engine's userbuffers overlap the TP "
        "all-gathers and reduce-scatters with the GEMMs, as NVIDIA's performance recipes do on H100 and B200 "
        "(NeMo gpt3_175b/llama3_70b pretrain_performance_optimizations, "
        "scripts/performance/llm/pretrain_gpt3_175b.py); the job's callback does nothing without Transformer "
        "Engine, CUDA or a Hopper-or-newer GPU (userbuffers need CUDA multicast)",
        nemo=("trainer.callbacks",),
        conversion="tp_comm_overlap",
    ),
    # ---- optimizer: Megatron-Core's OptimizerConfig (AdamW) ----
    RecipeField(
        "max_lr",
        "optimizer",
        "peak learning rate",
        None,
        (
            POSITIVE,
            Limit(
                "<",
                1,
                "must be below 1: AdamW moves each weight by about max_lr per step, more than the weights' own size.",
                "set max_lr to e.g. 3e-4.",
            ),
        ),
        nemo=("optim.config.lr",),
    ),
    RecipeField(
        "min_lr_ratio",
        "optimizer",
        "the learning rate the decay ends at, as a share of max_lr",
        "min LR = 10 % of max LR, as GPT-3 (cosine decay down to 10 %)",
        FRACTION,
        nemo=("optim.config.min_lr", "optim.lr_scheduler.min_lr"),
        conversion="min_lr",
    ),
    RecipeField(
        "adam_beta1",
        "optimizer",
        "AdamW's beta1",
        "AdamW beta1 0.9 (seed; GPT-3)",
        FRACTION,
        nemo=("optim.config.adam_beta1",),
    ),
    RecipeField(
        "adam_beta2",
        "optimizer",
        "AdamW's beta2",
        "AdamW beta2 0.95 (seed; GPT-3)",
        FRACTION,
        nemo=("optim.config.adam_beta2",),
    ),
    RecipeField(
        "adam_eps",
        "optimizer",
        "AdamW's epsilon",
        "1e-8 (GPT-3 paper, Appendix B)",
        (
            POSITIVE,
            Limit(
                "<",
                1,
                "must be below 1: it would drown the gradient statistics Adam divides by.",
                "set adam_eps to e.g. 1e-8.",
            ),
        ),
        nemo=("optim.config.adam_eps",),
    ),
    RecipeField(
        "weight_decay",
        "optimizer",
        "AdamW's decoupled weight decay",
        "0.1 (GPT-3 paper, Appendix B)",
        (
            Limit(
                ">=",
                0,
                "must be 0 or more (a negative decay grows the weights).",
                "set weight_decay to e.g. 0.1, or 0 for none.",
            ),
        ),
        nemo=("optim.config.weight_decay",),
    ),
    RecipeField(
        "clip_grad",
        "optimizer",
        "gradients are clipped to this global norm",
        "gradient clipping at global norm 1.0 (GPT-3 paper, Appendix B)",
        (POSITIVE,),
        nemo=("optim.config.clip_grad",),
    ),
    # ---- schedule, in tokens; NeMo's is in steps ----
    RecipeField(
        "warmup_tokens",
        "schedule",
        "tokens of linear warmup",
        "linear warmup over the first 375M tokens (GPT-3 paper, Appendix B); steps derived from the batch",
        count(INT64_MAX),
        nemo=("optim.lr_scheduler.warmup_steps",),
        conversion="schedule",
        not_read_back=_STEPS,
    ),
    RecipeField(
        "decay_tokens",
        "schedule",
        "tokens until the cosine decay reaches min LR",
        "cosine decay to min LR over 260B tokens, then constant (GPT-3 paper, Appendix B)",
        count(INT64_MAX),
        nemo=("optim.lr_scheduler.constant_steps",),
        conversion="schedule",
        not_read_back=_STEPS,
    ),
    RecipeField(
        "train_tokens",
        "schedule",
        "tokens the run trains",
        "300B tokens, as GPT-3 (Brown et al. 2020, Table 2.1)",
        count(INT64_MAX),
        nemo=_STEP_PATHS,
        conversion="schedule",
        not_read_back=_STEPS,
    ),
    # ---- checkpointing ----
    RecipeField(
        "checkpoint_every_steps",
        "checkpoint",
        "a checkpoint every this many steps; unset: none by steps",
        "every 1000 steps or 15 minutes, whichever comes first: the step interval bounds the work lost by "
        "fast (small or scaled-down) runs, where 15 minutes is many steps",
        count(INT64_MAX, optional=True),
        nemo=("log.ckpt.every_n_train_steps",),
        conversion="checkpoint_steps",
    ),
    RecipeField(
        "checkpoint_every_minutes",
        "checkpoint",
        "a checkpoint every this many minutes; unset: none by time",
        "every 15 minutes, as NeMo's own pretraining recipes (a 175B step takes seconds)",
        (Limit(">", 0, *_CHECKPOINT_MINUTES), Limit("<=", float(MINUTES_PER_YEAR), *_CHECKPOINT_MINUTES)),
        nemo=("log.ckpt.train_time_interval",),
        conversion="checkpoint_minutes",
    ),
    RecipeField(
        "checkpoint_async",
        "checkpoint",
        "save checkpoints in the background",
        "asynchronous distributed-checkpoint saves, as NeMo's recipes; the job falls back to synchronous "
        "saves (with a warning) where the installed NeMo/Megatron-Core cannot save asynchronously",
        nemo=("trainer.strategy.ckpt_async_save",),
    ),
    # ---- data: Megatron's blend, NeMo's tokenizers ----
    RecipeField(
        "data_paths",
        "data",
        "Megatron .bin/.idx prefixes; empty: mock data",
        "none: mock data with NeMo's NullTokenizer (no download); give Megatron .bin/.idx prefixes for real data",
        nemo=("data.paths",),
        conversion="blend",
    ),
    RecipeField(
        "data_weights",
        "data",
        "one blend weight per path; empty: equal",
        "blend weights, one positive weight per path (equal when empty)",
        nemo=("data.paths",),
        conversion="blend",
    ),
    RecipeField(
        "data_epochs",
        "data",
        "a budget in epochs of each path, instead of weights",
        "none: a budget in epochs of each source instead of data_weights; the weights are epochs x the "
        "source's tokens (its manifest) over their sum, and the sum must be the tokens the run trains",
        nemo=("data.paths",),
        conversion="blend",
    ),
    RecipeField(
        "data_tokens",
        "data",
        "a budget in tokens of each path, instead of weights",
        "none: a budget in tokens of each source instead of data_weights; the weights are tokens over their "
        "sum, which must be the tokens the run trains",
        nemo=("data.paths",),
        conversion="blend",
        not_read_back="the blend holds the weights the tokens give, which are read back as data_weights",
    ),
    RecipeField(
        "tokenizer_path",
        "data",
        "a local Hugging Face tokenizer directory or SentencePiece .model",
        "a local Hugging Face tokenizer directory or SentencePiece .model (no download)",
        nemo=("data.tokenizer",),
        conversion="tokenizer",
    ),
    RecipeField(
        "restore_from",
        "data",
        "a checkpoint whose weights the run starts from",
        "none: freshly initialised weights; a checkpoint directory (`hf import --out`) starts the run from "
        "its weights, with a fresh optimizer and schedule (NeMo's RestoreConfig)",
        nemo=("resume.restore_config.path",),
    ),
    # ---- cluster ----
    RecipeField(
        "num_nodes",
        "cluster",
        "nodes of the run",
        "the smallest node count that holds one model replica (TP x PP GPUs) on 8-GPU nodes",
        count(NODES_MAX),
        nemo=("trainer.num_nodes",),
    ),
    RecipeField(
        "num_gpus_per_node",
        "cluster",
        "GPUs per node",
        "8, as DGX/HGX H100 nodes (TP stays within the NVLink domain)",
        count(COUNT_MAX),
        nemo=("trainer.devices",),
    ),
    RecipeField(
        "default_gpu",
        "cluster",
        "the GPU the planner checks the recipe against",
        "H100 80 GB SXM, the GPU the seed names; defaults are validated against it",
        not_in_nemo="the planner's: NeMo trains on whatever GPU the job runs on",
    ),
)

FIELDS: dict[str, RecipeField] = {f.name: f for f in RECIPE_FIELDS}


def fields_in(*sections: str) -> tuple[RecipeField, ...]:
    """The fields of `sections` in table order: `fields_in('model', 'precision', 'optimizer')` is what a built
    model and optimizer are compared with, each with the NeMo paths it lands on."""
    return tuple(f for f in RECIPE_FIELDS if f.section in sections)


def default_sources() -> dict[str, str]:
    """Field -> where its default comes from, for the fields that have a default."""
    return {f.name: f.source for f in RECIPE_FIELDS if f.source is not None}
