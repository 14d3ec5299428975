"""A family's Hugging Face names as ONE declared mapping that export and import both read: each rule pairs Megatron
roles of a block with Hugging Face keys and knows how to go either way (the same tensor, transposed, fused QKV as
separate or concatenated projections, a gated fc1 as gate and up, a layer's routed experts as one module each), so
that no direction is written by hand.

The converter (`conversion.hf_export`, `conversion.hf_import`) calls `layer_to_hf`/`layer_from_hf` of the family's
`HFMapping`; the rules run tensor methods only, so this module imports no torch (standard library: the registry of
families, on the fast path, holds the mappings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol

from nemo_recipes.errors import Problem


class Rule(Protocol):
    """Megatron roles <-> Hugging Face keys (relative to the layer's prefix), both ways."""

    @property
    def roles(self) -> tuple[str, ...]: ...
    def keys_for(self, arch: Any) -> tuple[str, ...]: ...
    def to_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]: ...
    def from_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]: ...


def concat_rows(*tensors: Any) -> Any:
    """The tensors one after the other along their first axis (torch.cat without importing torch)."""
    total = sum(t.shape[0] for t in tensors)
    out = tensors[0].new_empty((total, *tensors[0].shape[1:]))
    start = 0
    for t in tensors:
        out[start : start + t.shape[0]] = t
        start += t.shape[0]
    return out


@dataclass(frozen=True)
class _OneRole:
    """A rule for one Megatron tensor (every rule so far: a fused tensor is still one role)."""

    role: str

    @property
    def roles(self) -> tuple[str, ...]:
        return (self.role,)

    @property
    def keys(self) -> tuple[str, ...]:
        raise NotImplementedError  # every rule of one role names its keys

    def keys_for(self, arch: Any) -> tuple[str, ...]:
        """The rule's Hugging Face keys for `arch` (the same for every architecture but a per-expert rule's)."""
        return self.keys


@dataclass(frozen=True)
class _OneKey(_OneRole):
    """One Megatron tensor as one Hugging Face tensor, `transposed` where the class stores it [in, out] (GPT-2's
    Conv1D) and Megatron [out, in]."""

    key: str
    transposed: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,)


@dataclass(frozen=True)
class Same(_OneKey):
    """One tensor under another name (transposed for a Conv1D)."""

    def to_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        return (tensors[0].t() if self.transposed else tensors[0],)

    def from_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.to_hf(arch, tensors)


@dataclass(frozen=True)
class SplitQKV(_OneRole):
    """Megatron's fused QKV (grouped per query group) as separate query, key and value projections in head order
    (NeMo's `TransformFns.split_qkv`/`merge_qkv`)."""

    q: str
    k: str
    v: str

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.q, self.k, self.v)

    def to_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(arch.attention.split_qkv(tensors[0]))

    def from_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        return (arch.attention.merge_qkv(*tensors),)


@dataclass(frozen=True)
class ConcatQKV(_OneKey):
    """Megatron's fused QKV as one projection holding the query heads, then the key heads, then the value heads
    (GPT-2's c_attn), `transposed` for a Conv1D; a bias (one axis) is never transposed."""

    def to_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        joined = concat_rows(*arch.attention.split_qkv(tensors[0]))
        return (joined.t() if self.transposed else joined,)

    def from_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        rows = tensors[0].t() if self.transposed else tensors[0]
        return (arch.attention.merge_qkv(*rows.split(arch.attention.widths)),)


@dataclass(frozen=True)
class GateUp(_OneRole):
    """A gated MLP's fc1 (the gate rows, then the up rows: NeMo's `TransformFns.split_fc1`) as gate and up."""

    gate: str
    up: str

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.gate, self.up)

    def to_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(tensors[0].chunk(2))

    def from_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        return (concat_rows(*tensors),)


