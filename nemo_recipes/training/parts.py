"""The parts of a recipe, each usable on its own (the seed's 'recipe as a starting point' table):

- `model(spec)` and `model_config(spec)` (in `training.model`): a custom architecture starts from the closest recipe;
- `strategy(spec)` and `trainer(spec)`: parallelism, precision, activation checkpointing, cluster size;
- `optim(spec)`: AdamW with warmup and cosine decay, for a novel objective that keeps the recipe's optimizer;
- `data(spec)`: mock data (no download) or a Megatron blend with a local tokenizer;
- `log(spec, ...)` (with `checkpoint(spec)`) and `resume()`.

Every function returns an unbuilt `run.Config`: building a recipe reads no file, opens no socket and touches no GPU.
"""

from __future__ import annotations

from typing import Optional

import nemo_run as run
from lightning.pytorch.loggers import TensorBoardLogger
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from nemo import lightning as nl
from nemo.collections.llm.gpt.data.mock import MockDataModule
from nemo.collections.llm.gpt.data.pre_training import PreTrainingDataModule
from nemo.lightning.pytorch.optim import CosineAnnealingScheduler, MegatronOptimizerModule
from nemo.utils.exp_manager import TimingCallback

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.training.checkpoint import RecipeCheckpoint
from nemo_recipes.training.nemo_fields import nemo_value, values_under
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
        average_in_collective=True,
        **values_under(spec, "trainer.strategy.ddp"),
    )


def strategy(spec: RecipeSpec) -> run.Config[nl.MegatronStrategy]:
    """Parallel sizes, sequence parallelism, the pipeline split, checkpoint saves: the recipe fields whose NeMo path is
    `trainer.strategy` (`recipe_fields`)."""
    return run.Config(
        nl.MegatronStrategy,
        **values_under(spec, "trainer.strategy"),
        gradient_as_bucket_view=True,
        ckpt_parallel_load=True,
        ddp=ddp(spec),
    )


def precision(spec: RecipeSpec) -> run.Config[nl.MegatronMixedPrecision]:
    """BF16 mixed by default; FP8 is BF16 plus Transformer Engine's delayed-scaling FP8 GEMMs (the precision's
    conversion, `nemo_fields`)."""
    return nemo_value(spec, "trainer.plugins")


def trainer(spec: RecipeSpec, callbacks: Optional[list] = None) -> run.Config[nl.Trainer]:
    """The cluster size, steps, precision plugin and TP overlap callback of the recipe, NeMo's cadence for the rest;
    `callbacks` are added after the recipe's."""
    decided = values_under(spec, "trainer")
    own = decided.pop("callbacks")
    return run.Config(
        nl.Trainer,
        accelerator="gpu",
        **decided,
        accumulate_grad_batches=1,  # Megatron accumulates itself: GBS / (MBS x DP) micro-batches per step
        limit_val_batches=LIMIT_VAL_BATCHES,
        limit_test_batches=LIMIT_VAL_BATCHES,
        val_check_interval=min(VAL_CHECK_INTERVAL, spec.train_steps),
        log_every_n_steps=LOG_EVERY_N_STEPS,
        use_distributed_sampler=False,
        strategy=strategy(spec),
        callbacks=[
            run.Config(TimingCallback),
            run.Config(Preflight, precision=spec.precision),
            *own,
            *(callbacks or []),
        ],
    )


def optim(spec: RecipeSpec) -> run.Config[MegatronOptimizerModule]:
    """AdamW (Megatron's 'adam' applies decoupled weight decay) with linear warmup, cosine decay to min LR at
    `decay_tokens`, then constant min LR until the end of training (GPT-3, Appendix B)."""
    config = run.Config(OptimizerConfig, optimizer="adam", **values_under(spec, "optim.config"))
    schedule = run.Config(CosineAnnealingScheduler, **values_under(spec, "optim.lr_scheduler"))
    return run.Config(MegatronOptimizerModule, config=config, lr_scheduler=schedule)


def tokenizer(spec: RecipeSpec) -> run.Config:
    """A tokenizer that never downloads: NullTokenizer for mock data, else the local path the user gives (the
    tokenizer's conversion, `nemo_fields`)."""
    return nemo_value(spec, "data.tokenizer")


def data(spec: RecipeSpec) -> run.Config:
    """Sequence length, micro and global batch come from the same spec as the model, so they cannot disagree; mock
    data without paths, else Megatron's blend (`nemo_fields.blend`)."""
    decided = values_under(spec, "data")
    if "paths" not in decided:
        return run.Config(MockDataModule, num_train_samples=spec.train_steps * spec.global_batch_size, **decided)
    return run.Config(PreTrainingDataModule, **decided)


def checkpoint(spec: RecipeSpec) -> run.Config[RecipeCheckpoint]:
    """Every `checkpoint_every_steps` steps or `checkpoint_every_minutes` minutes, whichever comes first, and at the
    end of training with the optimizer state, so that AutoResume can continue any run, however short."""
    return run.Config(
        RecipeCheckpoint,
        save_last=True,
        save_top_k=10,
        **values_under(spec, "log.ckpt"),
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
            **values_under(spec, "resume.restore_config"),
            load_model_state=True,
            load_optim_state=False,
            load_artifacts=False,  # the tokenizer is the recipe's data's; an import has no NeMo context
        )
    return run.Config(RecipeResume, resume_if_exists=True, resume_ignore_no_checkpoint=True, restore_config=restore)
