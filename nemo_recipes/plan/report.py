"""The one report a plan produces: problems, memory, changes and (when attached) throughput, with a stable JSON form.

The factories, the executor plugin and `nemo-recipes plan` all read this object, so its `to_dict()` keys are an
interface: `valid`, `recipe`, `cluster`, `parallelism`, `problems`, `memory_gib`, `memory_detail`, `throughput`,
`time_to_train`, `changes`, `program`, `advice`. Add keys, never rename them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from nemo_recipes.catalog import RecipeSpec, not_a_spec
from nemo_recipes.errors import ERROR, WARNING, InvalidInputError, Problem, jsonable, known
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.memory import MemoryBreakdown
from nemo_recipes.plan.rendering import advice_text, change_move, plan_text
from nemo_recipes.plan.stack import Program


def check_inputs(spec: Any, cluster: Any) -> None:
    """Raise one InvalidInputError naming each argument of a planner call that is not what the planner takes
    (a `RecipeSpec` and a `Cluster`), rather than an AttributeError from deep inside."""
    problems = not_a_spec(spec)
    if not isinstance(cluster, Cluster):
        problems.append(
            Problem(
                "cluster",
                cluster,
                "must be a Cluster.",
                "pass nemo_recipes.plan.Cluster.of(nodes, gpus_per_node, gpu).",
            )
        )
    if problems:
        raise InvalidInputError(problems, context="planner")


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
        return f"{change_move(self.to_dict())} ({self.why})"


@dataclass(frozen=True)
class Advice:
    """A faster valid plan on the same hardware: what to change, and the predicted step times. JSON keys: changes,
    step_time_s, current_step_time_s, speedup, memory_gib, why."""

    changes: dict[str, Any]
    step_time_s: float
    current_step_time_s: float
    memory_gib: Optional[float]
    why: str

    @property
    def speedup(self) -> float:
        return self.current_step_time_s / self.step_time_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": {k: jsonable(v) for k, v in self.changes.items()},
            "step_time_s": self.step_time_s,
            "current_step_time_s": self.current_step_time_s,
            "speedup": self.speedup,
            "memory_gib": self.memory_gib,
            "why": self.why,
        }

    def __str__(self) -> str:
        return advice_text(self.to_dict())


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
    layout: Optional[Layout] = None
    program: Optional[Program] = None
    advice: list[Advice] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.layout is None:
            object.__setattr__(self, "layout", Layout.of(self.spec, self.cluster))

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
    def _known_layout(self) -> Layout:
        return known(self.layout, "__post_init__ fills in the layout when none is given")

    @property
    def data_parallel_size(self) -> int:
        return self._known_layout.dp

    @property
    def grad_accumulation_steps(self) -> int:
        return self._known_layout.microbatches

    def with_throughput(self, throughput: Any) -> "PlanReport":
        """A copy carrying a throughput estimate: a mapping, or an object with `to_dict()` (the throughput
        module's result); None removes it."""
        if throughput is not None and not isinstance(throughput, Mapping):
            throughput = throughput.to_dict()
        return replace(self, throughput=None if throughput is None else dict(throughput))

    def with_time_to_train(self, timing: Optional[dict[str, float]]) -> "PlanReport":
        return replace(self, time_to_train=None if timing is None else dict(timing))

    def with_changes(self, changes: list[Change]) -> "PlanReport":
        return replace(self, changes=list(changes))

    def with_advice(self, advice: list[Advice]) -> "PlanReport":
        return replace(self, advice=list(advice))

    def raise_if_invalid(self) -> "PlanReport":
        """Raise InvalidInputError carrying every problem (warnings too) when any error is present."""
        if not self.valid:
            raise InvalidInputError(self.problems, context=self._title())
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
            "program": None if self.program is None else self.program.to_dict(),
            "advice": [a.to_dict() for a in self.advice],
        }

    def _title(self) -> str:
        gpu = "GPUs" if self.cluster.gpu is None else self.cluster.gpu.name
        return (
            f"{self.spec.name} on {self.cluster.nodes} x {self.cluster.gpus_per_node} {gpu} "
            f"({self.cluster.world_size} GPUs)"
        )

    def summary(self, *, changed_by: str = "the planner", faster: str = "best()") -> str:
        """The plan as text, the rendering `nemo-recipes plan` prints (`plan/rendering.py`), with the Python API's
        names for the planner's actions: changes made by `changed_by`, advice found by `faster`."""
        return plan_text(self.to_dict(), self.spec, changed_by=changed_by, faster=faster)

    def __str__(self) -> str:
        return self.summary()
