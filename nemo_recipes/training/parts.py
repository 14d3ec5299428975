"""The parts of a recipe, each usable on its own (the seed's 'recipe as a starting point' table):

- `model(spec)` and `model_config(spec)` (in `training.model`): a custom architecture starts from the closest recipe;
- `strategy(spec)` and `trainer(spec)`: parallelism, precision, activation checkpointing, cluster size;
- `optim(spec)`: AdamW with warmup and cosine decay, for a novel objective that keeps the recipe's optimizer;
- `data(spec)`: mock data (no download) or a Megatron blend with a local tokenizer;
- `log(spec, ...)` (with `checkpoint(spec)`) and `resume()`.

Every function returns an unbuilt `run.Config`: building a recipe reads no file, opens no socket and touches no GPU.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Optional

import nemo_run as run
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from nemo import lightning as nl
from nemo.collections.common.tokenizers.null_tokenizer import NullTokenizer
from nemo.collections.llm.gpt.data.mock import MockDataModule
from nemo.collections.llm.gpt.data.pre_training import PreTrainingDataModule
from nemo.lightning.pytorch.optim import CosineAnnealingScheduler, MegatronOptimizerModule
from nemo.utils.exp_manager import TimingCallback

from nemo_recipes import budget
from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.training.checkpoint import RecipeCheckpoint
from nemo_recipes.training.preflight import Preflight

# NeMo's own recipes validate every 2000 steps on 32 batches; we keep that cadence.
VAL_CHECK_INTERVAL = 2000
LIMIT_VAL_BATCHES = 32
LOG_EVERY_N_STEPS = 10


def ddp(spec: RecipeSpec) -> run.Config[DistributedDataParallelConfig]:
    return run.Config(
        DistributedDataParallelConfig,
        check_for_nan_in_grad=True,
        # fp32 gradient reduction: the 6 + 12/DP bytes per parameter that the planner counts.
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=spec.overlap_grad_reduce,
        overlap_param_gather=spec.overlap_param_gather and spec.distributed_optimizer,
        average_in_collective=True,
        use_distributed_optimizer=spec.distributed_optimizer,
    )


def strategy(spec: RecipeSpec) -> run.Config[nl.MegatronStrategy]:
    return run.Config(
        nl.MegatronStrategy,
        tensor_model_parallel_size=spec.tensor_parallel,
        pipeline_model_parallel_size=spec.pipeline_parallel,
        virtual_pipeline_model_parallel_size=spec.virtual_pipeline,
        context_parallel_size=spec.context_parallel,
        sequence_parallel=spec.sequence_parallel_enabled,
        pipeline_dtype=torch.bfloat16 if spec.precision != "fp16" else torch.float16,
        gradient_as_bucket_view=True,
        ckpt_async_save=spec.checkpoint_async,
        ckpt_parallel_load=True,
        ddp=ddp(spec),
    )


def precision(spec: RecipeSpec) -> run.Config[nl.MegatronMixedPrecision]:
    """BF16 mixed by default; FP8 is BF16 plus Transformer Engine's delayed-scaling FP8 GEMMs (hybrid E4M3/E5M2),
    with NeMo's own FP8 settings (recipes/precision/mixed_precision.py)."""
    half = torch.float16 if spec.precision == "fp16" else torch.bfloat16
    config = run.Config(
        nl.MegatronMixedPrecision,
        precision="16-mixed" if spec.precision == "fp16" else "bf16-mixed",
        params_dtype=half,
        pipeline_dtype=half,
        autocast_enabled=False,
        grad_reduce_in_fp32=True,
    )
    if spec.precision == "fp8":
        config.fp8 = "hybrid"
        config.fp8_recipe = "delayed"
        config.fp8_margin = 0
        config.fp8_amax_history_len = 1024
        config.fp8_amax_compute_algo = "max"
        config.fp8_param_gather = True
    return config


def trainer(spec: RecipeSpec, callbacks: Optional[list] = None) -> run.Config[nl.Trainer]:
    return run.Config(
        nl.Trainer,
        accelerator="gpu",
        devices=spec.num_gpus_per_node,
        num_nodes=spec.num_nodes,
        max_steps=spec.train_steps,
        accumulate_grad_batches=1,  # Megatron accumulates itself: GBS / (MBS x DP) micro-batches per step
        limit_val_batches=LIMIT_VAL_BATCHES,
        limit_test_batches=LIMIT_VAL_BATCHES,
        val_check_interval=min(VAL_CHECK_INTERVAL, spec.train_steps),
        log_every_n_steps=LOG_EVERY_N_STEPS,
        use_distributed_sampler=False,
        plugins=precision(spec),
        strategy=strategy(spec),
        callbacks=[run.Config(TimingCallback), run.Config(Preflight, precision=spec.precision), *(callbacks or [])],
    )


