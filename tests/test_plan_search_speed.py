"""The plan search's shortcuts give what the planner's public estimates give.

`search.ranked_plans` (the advice of every `plan`, `plan --best`) runs hundreds of layouts, so it skips work: the
rules that do not read recomputation run once per layout (`rules.LAYOUT_RULES`), a layout's activation terms are
computed once for every recompute mode (`memory.LayoutActivations`), memory is summed without its breakdown
(`memory.total_gib`) and candidates are timed without the rates derived from the step (`throughput.step_time`).
Each test here compares a shortcut with the slow, public way on real recipes and clusters.
"""

from __future__ import annotations

import pytest

from nemo_recipes.catalog import RECIPES, get_recipe
from nemo_recipes.errors import ERROR
from nemo_recipes.plan.hardware import Cluster, get_gpu
from nemo_recipes.plan.layout import Layout
from nemo_recipes.plan.memory import estimate_memory
from nemo_recipes.plan.rules import LAYOUT_RULES, RECOMPUTE_RULES, RULES, layout_problems, program_problems
from nemo_recipes.plan.search import (
    Space,
    _laid_out,
    _with,
    fastest_plan,
    layouts,
    ranked_plans,
    recompute_options,
)
from nemo_recipes.plan.stack import program_for
from nemo_recipes.plan.throughput import estimate_throughput

RECOMPUTE_SETTINGS = (("none", None), ("selective", None), ("full", None), ("full", 1), ("full", 3))


def _cluster(name: str, nodes: int | None = None, gpu: str | None = None) -> tuple:
    spec = get_recipe(name)
    return spec, Cluster.of(nodes or spec.num_nodes, spec.num_gpus_per_node, get_gpu(gpu or spec.default_gpu))


def test_the_rules_split_covers_every_rule_once():
    assert sorted(map(id, LAYOUT_RULES + RECOMPUTE_RULES)) == sorted(map(id, RULES))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_layout_rules_do_not_read_recomputation(name):
    """What lets the search run `LAYOUT_RULES` once per layout for every recompute mode it tries."""
    spec, cluster = _cluster(name)
    for base in list(layouts(spec, cluster, space=Space.BEST))[::7]:
        layout = Layout.of(base, cluster)
        seen = {
            (mode, n): [rule(_with(base, recompute=mode, recompute_num_layers=n), layout) for rule in LAYOUT_RULES]
            for mode, n in RECOMPUTE_SETTINGS
        }
        first = seen[RECOMPUTE_SETTINGS[0]]
        assert all(problems == first for problems in seen.values()), base


@pytest.mark.parametrize("name", ["gpt_70b", "llama_405b", "gpt_1_3b"])
def test_the_layouts_handed_on_are_those_of_their_plans(name):
    """What lets the search hand each layout it laid out to `recompute_options` instead of laying it out again,
    the interleaved ones derived from the layout without interleaving (`Layout.interleaved_by`)."""
    spec, cluster = _cluster(name)
    spec = spec.replace(distributed_optimizer=False)  # both settings of the distributed optimizer are tried
    laid = list(_laid_out(spec, cluster, space=Space.BEST, per_replica=None))
    assert [base for base, _ in laid] == list(layouts(spec, cluster, space=Space.BEST))
    assert {base.distributed_optimizer for base, _ in laid} == {False, True}
    assert any(base.virtual_pipeline for base, _ in laid)
    for base, layout in laid:
        expected = Layout.of(base, cluster)
        assert layout == expected and layout.architecture is expected.architecture, base


def _fits(spec, cluster, layout, program) -> float | None:
    """The search's test for one plan, the slow way: every rule, the stack, the full memory estimate."""
    problems = layout_problems(spec, cluster, layout) + program_problems(spec, program)
    if any(p.severity == ERROR for p in problems):
        return None
    total = estimate_memory(spec, cluster, layout=layout, program=program).total
    return total if total <= cluster.gpu.memory_gib else None


def _slow_options(base, cluster):
    """Every recompute mode of `base` that fits, full with the fewest layers per chunk that fit, found by trying
    every count (no bisection, nothing shared between modes)."""
    layout = Layout.of(base, cluster)
    program = program_for(base, cluster.gpu, None, layout.interleaved)
    found = []
    for mode in ("none", "selective"):
        candidate = _with(base, recompute=mode, recompute_num_layers=None)
        total = _fits(candidate, cluster, layout, program)
        if total is not None:
            found.append((candidate, total))
            if mode == "none":
                return found
    fitting = [
        (n, total)
        for n in range(1, layout.layers_per_chunk + 1)
        if (total := _fits(_with(base, recompute="full", recompute_num_layers=n), cluster, layout, program))
    ]
    if fitting and _fits(_with(base, recompute="full", recompute_num_layers=None), cluster, layout, program):
        n, total = fitting[0]
        every = n == layout.layers_per_chunk
        found.append((_with(base, recompute="full", recompute_num_layers=None if every else n), total))
    return found


@pytest.mark.parametrize(
    ("name", "nodes", "gpu"), [("gpt_70b", None, None), ("gpt_175b", 6, None), ("gpt_7b", 1, "a100")]
)
def test_recompute_options_find_what_trying_everything_finds(name, nodes, gpu):
    spec, cluster = _cluster(name, nodes, gpu)
    for base in layouts(spec, cluster, space=Space.BEST):
        fast = [(c, t) for c, t, _, _ in recompute_options(spec, base, cluster, space=Space.BEST, stack=None)]
        assert fast == _slow_options(base, cluster), base


@pytest.mark.parametrize(("name", "gpu"), [("gpt_70b", None), ("llama_8b", "h200"), ("gpt_1_3b", "b200")])
def test_candidates_carry_the_public_estimates(name, gpu):
    """Memory and step time of every ranked plan equal `estimate_memory` and `estimate_throughput` of that plan."""
    spec, cluster = _cluster(name, None, gpu)
    ranking = ranked_plans(spec, cluster, space=Space.BEST)
    assert len(ranking) > 10
    for candidate in ranking:
        assert candidate.total_gib == estimate_memory(candidate.spec, cluster).total
        throughput = estimate_throughput(candidate.spec, cluster)
        assert candidate.step_time_s == throughput.step_time_s
        assert candidate.breakdown == throughput.breakdown_s


@pytest.mark.parametrize(
    ("name", "nodes", "gpu"),
    [*((name, None, None) for name in sorted(RECIPES)), ("gpt_70b", 2, "h100"), ("llama_405b", 16, "a100")],
)
def test_the_advice_search_finds_the_first_of_the_ranking(name, nodes, gpu):
    """`fastest_plan` (the advice of every `plan`) times only plans that can rank first, and finds the first of
    `ranked_plans`; on 2 nodes of H100 (gpt_70b) and 16 of A100 (llama_405b) every valid plan is tight."""
    spec, cluster = _cluster(name, nodes, gpu)
    ranking = ranked_plans(spec, cluster, space=Space.BEST)
    assert fastest_plan(spec, cluster, space=Space.BEST) == ranking[0]
    assert nodes is None or all(candidate.tight for candidate in ranking)
