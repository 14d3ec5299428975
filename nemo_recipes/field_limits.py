"""The record of one recipe field (`RecipeField`, whose table is `recipe_fields`) and the bounds it can declare, each
with the problem a value beyond it is told; the constants they are made of (`recipe_checks` re-exports them).
Standard library only: it is on the fast path, where `plan` imports neither `dataclasses` nor `inspect`, so the
records are named tuples (frozen all the same)."""

from __future__ import annotations

import operator
from typing import Any, Callable, NamedTuple, Optional

#: Where Megatron, PyTorch and NumPy count: the largest token count or step a recipe takes.
INT64_MAX = 2**63 - 1
#: Layers, heads, parallel sizes, micro batch, GPUs per node: the deepest models have ~1000 layers.
COUNT_MAX = 4096
#: Longest checkpoint interval by time a recipe takes (checkpoint_every_minutes).
MINUTES_PER_YEAR = 525_600
# Each upper bound lies far beyond any model or cluster trained so far, so a value above it is a typo (an extra zero,
# a unit); the bounds also keep the planner's searches, which step through divisors, layers and micro batches,
# instant, and every count inside the 64-bit integers Megatron, PyTorch and NumPy compute with.
NODES_MAX = 2**17  # 131,072 nodes: over a million GPUs at 8 per node; the largest clusters have ~100,000 GPUs
SIZE_MAX = 2**24  # hidden, FFN, vocabulary, sequence, global batch: largest used ~10^5 (context: 10^7 tokens)

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


class Limit(NamedTuple):
    """One side of a numeric field's range (the value must be `op` `value`) and the problem a value beyond it is told;
    `fix` may name the field as `{name}`."""

    op: str
    value: float
    why: str
    fix: str

    def holds(self, value: Any) -> bool:
        return _COMPARE[self.op](value, self.value)


def at_least_one(optional: bool = False) -> Limit:
    if optional:
        return Limit(">=", 1, "must be at least 1 or unset.", "set {name} to a positive integer or None.")
    return Limit(">=", 1, "must be at least 1.", "set {name} to a positive integer.")


def at_most(bound: int) -> Limit:
    why = (
        "Megatron, PyTorch and NumPy count it in 64-bit integers"
        if bound == INT64_MAX
        else "far beyond any model or cluster trained so far: most likely a typo"
    )
    return Limit("<=", bound, f"is larger than {bound:,} ({why}).", f"set {{name}} to at most {bound:,}.")


def count(bound: int, optional: bool = False) -> tuple[Limit, ...]:
    return (at_least_one(optional), at_most(bound))


POSITIVE = Limit(">", 0, "must be positive.", "set {name} to a number above 0.")
FRACTION = (
    Limit(">=", 0, "must be in [0, 1).", "set {name} between 0 and 1."),
    Limit("<", 1, "must be in [0, 1).", "set {name} between 0 and 1."),
)


class RecipeField(NamedTuple):
    """One recipe field (a named tuple, not a dataclass: `plan`'s start-up imports no `dataclasses`)."""

    name: str
    section: str
    help: str
    #: Where the default comes from; None where the field has no default (each row gives it: its family's sources).
    source: Optional[str]
    #: The range of a numeric field; a field without limits is checked by its type alone (a choice, a flag, a path).
    limits: tuple[Limit, ...] = ()
    #: NeMo-Run configuration paths the value is written to (`model.config.num_layers`), read back from the first.
    nemo: tuple[str, ...] = ()
    #: The name of the conversion between the value and its paths (`training/nemo_fields.CONVERSIONS`), where the
    #: value is not copied as it is.
    conversion: Optional[str] = None
    #: Why NeMo's configuration does not hold the field (set exactly when `nemo` is empty).
    not_in_nemo: Optional[str] = None
    #: Why the value, although written to NeMo's configuration, is not read back from it (None: it is).
    not_read_back: Optional[str] = None
    #: The field means something only in a model with experts (`num_moe_experts` set): `show` lists it, the NeMo
    #: configuration holds it and `introspect` reads it back for such recipes only (`applies`).
    experts_only: bool = False
    #: The field that must be set (not None) for this one to mean something (`applies`): multi-latent attention's
    #: fields in a model with MLA (`kv_lora_rank`), a stage's own layer count where it is set. None: every recipe.
    applies_when: Optional[str] = None

    def applies(self, spec: Any) -> bool:
        """Whether the field belongs to `spec`: every field does, but an expert field to a recipe with experts and
        one with `applies_when` where that field is set (a dense model's configuration has no place for MLA's
        ranks)."""
        experts = not self.experts_only or getattr(spec, "num_moe_experts", None) is not None
        return experts and (self.applies_when is None or getattr(spec, self.applies_when, None) is not None)