def optim(spec: RecipeSpec) -> run.Config[MegatronOptimizerModule]:
    """AdamW (Megatron's 'adam' applies decoupled weight decay) with linear warmup, cosine decay to min LR at
    `decay_tokens`, then constant min LR until the end of training (GPT-3, Appendix B)."""
    config = run.Config(
        OptimizerConfig,
        optimizer="adam",
        lr=spec.max_lr,
        min_lr=spec.min_lr,
        weight_decay=spec.weight_decay,
        bf16=spec.precision in ("bf16", "fp8"),
        fp16=spec.precision == "fp16",
        adam_beta1=spec.adam_beta1,
        adam_beta2=spec.adam_beta2,
        adam_eps=spec.adam_eps,
        clip_grad=spec.clip_grad,
        use_distributed_optimizer=spec.distributed_optimizer,
    )
    schedule = run.Config(
        CosineAnnealingScheduler,
        max_steps=spec.train_steps,
        warmup_steps=spec.warmup_steps,
        constant_steps=spec.constant_lr_steps,
        min_lr=spec.min_lr,
    )
    return run.Config(MegatronOptimizerModule, config=config, lr_scheduler=schedule)


def tokenizer(spec: RecipeSpec) -> run.Config:
    """A tokenizer that never downloads: NullTokenizer for mock data, else the local path the user gives.

    A path ending in `.model` is a SentencePiece model; anything else is a Hugging Face tokenizer directory.
    Nothing is opened here; NeMo reads the path when the job builds its data module.
    """
    if spec.tokenizer_path is None:
        # NullTokenizer adds an end-of-document id after the ids it is given (null_tokenizer.py: vocab_size + 1);
        # one fewer, so that the model's vocabulary is the recipe's (Llama 3's 128,256 is a multiple of 128: one
        # more entry would pad to 128,384, a million parameters per table the catalog does not count)
        return run.Config(NullTokenizer, vocab_size=spec.vocab_size - 1)
    if spec.tokenizer_path.endswith(".model"):
        from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

        return run.Config(SentencePieceTokenizer, model_path=spec.tokenizer_path)
    from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer

    # A tokenizer.json (which `data prepare` takes) as its directory: AutoTokenizer loads directories, not the file.
    path = spec.tokenizer_path
    if os.path.basename(path) == "tokenizer.json":
        path = os.path.dirname(path) or "."
    return run.Config(AutoTokenizer, pretrained_model_name=path, use_fast=True)


def blend(spec: RecipeSpec) -> Any:
    """Megatron's zipped blend [w1, path1, w2, path2, ...]; equal weights when none are given, a budget's weights
    when one is (`nemo_recipes.budget`). Tokens become weights here; epochs need each source's token count, which
    building a recipe does not read: the blend is then a call of `budget.blend_by_epochs`, which the recipe plugin
    replaces by its result before submitting (and the job makes, when it builds its data module without one)."""
    if spec.data_epochs:
        return run.Config(
            budget.blend_by_epochs,
            paths=list(spec.data_paths),
            data_epochs=list(spec.data_epochs),
            train_steps=spec.train_steps,
            global_batch_size=spec.global_batch_size,
            seq_length=spec.seq_length,
        )
    if spec.data_tokens:
        weights = budget.weights_of(spec.data_tokens)
    else:
        weights = spec.data_weights or (1.0,) * len(spec.data_paths)
    return [item for weight, path in zip(weights, spec.data_paths, strict=True) for item in (float(weight), path)]


def data(spec: RecipeSpec) -> run.Config:
    """Sequence length, micro and global batch come from the same spec as the model, so they cannot disagree."""
    common = dict(
        seq_length=spec.seq_length,
        micro_batch_size=spec.micro_batch_size,
        global_batch_size=spec.global_batch_size,
        tokenizer=tokenizer(spec),
    )
    if not spec.data_paths:
        return run.Config(MockDataModule, num_train_samples=spec.train_steps * spec.global_batch_size, **common)
    return run.Config(PreTrainingDataModule, paths=blend(spec), **common)


def checkpoint(spec: RecipeSpec) -> run.Config[RecipeCheckpoint]:
    """Every `checkpoint_every_steps` steps or `checkpoint_every_minutes` minutes, whichever comes first, and at the
    end of training with the optimizer state, so that AutoResume can continue any run, however short."""
    minutes = spec.checkpoint_every_minutes
    return run.Config(
        RecipeCheckpoint,
        save_last=True,
        save_top_k=10,
        every_n_train_steps=spec.checkpoint_every_steps,
        train_time_interval=run.Config(timedelta, minutes=minutes) if minutes else None,
        save_optim_on_train_end=True,
        filename="{model_name}--{val_loss:.2f}-{step}-{consumed_samples}",
    )


def log(spec: RecipeSpec, dir: Optional[str] = None, name: str = "default") -> run.Config[nl.NeMoLogger]:
    return run.Config(
        nl.NeMoLogger,
        ckpt=checkpoint(spec),
        name=name,
        log_dir=dir,
        tensorboard=run.Config(TensorBoardLogger, save_dir="tb_logs", name=name),
    )


def resume(spec: Optional[RecipeSpec] = None) -> run.Config[nl.AutoResume]:
    """Resume from the run's newest finished checkpoint if there is one (see resume.py), else start afresh: from
    `spec.restore_from`'s weights when given (NeMo's AutoResume uses its RestoreConfig only when the run has no
    checkpoint of its own, so a resumed run continues from its own state)."""
    from nemo_recipes.training.resume import RecipeResume

    restore = None
    if spec is not None and spec.restore_from:
        restore = run.Config(
            nl.RestoreConfig,
            path=str(spec.restore_from),
            load_model_state=True,
            load_optim_state=False,
            load_artifacts=False,  # the tokenizer is the recipe's data's; an import has no NeMo context
        )
    return run.Config(RecipeResume, resume_if_exists=True, resume_ignore_no_checkpoint=True, restore_config=restore)
