"""The one report a plan produces: problems, memory, changes and (when attached) throughput, with a stable JSON form.

The factories, the executor plugin and `nemo-recipes plan` all read this object, so its `to_dict()` keys are an
interface: `valid`, `recipe`, `cluster`, `parallelism`, `problems`, `memory_gib`, `memory_detail`, `throughput`,
`changes`. Add keys, never rename them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from nemo_recipes.catalog import RecipeSpec, not_a_spec
from nemo_recipes.errors import ERROR, WARNING, InvalidRecipeError, Problem, jsonable
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.memory import MemoryBreakdown


def check_inputs(spec: Any, cluster: Any) -> None:
    """Raise one InvalidRecipeError naming each argument of a planner call that is not what the planner takes
    (a `RecipeSpec` and a `Cluster`), rather than an AttributeError from deep inside."""
    problems = not_a_spec(spec)
    if not isinstance(cluster, Cluster):
        problems.append(Problem("cluster", cluster, "must be a Cluster.",
                                "pass nemo_recipes.plan.Cluster.of(nodes, gpus_per_node, gpu)."))
    if problems:
        raise InvalidRecipeError(problems, context="planner")


@dataclass(frozen=True)
class Change:
    """One field `fit` changed: `Change("pipeline_parallel", 1, 2, "...")`. JSON keys: field, from, to, why."""

    field: str
    from_: Any
    to: Any
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "from": jsonable(self.from_), "to": jsonable(self.to), "why": self.why}

    def __str__(self) -> str:
        return f"{self.field}: {self.from_!r} -> {self.to!r} ({self.why})"


@dataclass(frozen=True)
class PlanReport:
    """What the planner says about `spec` on `cluster`. `valid` means no error-severity problem (warnings allowed)."""

    spec: RecipeSpec
    cluster: Cluster
    problems: list[Problem] = field(default_factory=list)
    memory: Optional[MemoryBreakdown] = None
    changes: list[Change] = field(default_factory=list)
    throughput: Optional[dict[str, Any]] = None
    time_to_train: Optional[dict[str, float]] = None

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def data_parallel_size(self) -> int:
        return max(1, self.cluster.world_size // self.spec.model_parallel_size)

    @property
    def grad_accumulation_steps(self) -> int:
        return max(1, self.spec.global_batch_size // (self.spec.micro_batch_size * self.data_parallel_size))

    def with_throughput(self, throughput: Any) -> "PlanReport":
        """A copy carrying a throughput estimate: a mapping, or an object with `to_dict()` (the throughput
        module's result); None removes it."""
        if throughput is not None and not isinstance(throughput, Mapping):
            throughput = throughput.to_dict()
        return dataclasses.replace(self, throughput=None if throughput is None else dict(throughput))

    def with_time_to_train(self, timing: Optional[dict[str, float]]) -> "PlanReport":
        return dataclasses.replace(self, time_to_train=None if timing is None else dict(timing))

    def with_changes(self, changes: list[Change]) -> "PlanReport":
        return dataclasses.replace(self, changes=list(changes))

    def raise_if_invalid(self) -> "PlanReport":
        """Raise InvalidRecipeError carrying every problem (warnings too) when any error is present."""
        if not self.valid:
            raise InvalidRecipeError(self.problems, context=self._title())
        return self

    def to_dict(self) -> dict[str, Any]:
        spec, cluster = self.spec, self.cluster
        return {
            "valid": self.valid,
            "recipe": spec.name,
            "cluster": {
                "nodes": cluster.nodes,
                "gpus_per_node": cluster.gpus_per_node,
                "gpu": None if cluster.gpu is None else cluster.gpu.name,
                "world_size": cluster.world_size,
            },
            "parallelism": {
                "tp": spec.tensor_parallel,
                "pp": spec.pipeline_parallel,
                "cp": spec.context_parallel,
                "vp": spec.virtual_pipeline,
                "dp": self.data_parallel_size,
                "sp": spec.sequence_parallel_enabled,
                "grad_accumulation": self.grad_accumulation_steps,
                "micro_batch_size": spec.micro_batch_size,
                "global_batch_size": spec.global_batch_size,
            },
            "problems": [p.to_dict() for p in self.problems],
            "memory_gib": None if self.memory is None else self.memory.to_dict(),
            "memory_detail": None if self.memory is None else dict(self.memory.detail),
            "throughput": None if self.throughput is None else jsonable(self.throughput),
            "time_to_train": None if self.time_to_train is None else dict(self.time_to_train),
            "changes": [c.to_dict() for c in self.changes],
        }

    def _title(self) -> str:
        gpu = "GPUs" if self.cluster.gpu is None else self.cluster.gpu.name
        return (f"{self.spec.name} on {self.cluster.nodes} x {self.cluster.gpus_per_node} {gpu} "
                f"({self.cluster.world_size} GPUs)")

    def summary(self) -> str:
        spec = self.spec
        verdict = "valid" if self.valid else f"INVALID ({len(self.errors)} error(s))"
        vp = spec.virtual_pipeline or "-"
        lines = [
            f"{self._title()}: {verdict}",
            f"  parallelism: TP {spec.tensor_parallel}, PP {spec.pipeline_parallel}, VP {vp}, "
            f"CP {spec.context_parallel}, DP {self.data_parallel_size}, "
            f"SP {'on' if spec.sequence_parallel_enabled else 'off'}; micro batch {spec.micro_batch_size}, "
            f"global batch {spec.global_batch_size}, gradient accumulation {self.grad_accumulation_steps}; "
            f"recompute {spec.recompute}",
        ]
        if self.memory is not None:
            m = self.memory
            lines.append(
                f"  memory per GPU: {m.total:.1f} of {m.capacity:.1f} GiB (weights {m.weights:.1f}, gradients "
                f"{m.gradients:.1f}, optimizer {m.optimizer:.1f}, activations {m.activations:.1f}, "
                f"other {m.other:.1f})")
        if self.throughput:
            shown = ", ".join(f"{k} {v}" for k, v in self.throughput.items() if isinstance(v, (int, float, str)))
            lines.append(f"  throughput: {shown}")
        lines += [f"  {p}" for p in self.problems]
        lines += [f"  changed {c}" for c in self.changes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