@dataclass(frozen=True)
class Experts:
    """A Mixture-of-Experts layer's routed experts as the Hugging Face class holds them, one module per expert:
    `gate`, `up` and `down` are the keys of expert `{expert}` (Mixtral's `block_sparse_moe.experts.{expert}.w1`,
    `w3`, `w2`; Qwen3-MoE's `mlp.experts.{expert}.gate_proj`, `up_proj`, `down_proj`).

    Megatron's side is what its distributed checkpoint stores, whatever EP and ETP trained it: each of fc1 and fc2
    one tensor per layer with a leading axis of the *global* expert index (SequentialMLP and TEGroupedMLP's
    `sharded_state_dict` (Megatron-Core 0.15 moe/experts.py) offset each rank's local expert `i` to
    `ep_rank x local_experts + i` on that axis; NeMo 2.7.3 saves with `singleton_local_shards=False`, so no
    per-expert keys), each expert's fc1 the gate rows then the up rows (the ETP shards of both halves placed as a
    dense SwiGLU fc1's: `apply_swiglu_sharded_factory`). NeMo 2.7.3's HFMixtralImporter/Exporter map
    `local_experts.*.linear_fc1` to `w1`/`w3` the same way (`TransformFns.merge_fc1`/`split_fc1`)."""

    gate: str
    up: str
    down: str
    fc1: str = "experts.fc1.weight"
    fc2: str = "experts.fc2.weight"

    @property
    def roles(self) -> tuple[str, ...]:
        return (self.fc1, self.fc2)

    def keys_for(self, arch: Any) -> tuple[str, ...]:
        """Every expert's gate, up and down keys, expert by expert (0 to experts - 1: the global index)."""
        experts = arch.moe.experts if arch.moe is not None else 0
        return tuple(key.format(expert=e) for e in range(experts) for key in (self.gate, self.up, self.down))

    def to_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        fc1, fc2 = tensors
        out: list[Any] = []
        for expert in range(fc1.shape[0]):
            gate, up = fc1[expert].chunk(2)
            out += [gate, up, fc2[expert]]
        return tuple(out)

    def from_hf(self, arch: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        experts = len(tensors) // 3
        gate, down = tensors[0], tensors[2]
        fc1 = gate.new_empty((experts, 2 * gate.shape[0], *gate.shape[1:]))
        fc2 = down.new_empty((experts, *down.shape))
        for expert in range(experts):
            fc1[expert] = concat_rows(tensors[3 * expert], tensors[3 * expert + 1])
            fc2[expert] = tensors[3 * expert + 2]
        return (fc1, fc2)


@dataclass(frozen=True)
class HFMapping:
    """A family's Hugging Face class, both ways: `layer` (rules in the order the class's files list a layer's
    tensors) under `layer_prefix` (with `{index}`), `globals` (Megatron role -> key of the tensors outside the
    layers), `config` (the class's config.json from a spec), `problems` (what the class cannot hold), and what
    reading its files needs: `shape_keys` (recipe field -> the config key that gives it), `config_defaults`
    (config key -> its value where a config leaves it out, from the rest of the config), `fixed` (config key ->
    the only value it may have, why), `ignored` (key endings a saved model may hold that are no tensor of the
    model: buffers) and `renamed` (a saved model's other spelling of a key -> ours, or None where it is ours)."""

    architecture: str
    model_type: str
    layer_prefix: str
    layer: tuple[Rule, ...]
    globals: Mapping[str, str]
    config: Callable[[Any, int, Optional[int]], dict[str, Any]]
    problems: Callable[[Any], list[Problem]]
    shape_keys: Mapping[str, str] = field(default_factory=dict)
    config_defaults: Mapping[str, Callable[[Mapping[str, Any]], Any]] = field(default_factory=dict)
    fixed: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    renamed: Optional[Callable[[str], Optional[str]]] = None

    @property
    def GLOBALS(self) -> Mapping[str, str]:  # noqa: N802  (the converter's name for them)
        return self.globals

    def _rules(self, roles: Any) -> list[Rule]:
        """The rules whose roles the architecture has (no bias rule without biases, no QK-norm rule without it)."""
        return [rule for rule in self.layer if all(role in roles for role in rule.roles)]

    def layer_keys(self, arch: Any, index: int) -> list[str]:
        """The Hugging Face keys of layer `index`, in the class's order."""
        p = self.layer_prefix.format(index=index)
        roles = {t.role for t in arch.layer_tensors()}
        return [p + key for rule in self._rules(roles) for key in rule.keys_for(arch)]

    def layer_to_hf(self, arch: Any, index: int, tensors: Mapping[str, Any]) -> dict[str, Any]:
        p = self.layer_prefix.format(index=index)
        out: dict[str, Any] = {}
        for rule in self._rules(tensors):
            converted = rule.to_hf(arch, tuple(tensors[role] for role in rule.roles))
            out.update({p + key: t for key, t in zip(rule.keys_for(arch), converted, strict=True)})
        return out

    def layer_from_hf(self, arch: Any, index: int, hf: Mapping[str, Any]) -> dict[str, Any]:
        p = self.layer_prefix.format(index=index)
        out: dict[str, Any] = {}
        for rule in self._rules({t.role for t in arch.layer_tensors()}):
            converted = rule.from_hf(arch, tuple(hf[p + key] for key in rule.keys_for(arch)))
            out.update(dict(zip(rule.roles, converted, strict=True)))
        return out


def values_not_held(
    spec: Any, architecture: str, wanted: Mapping[str, tuple[Any, str]], as_name: str, instead: str
) -> list[Problem]:
    """The recipe fields whose value the Hugging Face class `architecture` cannot hold: `wanted` maps a field to
    (the only value the class holds, why), `as_name` names the class's family and `instead` the recipes to export."""
    return [
        Problem(
            name,
            getattr(spec, name),
            f"{architecture} cannot hold this model: {why}.",
            f"train with {name}={value} to export as {as_name}, or export {instead}.",
        )
        for name, (value, why) in wanted.items()
        if getattr(spec, name) != value
    ]
