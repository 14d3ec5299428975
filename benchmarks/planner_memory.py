"""Memory per GPU of every recipe on H100 80 GB and H200 clusters of their default size, and whether each fits
as the seed gives it (the seed names no recomputation: what does each row need?).

    python benchmarks/planner_memory.py                          # the NeMo container (Transformer Engine)
    python benchmarks/planner_memory.py --stack megatron-core    # the same without Transformer Engine

Prints figures only; nothing here is asserted. Numbers come from `nemo_recipes.plan.estimate_memory` (GiB).
"""

from __future__ import annotations

import argparse

from nemo_recipes.catalog import RECIPES
from nemo_recipes.plan import STACK_CHOICES, Cluster, Layout, estimate_memory, resolve_stack, validate

GPUS = ("h100-80gb", "h200")
RECOMPUTE = ("none", "selective", "full")


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def breakdown_table(stack) -> None:
    header = [
        "recipe",
        "gpu",
        "layout",
        "recompute",
        "weights",
        "grads",
        "optim",
        "activ",
        "other",
        "total",
        "capacity",
        "valid",
    ]
    widths = [9, 10, 24, 9, 7, 7, 7, 7, 6, 7, 8, 5]
    print("Catalog defaults (the recipe as the factories build it), GiB per GPU of the most loaded stage:")
    print(_row(header, widths))
    for name, spec in RECIPES.items():
        for gpu in GPUS:
            cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, gpu)
            report = validate(spec, cluster, stack=stack)
            m = report.memory
            layout = (
                f"{spec.num_nodes}x{spec.num_gpus_per_node} TP{spec.tensor_parallel} PP{spec.pipeline_parallel}"
                f" DP{report.data_parallel_size} mbs{spec.micro_batch_size}"
            )
            print(
                _row(
                    [
                        name,
                        gpu,
                        layout,
                        spec.recompute,
                        f"{m.weights:.1f}",
                        f"{m.gradients:.1f}",
                        f"{m.optimizer:.1f}",
                        f"{m.activations:.1f}",
                        f"{m.other:.1f}",
                        f"{m.total:.1f}",
                        f"{m.capacity:.1f}",
                        "yes" if report.valid else "NO",
                    ],
                    widths,
                )
            )


def seed_table(stack) -> None:
    print()
    print(
        "Seed rows as given (TP, PP, micro batch, sequence of the seed) under each recompute choice: total GiB "
        "(* = does not fit)"
    )
    header = ["recipe", "gpu", "none", "selective", "full", "least recompute that fits"]
    widths = [9, 10, 8, 9, 8, 30]
    print(_row(header, widths))
    for name, spec in RECIPES.items():
        for gpu in GPUS:
            cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, gpu)
            cells, needed = [], None
            for recompute in RECOMPUTE:
                memory = estimate_memory(
                    spec.replace(recompute=recompute, recompute_num_layers=None), cluster, stack=stack
                )
                fits = memory.total <= memory.capacity
                cells.append(f"{memory.total:.1f}{'' if fits else '*'}")
                if fits and needed is None:
                    needed = recompute
            if needed == "full":
                needed = _fewest_full_layers(spec, cluster, stack)
            print(_row([name, gpu, *cells, needed or "none fits"], widths))


def _fewest_full_layers(spec, cluster, stack) -> str:
    """Full recompute of only the first k layers of each chunk ('block' method): the smallest k that fits."""
    layers = Layout.of(spec, cluster).layers_per_chunk
    for k in range(1, layers + 1):
        memory = estimate_memory(spec.replace(recompute="full", recompute_num_layers=k), cluster, stack=stack)
        if memory.total <= memory.capacity:
            return f"full, {k} of {layers} layers ({memory.total:.1f})"
    return "full"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--stack",
        choices=STACK_CHOICES,
        default=None,
        help="software on the GPUs (default: the NeMo container with Transformer Engine)",
    )
    args = parser.parse_args()
    print(resolve_stack(args.stack)[1])
    breakdown_table(args.stack)
    seed_table(args.stack)


if __name__ == "__main__":
    main()
