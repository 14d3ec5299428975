"""A published row as a plan: a plain dict with the columns of `calibration.csv` becomes a `(RecipeSpec, Cluster)`.

The benchmark's reader of its rows (`planner_accuracy.py`; `tests/test_shapes.py`), not the package's: a user plans
a shape of their own with `nemo-recipes plan --custom` or a `RecipeSpec`. Standard library and nemo_recipes only.
Columns: layers, hidden, heads, kv_heads, ffn, vocab, seq, gpu, n_gpus, tp, pp, cp, vp, dp,
mbs, gbs, precision, recompute, sp, dist_opt (optional: model, gpus_per_node, gated). A value may be missing, empty
or "n/s" (not stated by the source); every value filled in is returned as a sentence in the assumptions list, so
that a prediction always says what it assumed.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, TypeVar, cast

from nemo_recipes.catalog import Precision, RecipeSpec, Recompute
from nemo_recipes.errors import InvalidInputError, Problem, known
from nemo_recipes.plan.hardware import GPU, Cluster, get_gpu

REQUIRED = ("layers", "hidden", "heads", "seq", "gpu", "n_gpus", "gbs")
COLUMNS = REQUIRED + (
    "kv_heads",
    "ffn",
    "vocab",
    "tp",
    "pp",
    "cp",
    "vp",
    "dp",
    "mbs",
    "precision",
    "recompute",
    "sp",
    "dist_opt",
    "model",
    "gpus_per_node",
    "gated",
)

# A node of the GPUs we plan for (DGX/HGX A100, H100, H200, B200) has 8 GPUs.
DEFAULT_GPUS_PER_NODE = 8
# Megatron's default vocabulary padding (make-vocab-size-divisible-by 128, times TP).
VOCAB_MULTIPLE = 128
# Vocabulary of Megatron's GPT examples and of the Megatron papers (GPT-2 BPE padded to 51200).
DEFAULT_VOCAB = 51200

_T = TypeVar("_T")

_MISSING = ("", "n/s", "ns", "na", "n/a", "none", "-", "?")
_LLAMA = re.compile(r"llama|mistral|qwen|nemotron", re.IGNORECASE)


def is_missing(value: Any) -> bool:
    """Empty, None or a 'not stated' marker such as "n/s" (possibly with an explanation: "n/s (MFU vs 989)")."""
    if value is None:
        return True
    text = str(value).strip().lower()
    return text in _MISSING or text.startswith("n/s")


def _checked(value: Optional[_T]) -> _T:
    """A value read without a problem: `_Reader` returns None for a value only with a problem (or for a missing
    required one), and `plan_from_row` raises on any problem before it builds the plan."""
    return known(value, "a value read with a problem reached the plan")


def _leading(value: Any) -> str:
    """The first word of a cell: "fp16 mixed" -> "fp16", "no (DP=1)" -> "no"."""
    return str(value).strip().lower().split(" ")[0].split("(")[0]


class _Reader:
    """Reads one row, collecting problems and assumptions instead of stopping at the first."""

    def __init__(self, row: Mapping[str, Any]):
        self.row = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
        self.problems: list[Problem] = []
        self.assumptions: list[str] = []

    def int(self, key: str, default: Optional[int] = None, why: str = "") -> Optional[int]:
        value = self.row.get(key)
        if is_missing(value):
            if default is None:
                if key in REQUIRED:
                    self.problems.append(Problem(key, value, "is required.", f"give {key} as a positive integer."))
                return None
            self.assumptions.append(f"{key} not stated: assumed {default}" + (f" ({why})" if why else ""))
            return default
        text = str(value).strip().replace(",", "").replace("_", "")
        try:
            number = float(text.split(" ")[0])
        except ValueError:
            self.problems.append(Problem(key, value, "is not a number.", f"give {key} as a positive integer."))
            return None
        if number != int(number) or number < 1:
            self.problems.append(Problem(key, value, "must be a positive integer.", f"give {key} as 1 or more."))
            return None
        return int(number)


def _precision(reader: _Reader) -> Precision:
    value = reader.row.get("precision")
    text = "" if value is None else str(value).lower()
    for name in ("fp8", "bf16", "fp16"):
        if name in text and not text.strip().startswith("n/s"):
            return cast(Precision, name)
    if "bf16" in text:  # "n/s (MFU vs 989 => BF16 peak)": the source measured against the BF16 peak
        reader.assumptions.append("precision not stated: assumed bf16 (the source quotes the BF16 peak)")
        return "bf16"
    if not is_missing(value):
        reader.problems.append(Problem("precision", value, "is not a precision.", "use bf16, fp16 or fp8."))
        return "bf16"
    reader.assumptions.append("precision not stated: assumed bf16 (NeMo 2's default)")
    return "bf16"


def _recompute(reader: _Reader) -> Recompute:
    value = reader.row.get("recompute")
    if is_missing(value):
        reader.assumptions.append(
            "recompute not stated: assumed none (Megatron-Core and NeMo 2 performance "
            "configurations train with fused attention and no activation recomputation)"
        )
        return "none"
    word = _leading(value)
    if word in ("none", "no", "off", "false", "0"):
        return "none"
    if word in ("selective", "full"):
        return cast(Recompute, word)
    reader.problems.append(Problem("recompute", value, "is not a recomputation mode.", "use none, selective or full."))
    return "none"


def _flag(reader: _Reader, key: str, default: Optional[bool], what: str) -> Optional[bool]:
    value = reader.row.get(key)
    if is_missing(value):
        reader.assumptions.append(f"{key} not stated: assumed {what}")
        return default
    word = _leading(value)
    if word in ("yes", "y", "true", "on", "1"):
        return True
    if word in ("no", "n", "false", "off", "0"):
        return False
    reader.problems.append(Problem(key, value, "is not yes or no.", f"give {key} as yes or no."))
    return default


def plan_from_row(row: Mapping[str, Any]) -> tuple[RecipeSpec, Cluster, list[str]]:
    """`(spec, cluster, assumptions)` for one row of a calibration-style table (a dict of column -> value).

    Raises InvalidInputError listing every unusable value at once."""
    r = _Reader(row)
    layers, hidden, heads, seq = r.int("layers"), r.int("hidden"), r.int("heads"), r.int("seq")
    n_gpus, gbs = r.int("n_gpus"), r.int("gbs")
    tp = r.int("tp", 1, "no tensor parallelism")
    pp = r.int("pp", 1, "no pipeline parallelism")
    cp = r.int("cp", 1, "no context parallelism")
    mbs = r.int("mbs", 1, "Megatron's default micro-batch")
    kv_heads = r.int("kv_heads", heads, "multi-head attention") if heads else None
    ffn = r.int("ffn", 4 * hidden, "4 x hidden, as GPT-3") if hidden else None
    vocab = r.int("vocab", DEFAULT_VOCAB, "the GPT-2 BPE padded to 51200, as in Megatron's GPT examples")
    gpus_per_node = r.int(
        "gpus_per_node", min(DEFAULT_GPUS_PER_NODE, n_gpus or DEFAULT_GPUS_PER_NODE), "an 8-GPU DGX/HGX node"
    )
    vp = _virtual_pipeline(r, pp)
    gpu = _gpu(r)
    precision = _precision(r)
    recompute = _recompute(r)
    sp = _flag(r, "sp", None, "on whenever TP > 1 (Megatron-Core and NeMo 2 default with TP)")
    dist_opt = _flag(
        r,
        "dist_opt",
        True,
        "the distributed optimizer with overlapped gradient reduce-scatter and parameter all-gather (NeMo 2 default)",
    )
    model = "" if is_missing(r.row.get("model")) else str(r.row.get("model"))
    gated = _gated(r, model, hidden, ffn)
    gpus_per_node = _check_world(r, n_gpus, gpus_per_node, tp, pp, cp)
    if r.problems:
        raise InvalidInputError(r.problems, context=f"row {row.get('id', '')!r}".strip())
    layers, hidden, heads, seq, n_gpus, gbs = map(_checked, (layers, hidden, heads, seq, n_gpus, gbs))
    tp, pp, cp, mbs, ffn, vocab = map(_checked, (tp, pp, cp, mbs, ffn, vocab))
    gpus_per_node = _checked(gpus_per_node)

    overrides = _pipeline_split(r, layers, (pp or 1) * (vp or 1))
    if gated:
        overrides.update(
            activation="swiglu",
            add_bias_linear=False,
            position_embedding_type="rope",
            normalization="RMSNorm",
            share_embeddings=False,
            hidden_dropout=0.0,
            attention_dropout=0.0,
        )
    try:
        spec = RecipeSpec(
            name=str(row.get("id") or model or "custom"),
            size_label=model or "custom",
            num_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_query_groups=kv_heads if kv_heads != heads else None,
            ffn_hidden_size=ffn,
            vocab_size=vocab,
            make_vocab_size_divisible_by=VOCAB_MULTIPLE,
            seq_length=seq,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            context_parallel=cp,
            virtual_pipeline=vp,
            sequence_parallel=sp,
            micro_batch_size=mbs,
            global_batch_size=gbs,
            precision=precision,
            recompute=recompute,
            distributed_optimizer=bool(dist_opt),
            max_lr=1e-4,
            num_nodes=n_gpus // gpus_per_node,
            num_gpus_per_node=gpus_per_node,
            default_gpu=gpu.name if gpu else "h100-80gb",
            **overrides,
        )
    except InvalidInputError as error:
        raise InvalidInputError(error.problems, context=f"row {row.get('id', '')!r}") from None
    cluster = Cluster.of(n_gpus // gpus_per_node, gpus_per_node, gpu)
    return spec, cluster, r.assumptions


def _virtual_pipeline(r: _Reader, pp: Optional[int]) -> Optional[int]:
    """The interleaving of the pipeline; None for none (a stated 1 included)."""
    if is_missing(r.row.get("vp")):
        r.assumptions.append(
            "vp not stated: assumed no interleaving (1F1B)"
            if (pp or 1) > 1
            else "vp not stated: no pipeline, so no interleaving"
        )
        return None
    vp = r.int("vp")
    return None if vp == 1 else vp


def _gpu(r: _Reader) -> Optional[GPU]:
    if is_missing(r.row.get("gpu")):
        r.problems.append(Problem("gpu", r.row.get("gpu"), "is required.", "name the GPU, e.g. h100-80gb."))
        return None
    try:
        return get_gpu(str(r.row["gpu"]).strip())
    except InvalidInputError as error:
        r.problems += error.problems
        return None


def _gated(r: _Reader, model: str, hidden: Optional[int], ffn: Optional[int]) -> bool:
    """Whether the MLP is gated: stated, or inferred from the model's name or its FFN width. Llama-family shapes:
    gated MLP (SwiGLU), RoPE, RMSNorm, no biases, untied embeddings."""
    gated_value = r.row.get("gated")
    if not is_missing(gated_value):
        return _leading(gated_value) in ("yes", "y", "true", "on", "1", "swiglu")
    if _LLAMA.search(model):
        r.assumptions.append(
            f"model {model!r} is Llama-style: assumed SwiGLU, RoPE, RMSNorm, no biases, untied embeddings"
        )
        return True
    if hidden and ffn and ffn != 4 * hidden:
        r.assumptions.append(
            f"ffn={ffn} is not 4 x hidden: assumed a gated (SwiGLU) MLP, RoPE, RMSNorm, no biases and untied "
            "embeddings (Llama-style)"
        )
        return True
    if hidden:
        r.assumptions.append(
            "ffn = 4 x hidden: assumed a GPT-3 style model (GeLU, learned positions, LayerNorm, tied embeddings)"
        )
    return False


def _check_world(
    r: _Reader,
    n_gpus: Optional[int],
    gpus_per_node: Optional[int],
    tp: Optional[int],
    pp: Optional[int],
    cp: Optional[int],
) -> Optional[int]:
    """GPUs per node (fewer GPUs than a node: one node of them), with the problems of a world size that is not
    whole nodes or disagrees with a stated DP."""
    if n_gpus and gpus_per_node and n_gpus % gpus_per_node:
        if n_gpus < gpus_per_node:
            gpus_per_node = n_gpus
        else:
            r.problems.append(
                Problem(
                    "n_gpus",
                    n_gpus,
                    f"is not a whole number of {gpus_per_node}-GPU nodes.",
                    "give a multiple of gpus_per_node, or set gpus_per_node.",
                )
            )
    if not is_missing(r.row.get("dp")) and n_gpus and tp and pp and cp:
        dp = r.int("dp")
        if dp and dp * tp * pp * cp != n_gpus:
            r.problems.append(
                Problem(
                    "dp", dp, f"x TP {tp} x PP {pp} x CP {cp} != n_gpus {n_gpus}.", "make n_gpus = DP x TP x PP x CP."
                )
            )
    return gpus_per_node


def _pipeline_split(r: _Reader, layers: Optional[int], chunks: int) -> dict[str, Any]:
    """The override that makes an uneven pipeline split even, as NeMo's recipes do, when it is needed."""
    if layers and chunks > 1 and layers % chunks and (layers + 2) % chunks == 0:
        r.assumptions.append(
            f"{layers} layers do not divide over PP x VP = {chunks}, but {layers} + 2 do: assumed "
            "the embedding and the loss count as one layer each in the pipeline split "
            "(Megatron-Core account_for_embedding/loss_in_pipeline_split, as NeMo's Llama 3.1 405B "
            "recipe)"
        )
        return {"pipeline_counts_embedding_and_loss": True}
    return {}


