"""A recipe scaled down in shape only, for a smoke training run (standard library only).

What changes: layers, hidden size, heads and query groups (grouped-query attention stays grouped), FFN (same ratio
to hidden), sequence length, vocabulary (and its padding multiple) and batch; the parallel layout is fitted to the
processes at hand; the schedule keeps its shape (warmup, cosine decay, constant tail) over the smoke run's steps.
What stays: everything
else the recipe chose (the architecture: positions and RoPE base, activation, norm, biases, tied or untied
embeddings; precision, recomputation, sequence parallelism, Megatron DDP with the distributed optimizer and its
overlaps, AdamW with the recipe's learning rates, dropout, checkpointing, AutoResume).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from nemo_recipes.catalog import COUNT_MAX, RecipeSpec
from nemo_recipes.counts import divisors
from nemo_recipes.errors import WARNING, InvalidInputError, Problem
from nemo_recipes.families import Architecture
from nemo_recipes.plan import Cluster, validate
from nemo_recipes.plan.data import checked_data
from nemo_recipes.plan.layout import Layout
from nemo_recipes.smoke_training.judge import MIN_STEPS

#: Head dimension, heads and sequence of the scaled-down model: a few hundred thousand parameters, whose steps take
#: a fraction of a second on a CPU core, big enough for the loss to fall visibly within tens of steps.
HEAD_DIM = 16
HEADS = 4
#: A scaled grouped-query model: its hidden size, fewest key/value groups (a group of heads shares one, not all of
#: them) and most heads per group; 8 heads of 16 channels (16 of 8 at TP8) keep it under a million parameters.
GQA_HIDDEN = 128
QUERY_GROUPS = 2
HEADS_PER_GROUP = 4
SEQ_LENGTH = 64
VOCAB_SIZE = 1000
#: The scaled model's padding multiple: Megatron's default (NeMo's GPTConfig). A row's own multiple is chosen for its
#: tokenizer (Qwen3's 1187 leaves 151,936 unpadded), which the smoke run replaces: kept, 1187 x TP would pad 1000
#: tokens to 9,496 rows at TP8, ten times the model.
VOCAB_MULTIPLE = 128
MICRO_BATCH = 2

#: A scaled Mixture of Experts: at most this many experts a layer (Qwen3-MoE's 128 of 24 channels would pass a
#: million parameters), each token routed to at most a quarter of them and at least 2 (top-1 needs another router).
EXPERTS = 8

#: Layout fields a user may set for the smoke run; the rest of the layout is derived from the processes.
LAYOUT_FIELDS = (
    "tensor_parallel",
    "pipeline_parallel",
    "context_parallel",
    "virtual_pipeline",
    "expert_parallel",
    "expert_tensor_parallel",
)


@dataclass(frozen=True)
class SmokeShape:
    """The scaled-down spec and the two phases: train to `stop_step`, stop, resume and train to `steps`."""

    spec: RecipeSpec
    processes: int
    steps: int
    stop_step: int
    full_size: bool
    #: The data's warnings (errors refuse the plan): shown before training (runner.smoke), as `plan` shows them.
    warnings: tuple[Problem, ...] = ()

    @property
    def layout(self) -> str:
        s = self.spec
        return f"TP{s.tensor_parallel} PP{s.pipeline_parallel} CP{s.context_parallel} DP{Layout.of(s).dp}" + (
            f" VP{s.virtual_pipeline}" if s.virtual_pipeline else ""
        )

    @property
    def parallel(self) -> dict[str, Any]:
        """The process groups Megatron should build (as the smoke record reports them)."""
        s = self.spec
        return {
            "tp": s.tensor_parallel,
            "pp": s.pipeline_parallel,
            "cp": s.context_parallel,
            "dp": Layout.of(s).dp,
            "sequence_parallel": s.sequence_parallel_enabled,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "processes": self.processes,
            "steps": self.steps,
            "stop_step": self.stop_step,
            "full_size": self.full_size,
            "layout": self.layout,
            "spec": self.spec.to_dict(),
        }


def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in divisors(n) if d <= max(1, limit))


def fit_layout(spec: RecipeSpec, processes: int, given: dict[str, Any]) -> dict[str, Any]:
    """TP, then PP, as large as the recipe's and as the processes allow; the rest is data parallelism."""
    cp = given.get("context_parallel", 1)
    tp = given.get("tensor_parallel") or _largest_divisor_at_most(processes // max(cp, 1) or 1, spec.tensor_parallel)
    pp = given.get("pipeline_parallel") or _largest_divisor_at_most(
        max(1, processes // max(tp * cp, 1)), spec.pipeline_parallel
    )
    layout = {
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "context_parallel": cp,
        "virtual_pipeline": given.get("virtual_pipeline"),
    }
    if spec.num_moe_experts is not None:  # EP as large as the recipe's and as the processes allow, ETP 1
        etp = given.get("expert_tensor_parallel") or 1
        experts = min(spec.num_moe_experts, EXPERTS)
        fitting = [d for d in divisors(max(1, processes // (etp * pp))) if experts % d == 0]
        ep = given.get("expert_parallel") or max(d for d in fitting if d <= max(1, spec.expert_parallel))
        layout.update(expert_parallel=ep, expert_tensor_parallel=etp)
    return layout


def smoke_shape(
    spec: RecipeSpec,
    *,
    processes: int = 1,
    steps: int = 20,
    stop_step: Optional[int] = None,
    full_size: bool = False,
    overrides: Optional[dict[str, Any]] = None,
) -> SmokeShape:
    """The smoke run of `spec` on `processes` processes (one per GPU, or CPU processes under gloo).

    `overrides` are recipe fields applied last (e.g. tensor_parallel=2, precision="fp8", hidden_dropout=0.0), so a
    user can pick the layout or any choice; `full_size` keeps the recipe's shape (for a GPU)."""
    overrides = dict(overrides or {})
    problems = _argument_problems(processes, steps, stop_step)
    try:
        spec.replace(**overrides)  # unknown fields and bad values, reported with the arguments' problems
    except InvalidInputError as error:
        problems += error.problems
    if problems:
        raise InvalidInputError(problems, context=f"smoke {spec.name}")
    stop = stop_step if stop_step is not None else steps // 2
    layout = fit_layout(spec, processes, {k: overrides[k] for k in LAYOUT_FIELDS if k in overrides})
    model_parallel = layout["tensor_parallel"] * layout["pipeline_parallel"] * layout["context_parallel"]
    if processes % model_parallel:
        raise InvalidInputError(
            [
                Problem(
                    "processes",
                    processes,
                    f"is not a multiple of TP x PP x CP = {model_parallel}.",
                    f"run {model_parallel} (or a multiple) processes, or lower tensor_parallel/pipeline_parallel.",
                )
            ],
            context=f"smoke {spec.name}",
        )
    values: dict[str, Any] = {} if full_size else _small_shape(spec, layout)
    values.update(layout, num_nodes=1, num_gpus_per_node=processes)
    values.update(overrides)  # the user's choices win over the scaled-down defaults
    micro = values.get("micro_batch_size", spec.micro_batch_size)
    # Scaled down: two micro-batches per pipeline stage and step, so that accumulation and 1F1B both run.
    values.setdefault(
        "global_batch_size",
        spec.global_batch_size
        if full_size
        else micro * (processes // model_parallel) * 2 * layout["pipeline_parallel"],
    )
    values.setdefault("checkpoint_every_steps", max(1, stop // 2))
    tokens_per_step = values["global_batch_size"] * values.get("seq_length", spec.seq_length)
    for key, value in _schedule(spec, steps, tokens_per_step).items():
        values.setdefault(key, value)
    small = spec.replace(**values)
    # The user's data and tokenizer, before any process starts: the vocabulary is the tokenizer's, and a missing
    # prefix or tokenizer, or ids beyond the vocabulary, fail here with the fix (not in the training log).
    small, data = checked_data(small, vocab_given="vocab_size" in overrides, context=f"smoke {spec.name}")
    # The planner's rules, before any process starts: a layout Megatron would refuse fails here with the fix.
    validate(small, Cluster.of(small.num_nodes, small.num_gpus_per_node)).raise_if_invalid()
    warned = tuple(p for p in data.problems if p.severity == WARNING)
    return SmokeShape(
        spec=small, processes=processes, steps=steps, stop_step=stop, full_size=full_size, warnings=warned
    )


def _small_shape(spec: RecipeSpec, layout: dict[str, Any]) -> dict[str, Any]:
    tp, cp = layout["tensor_parallel"], layout["context_parallel"]
    split = _split_multiples(spec, layout)
    attention = _small_attention(spec, split)
    seq = math.lcm(SEQ_LENGTH, tp, 2 * cp)
    return {
        **attention,
        **_small_experts(spec, attention["hidden_size"], layout),
        "num_layers": _small_layers(spec, layout),
        "ffn_hidden_size": _small_ffn(spec, attention["hidden_size"], split),
        "seq_length": seq,
        "vocab_size": VOCAB_SIZE,
        "make_vocab_size_divisible_by": VOCAB_MULTIPLE,
        "micro_batch_size": MICRO_BATCH,
        "recompute_num_layers": None,
        # The recipe's own first and last stages (DeepSeek-V3's 3 and 2 of 61) are the full-size layout's.
        "pipeline_first_stage_layers": None,
        "pipeline_last_stage_layers": None,
    }


def _split_multiples(spec: RecipeSpec, layout: dict[str, Any]) -> dict[str, int]:
    """What each width the blocks split must be a multiple of on this layout: the parallel sizes of its blocks'
    split needs (`SplitNeed`: heads, query groups and FFN over TP), so that Megatron builds the scaled model."""
    sizes = {"tp": layout["tensor_parallel"], "cp": layout["context_parallel"], "ep": layout.get("expert_parallel", 1)}
    sizes["etp"] = layout.get("expert_tensor_parallel") or sizes["tp"]
    multiples: dict[str, int] = {}
    for need in Architecture.of(spec).split_needs():
        multiples[need.field] = math.lcm(multiples.get(need.field, 1), sizes.get(need.group, 1))
    return multiples


def _at_least(value: int, field: str, split: dict[str, int]) -> int:
    """`value`, rounded up to what the blocks' split needs ask of `field` on the layout."""
    multiple = split.get(field, 1)
    return -(-value // multiple) * multiple


def _small_attention(spec: RecipeSpec, split: dict[str, int]) -> dict[str, Any]:
    """Hidden size, heads, query groups and head dimension of the scaled model. Multi-head attention stays multi-head
    with HEAD_DIM channels a head, HEADS heads or as many as the split needs ask. Grouped-query attention stays
    grouped: a multiple of QUERY_GROUPS groups and of what the split needs ask (Megatron splits whole groups over the
    TP ranks), each shared by the recipe's heads per group up to HEADS_PER_GROUP (Llama 3 8B keeps its 4; 70B's 8
    and 405B's 16 would pass a million parameters), in GQA_HIDDEN channels. An explicit head dimension
    (kv_channels) stays explicit, at the scaled model's."""
    if spec.kv_groups == spec.num_attention_heads:
        heads = _at_least(HEADS, "num_attention_heads", split)
        heads = _at_least(heads, "num_query_groups", split)  # MHA: a group per head
        groups, hidden = (None if spec.num_query_groups is None else heads), heads * HEAD_DIM
    else:
        groups = math.lcm(QUERY_GROUPS, split.get("num_query_groups", 1))  # even, as the recipes' counts
        per_group = min(spec.num_attention_heads // spec.kv_groups, max(2, HEADS_PER_GROUP * QUERY_GROUPS // groups))
        heads, hidden = _at_least(groups * per_group, "num_attention_heads", split), GQA_HIDDEN
    return {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": groups,
        "kv_channels": None if spec.kv_channels is None else hidden // heads,
    }


def _small_ffn(spec: RecipeSpec, hidden: int, split: dict[str, int]) -> int:
    """The recipe's FFN-to-hidden ratio (GPT-3 4, Llama 3 8B 3.5), rounded to a multiple of what the split needs
    ask."""
    multiple = split.get("ffn_hidden_size", 1)
    return multiple * max(1, round(hidden * spec.ffn_hidden_size / spec.hidden_size / multiple))


def _small_experts(spec: RecipeSpec, hidden: int, layout: dict[str, Any]) -> dict[str, Any]:
    """A Mixture of Experts scaled like the rest: at most EXPERTS experts, top-k at most a quarter of them (at least
    2), each expert's and the shared expert's width at the recipe's ratio to hidden but at most a quarter of it (8 of
    Mixtral's 3.5 x hidden experts would pass a million parameters), a multiple of ETP and TP."""
    if spec.num_moe_experts is None:
        return {}
    experts = min(spec.num_moe_experts, EXPERTS)
    etp, tp = layout.get("expert_tensor_parallel") or layout["tensor_parallel"], layout["tensor_parallel"]
    expert_ffn = spec.moe_ffn_hidden_size or spec.ffn_hidden_size
    values = {
        "num_moe_experts": experts,
        "moe_router_topk": min(spec.moe_router_topk, max(2, experts // 4)),
        "moe_ffn_hidden_size": etp * max(1, round(min(hidden * expert_ffn / spec.hidden_size, hidden / 4) / etp)),
    }
    if spec.moe_shared_expert_intermediate_size:
        shared = spec.moe_shared_expert_intermediate_size
        width = min(hidden * shared / spec.hidden_size, hidden / 4)
        values["moe_shared_expert_intermediate_size"] = tp * max(1, round(width / tp))
    return values


def _small_layers(spec: RecipeSpec, layout: dict[str, Any]) -> int:
    """Two layers, or one for each pipeline chunk; where the recipe counts the embedding and the loss as a layer
    each in the pipeline split (Llama 3 405B), every chunk still holds a transformer layer: 2 x chunks - 2."""
    pp = layout["pipeline_parallel"]
    chunks = pp * (layout["virtual_pipeline"] or 1)
    if spec.pipeline_counts_embedding_and_loss and pp > 1:
        return max(2, 2 * chunks - 2)
    return max(2, chunks)


def _schedule(spec: RecipeSpec, steps: int, tokens_per_step: int) -> dict[str, int]:
    """The recipe's schedule, shrunk to `steps`: warmup and decay keep their share of the run (warmup at least one
    step, so that the learning rate is not zero throughout)."""
    warmup = max(1, round(steps * spec.warmup_tokens / spec.train_tokens))
    decay = max(warmup + 1, round(steps * spec.decay_tokens / spec.train_tokens))
    return {
        "warmup_tokens": warmup * tokens_per_step,
        "decay_tokens": min(decay, steps) * tokens_per_step,
        "train_tokens": steps * tokens_per_step,
    }


#: Most steps a smoke run takes: a million take a day at 0.1 s per step; beyond it the derived token counts (steps x
#: tokens per step) would be refused under names the user never gave.
MAX_STEPS = 1_000_000


def _argument_problems(processes: Any, steps: Any, stop_step: Any) -> list[Problem]:
    problems = []
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        problems.append(Problem("processes", processes, "must be a positive integer.", "give e.g. --processes 2."))
    elif processes > COUNT_MAX:  # named here: the plan would report it as num_gpus_per_node, which no user gave
        problems.append(
            Problem(
                "processes",
                processes,
                f"is larger than {COUNT_MAX:,} (one node's processes; far beyond any machine: most likely a typo).",
                "give e.g. --processes 2, or --executor to run on a cluster.",
            )
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or not MIN_STEPS <= steps <= MAX_STEPS:
        problems.append(
            Problem(
                "steps",
                steps,
                f"must be an integer from {MIN_STEPS} to {MAX_STEPS:,}: the learning check compares the means of the "
                f"first and last steps, which needs {MIN_STEPS} at least; a smoke run is tens of steps (more is "
                "`nemo-recipes launch`'s).",
                "give e.g. --steps 20.",
            )
        )
    elif stop_step is not None and (
        isinstance(stop_step, bool) or not isinstance(stop_step, int) or not 1 <= stop_step < steps
    ):
        problems.append(
            Problem(
                "stop_step",
                stop_step,
                f"must be between 1 and steps - 1 = {steps - 1}.",
                f"give e.g. --stop-step {steps // 2}.",
            )
        )
    return problems


#: The names these had before issue 32 ("plan" is the planner's word): aliases, the same class and function.
SmokePlan = SmokeShape
smoke_plan = smoke_shape
