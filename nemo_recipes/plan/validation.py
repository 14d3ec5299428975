"""Validate a recipe against a cluster: every problem at once, each with severity, field, value, message and fix.

Standard library only. `validate` never raises for a bad plan; `PlanReport.raise_if_invalid()` does. It runs the
rules of `rules.py` (`RULES`), what the software stack cannot run, and the memory checks here. Without a GPU
(`cluster.gpu is None`) the hardware rules (NVLink, FP8, memory) are skipped or reduced to warnings.
"""

from __future__ import annotations

from typing import Iterable, Optional

from nemo_recipes.catalog import RecipeSpec
from nemo_recipes.errors import ERROR, WARNING, Problem, known
from nemo_recipes.plan.hardware import Cluster
from nemo_recipes.plan.layout import Layout, pipeline_sizes
from nemo_recipes.plan.memory import MemoryBreakdown, estimate_memory
from nemo_recipes.plan.report import PlanReport, check_inputs
from nemo_recipes.plan.rules import layout_problems, program_problems
from nemo_recipes.plan.stack import program_for

# Warn when the predicted total is within this fraction of capacity: the activation model is exact for the paper's
# analytic values, but the "other" allowance is an estimate of a few GiB.
TIGHT_MEMORY_FRACTION = 0.05


# ---- memory ----


def _error_fields(problems: list[Problem]) -> set[str]:
    return {p.field for p in problems if p.severity == ERROR}


def memory_fixes(spec: RecipeSpec, cluster: Cluster, *, stack: Optional[str] = None) -> list[str]:
    """Single changes that make `spec` fit on `cluster` without adding another error: recompute, a larger TP or
    PP, a smaller micro batch, the distributed optimizer. Each as 'field=value (total GiB)'."""
    if cluster.gpu is None:
        return []  # without a GPU type there is no memory to fit in
    capacity = cluster.gpu.memory_gib
    baseline = _error_fields(layout_problems(spec, cluster))
    fixes: list[str] = []

    def fits(candidate: RecipeSpec) -> Optional[float]:
        if _error_fields(layout_problems(candidate, cluster)) - baseline:
            return None
        total = estimate_memory(candidate, cluster, stack=stack).total
        return total if total <= capacity else None

    def first(candidates: Iterable[tuple[str, RecipeSpec]]) -> None:
        for text, candidate in candidates:
            total = fits(candidate)
            if total is not None:
                fixes.append(f"{text} ({total:.1f} GiB)")
                return

    if spec.recompute == "none":
        first([("recompute='selective'", spec.replace(recompute="selective"))])
    if spec.recompute != "full" or spec.recompute_num_layers:
        if not fixes:  # selective is cheaper; name full only when selective is not enough
            chunk = Layout.of(spec, cluster).layers_per_chunk
            first(
                (
                    (
                        f"recompute='full', recompute_num_layers={k}" if k < chunk else "recompute='full'",
                        spec.replace(recompute="full", recompute_num_layers=k if k < chunk else None),
                    )
                    for k in range(1, chunk + 1)
                )
            )
    tps = [t for t in range(spec.tensor_parallel + 1, cluster.gpus_per_node + 1) if cluster.gpus_per_node % t == 0]
    first(((f"tensor_parallel={t}", spec.replace(tensor_parallel=t)) for t in tps))
    pps = [p for p in pipeline_sizes(spec) if p > spec.pipeline_parallel]
    first(((f"pipeline_parallel={p}", spec.replace(pipeline_parallel=p, virtual_pipeline=None)) for p in pps))
    first(
        ((f"micro_batch_size={b}", spec.replace(micro_batch_size=b)) for b in range(spec.micro_batch_size - 1, 0, -1))
    )
    if not spec.distributed_optimizer:
        first([("distributed_optimizer=True", spec.replace(distributed_optimizer=True))])
    return fixes


def memory_problems(
    spec: RecipeSpec, cluster: Cluster, memory: MemoryBreakdown, *, stack: Optional[str] = None
) -> list[Problem]:
    gpu = cluster.gpu
    if gpu is None:
        return []
    parts = (
        f"weights {memory.weights:.1f}, gradients {memory.gradients:.1f}, optimizer {memory.optimizer:.1f}, "
        f"activations {memory.activations:.1f}, other {memory.other:.1f} GiB"
    )
    total = round(memory.total, 1)
    if memory.total > gpu.memory_gib:
        fixes = memory_fixes(spec, cluster, stack=stack)
        if fixes:
            fix = "any one of: " + "; ".join(fixes) + "; or let nemo_recipes.plan.fit(spec, cluster) choose."
        else:
            fix = (
                "no single change of recompute, tensor_parallel, pipeline_parallel, micro_batch_size or "
                "distributed_optimizer fits; nemo_recipes.plan.fit(spec, cluster) combines them and names the "
                "smallest cluster that fits."
            )
        return [
            Problem(
                "memory",
                total,
                f"predicted {memory.total:.1f} GiB per GPU ({parts}) exceeds the {gpu.memory_gib:g} GiB of {gpu.name}.",
                fix,
            )
        ]
    headroom = known(memory.headroom, "memory estimated on a cluster with a GPU type has its capacity")
    if headroom < TIGHT_MEMORY_FRACTION * gpu.memory_gib:
        return [
            Problem(
                "memory",
                total,
                f"predicted {memory.total:.1f} GiB per GPU ({parts}) leaves under "
                f"{TIGHT_MEMORY_FRACTION:.0%} of the {gpu.memory_gib:g} GiB of {gpu.name}; the 'other' "
                "allowance is an estimate.",
                "expect little headroom; a smaller micro batch or more recompute adds margin.",
                WARNING,
            )
        ]
    return []


def validate(spec: RecipeSpec, cluster: Cluster, *, stack: Optional[str] = None) -> PlanReport:
    """Check `spec` on `cluster` and report every problem; never raises for a bad plan.

    `stack` names the software the GPUs run (`stack.resolve_stack`): by default the NeMo container with Transformer
    Engine; "local" plans for this machine. Memory and the report's program follow from it.
    """
    check_inputs(spec, cluster)
    layout = Layout.of(spec, cluster)
    program = program_for(spec, cluster.gpu, stack, layout.interleaved)
    problems = layout_problems(spec, cluster, layout) + program_problems(spec, program)
    memory = None
    if cluster.gpu is not None:
        memory = estimate_memory(spec, cluster, layout=layout, program=program)
        problems += memory_problems(spec, cluster, memory, stack=stack)
    return PlanReport(spec=spec, cluster=cluster, problems=problems, memory=memory, layout=layout, program=program)