def stack_from_row(row: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The software stack a row was measured on (the `stack=` argument of `estimate_throughput`), and why.

    A `stack` column wins. Otherwise FP16 mixed precision with loss scaling marks the Megatron-LM of the 2020-2022
    papers (before Transformer Engine, whose path is BF16/FP8): unfused softmax attention and no TP overlap. Any other
    precision is taken to run Megatron-Core with Transformer Engine, as NeMo 2 does."""
    value = row.get("stack")
    if not is_missing(value):
        return str(value).strip(), []
    precision = "" if row.get("precision") is None else str(row.get("precision")).lower()
    if "fp16" in precision and not precision.strip().startswith("n/s"):
        return "megatron-legacy", [
            "software stack not stated: FP16 mixed precision taken as Megatron-LM before "
            "Transformer Engine (unfused softmax attention, no TP communication overlap)"
        ]
    return "transformer-engine", [
        "software stack not stated: assumed Megatron-Core with Transformer Engine "
        "(fused attention, TP communication overlap where TP > 1 with SP), as NeMo 2"
    ]


#: Columns of `moe_rows.csv`: a published Mixture-of-Experts measurement on a catalog row's architecture.
MOE_COLUMNS = ("recipe", "gpu", "n_gpus", "gbs", "mbs", "seq", "tp", "pp", "cp", "vp", "ep", "etp", "precision",
               "gpus_per_node")  # fmt: skip
#: What NVIDIA's MoE performance recipes run that the catalog's rows (NeMo 2.7.3's pretraining recipes) do not:
#: grouped GEMM and fused permutation (Transformer Engine), the all-to-all dispatcher, no recomputation.
MOE_PERFORMANCE = dict(moe_grouped_gemm=True, moe_permute_fusion=True, moe_token_dispatcher_type="alltoall")


def moe_plan_from_row(row: Mapping[str, Any]) -> tuple[RecipeSpec, Cluster, list[str]]:
    """`(spec, cluster, assumptions)` for one row of `moe_rows.csv`: the catalog row `recipe` (its architecture
    and its sources; it keeps its name, which says its family) on the row's cluster, layout, batch, sequence and
    precision. Raises InvalidInputError for a recipe the catalog does not have (DeepSeek-V3 before its family is
    merged) or an unusable value."""
    from nemo_recipes.catalog import RECIPES

    r = _Reader(row)
    name = str(row.get("recipe") or "").strip()
    if name not in RECIPES:
        raise InvalidInputError([Problem("recipe", name, "is not a recipe of this catalog.", "add its family.")],
                                context=f"row {row.get('id', '')!r}")  # fmt: skip
    base = RECIPES[name]
    n_gpus, gbs, mbs, seq = r.int("n_gpus"), r.int("gbs"), r.int("mbs"), r.int("seq")
    tp, pp, cp, ep = r.int("tp", 1), r.int("pp", 1), r.int("cp", 1), r.int("ep", 1)
    gpus_per_node = r.int("gpus_per_node", DEFAULT_GPUS_PER_NODE, "an 8-GPU DGX/HGX node")
    etp = base.expert_tensor_parallel
    if is_missing(row.get("etp")):
        r.assumptions.append(f"etp not stated: assumed the recipe's ({etp or 'unset: TP'})")
    else:
        etp = r.int("etp")
    vp = _virtual_pipeline(r, pp)
    gpu, precision = _gpu(r), str(row.get("precision") or "").strip().lower()
    r.assumptions.append("recompute not stated: assumed none; grouped GEMM, fused permutation and the all-to-all "
                         "dispatcher on (NVIDIA's MoE performance recipes)")  # fmt: skip
    if r.problems or gpu is None:
        raise InvalidInputError(r.problems, context=f"row {row.get('id', '')!r}")
    layers = base.num_layers
    overrides = _pipeline_split(r, layers, _checked(pp) * (vp or 1))
    try:
        spec = base.replace(
            tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp, virtual_pipeline=vp,
            sequence_parallel=None, expert_parallel=ep, expert_tensor_parallel=etp, micro_batch_size=mbs,
            global_batch_size=gbs, seq_length=seq, precision=precision, recompute="none", recompute_num_layers=None,
            distributed_optimizer=True, num_nodes=_checked(n_gpus) // _checked(gpus_per_node),
            num_gpus_per_node=gpus_per_node, default_gpu=gpu.name, **MOE_PERFORMANCE, **overrides,
        )  # fmt: skip
    except InvalidInputError as error:
        raise InvalidInputError(error.problems, context=f"row {row.get('id', '')!r}") from None
    return spec, Cluster.of(_checked(n_gpus) // _checked(gpus_per_node), _checked(gpus_per_node), gpu), r.assumptions
