"""`nemo-recipes plan`: check a recipe (or any GPT shape) against a cluster before spending GPU hours.

Catalog and planner only (standard library); matplotlib is imported only with `--plot`.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace
from typing import Any, Optional

from nemo_recipes.catalog import FAMILIES, INT64_MAX, RECIPES, RecipeSpec, closest_recipe, get_recipe
from nemo_recipes.cli import _calibrate, _output
from nemo_recipes.cli.verbs import VERBS
from nemo_recipes.errors import InvalidInputError, Problem, known, raise_if_any
from nemo_recipes.families import DEFAULT as DEFAULT_FAMILY
from nemo_recipes.families import custom_name, get_family
from nemo_recipes.overrides import apply_overrides
from nemo_recipes.plan.data import DataReport, read_data
from nemo_recipes.plan.hardware import GPUS, Cluster, get_gpu
from nemo_recipes.plan.rendering import plan_text
from nemo_recipes.plan.stack import DEFAULT_STACK, STACK_CHOICES
from nemo_recipes.plan.throughput import using_constants
from nemo_recipes.user_paths import output_problems

HELP = VERBS["plan"].help
EXAMPLES = """\
  nemo-recipes plan gpt_70b                                  # on its default cluster (4 x 8 H100 80 GB)
  nemo-recipes plan gpt_70b --nodes 16 --gpu h200 --tokens 1T
  nemo-recipes plan gpt_175b --nodes 6 --fit                 # change parallelism and batch until it fits
  nemo-recipes plan gpt_7b --gpu b200 --best                 # the fastest valid plan, and why it beats the next
  nemo-recipes plan gpt_13b --stack local                    # for this machine's software (Transformer Engine?)
  nemo-recipes plan gpt_13b tensor_parallel=4 micro_batch_size=2 --plot plan.png
  nemo-recipes plan --custom --layers 48 --hidden 6144 --heads 48 --seq 4096 --tp 4 --pp 2 --gbs 1024 --nodes 4
  nemo-recipes plan gpt_7b --json | jq .memory_gib.total
  nemo-recipes plan --calibrate cards/*.yaml                 # refit the step-time model on your runs
  nemo-recipes plan gpt_7b --calibration my_cluster.json     # plan with a calibration (see --calibrate)"""

# --custom flag -> recipe field. They also work with NAME, as shorter spellings of key=value overrides.
SHAPE_FLAGS = (
    ("layers", "num_layers", "transformer layers"),
    ("hidden", "hidden_size", "hidden size"),
    ("heads", "num_attention_heads", "attention heads"),
    ("query-groups", "num_query_groups", "key/value head groups (GQA); default: as many as heads"),
    ("ffn", "ffn_hidden_size", "MLP hidden size; default 4 x hidden"),
    ("vocab", "vocab_size", "vocabulary size before padding"),
    ("seq", "seq_length", "sequence length"),
    ("tp", "tensor_parallel", "tensor parallel size"),
    ("pp", "pipeline_parallel", "pipeline parallel size"),
    ("cp", "context_parallel", "context parallel size"),
    ("vp", "virtual_pipeline", "virtual pipeline (interleaved) stages per GPU"),
    ("mbs", "micro_batch_size", "micro batch size"),
    ("gbs", "global_batch_size", "global batch size"),
)
CUSTOM_REQUIRED = ("layers", "hidden", "heads")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Exit 2 when the plan is invalid.",
        epilog=_output.epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", metavar="NAME", nargs="?", help="a recipe name (see `nemo-recipes ls`)")
    parser.add_argument(
        "overrides",
        metavar="key=value",
        nargs="*",
        default=[],
        help="change recipe fields first, e.g. tensor_parallel=4 (names as in `nemo-recipes show`)",
    )
    hw = parser.add_argument_group("cluster (default: the recipe's own)")
    hw.add_argument("--nodes", type=int, metavar="N", help="number of nodes")
    hw.add_argument("--gpus-per-node", type=int, metavar="G", help="GPUs per node")
    hw.add_argument("--gpu", metavar="GPU", help=f"GPU model: {', '.join(GPUS)} (aliases such as h100 work)")
    what = parser.add_argument_group("what to plan")
    what.add_argument(
        "--fit",
        action="store_true",
        help="change parallelism and batch until the plan fits the cluster, and show the changes",
    )
    what.add_argument(
        "--best",
        action="store_true",
        help="search TP, PP, VP, micro batch and recompute for the fastest valid plan on the cluster "
        "(ranked by predicted step time, memory headroom breaking ties) and show the changes",
    )
    what.add_argument(
        "--stack",
        choices=STACK_CHOICES,
        default=None,
        help=f"software on the GPUs, which decides the attention kernel and the overlaps (default: "
        f"{DEFAULT_STACK}, the NeMo container; local: what this machine has)",
    )
    what.add_argument(
        "--scale-global-batch",
        action="store_true",
        help="with --fit: keep the recipe's sequences per data-parallel replica, so the global batch "
        "grows or shrinks with the cluster, and rescale max_lr (see --lr-scaling)",
    )
    what.add_argument(
        "--lr-scaling",
        choices=("sqrt", "linear", "none"),
        default=None,
        help="with --fit --scale-global-batch: how max_lr follows the global batch (default: sqrt)",
    )
    what.add_argument(
        "--tokens",
        metavar="COUNT",
        help="tokens to estimate the time to train for, e.g. 300B, 1.5T "
        "(default: the recipe's train_tokens; the schedule is unchanged)",
    )
    what.add_argument("--plot", metavar="FILE", help="draw memory per GPU and tokens/s against GPUs (.png or .svg)")
    what.add_argument(
        "--json",
        action="store_true",
        help="print the planner's report as JSON (keys: valid, recipe, cluster, parallelism, problems, "
        "memory_gib, memory_detail, throughput, time_to_train, changes, program, advice, "
        "explanation, plot)",
    )
    calib = parser.add_argument_group("calibration (the step-time model refitted on your runs)")
    calib.add_argument(
        "--calibrate",
        nargs="+",
        metavar="CARD",
        help="refit the throughput model's efficiencies on run cards (`watch RUN --gpu GPU --card FILE`) and "
        "write the calibration to --calibration FILE (default: calibration.json beside the cluster profiles, or "
        "$NEMO_RECIPES_CALIBRATION); prints the mean |error| on the runs before and after, and left out",
    )
    calib.add_argument(
        "--calibration",
        metavar="FILE",
        help="the calibration file to plan with (default: the one --calibrate writes, when it exists); it "
        "applies to plans on the GPUs, precisions and stack it was fitted on",
    )
    calib.add_argument(
        "--no-calibration", action="store_true", help="plan with the shipped constants, ignoring any calibration"
    )
    shape = parser.add_argument_group("custom shape (--custom, or with NAME as overrides)")
    shape.add_argument(
        "--custom",
        action="store_true",
        help="plan a shape of your own: needs --layers, --hidden and --heads; everything not given comes from "
        "the recipe of its --family closest in size",
    )
    shape.add_argument(
        "--family",
        metavar="FAMILY",
        help=f"with --custom: the model family whose architecture and choices the shape takes ({', '.join(FAMILIES)}; "
        f"default: {DEFAULT_FAMILY}); a recipe name says its own",
    )
    for flag, field, text in SHAPE_FLAGS:
        shape.add_argument(f"--{flag}", type=int, dest=f"shape_{field}", metavar="N", help=text)
    parser.set_defaults(run=run, json_error=json_error)


def json_error(message: str, problems: list[Problem], args: Any) -> dict[str, Any]:
    """Input that cannot be planned answers with the keys of a plan that is not valid (nothing computed), plus the
    error, so that `plan --json` has one shape whatever went wrong."""
    recipe = getattr(args, "recipe", None)
    return {
        "valid": False,
        "recipe": recipe if isinstance(recipe, str) and "=" not in recipe else None,
        "cluster": None,
        "parallelism": None,
        "problems": [p.to_dict() for p in problems],
        "memory_gib": None,
        "memory_detail": None,
        "throughput": None,
        "time_to_train": None,
        "changes": [],
        "plot": None,
        "error": message,
        "data": None,
        "calibration": None,
    }


# ---- building the plan ----

CLUSTER_FLAGS = (("nodes", "num_nodes"), ("gpus_per_node", "num_gpus_per_node"))


def _spec_and_cluster(args: argparse.Namespace) -> tuple[RecipeSpec, Cluster, Optional[int], DataReport]:
    """The recipe with the command line's changes (and its tokenizer's vocabulary), the cluster to plan on, the
    tokens to time, and what the data files say (every problem with the input at once)."""
    overrides = list(args.overrides)
    recipe = args.recipe
    if recipe is not None and "=" in recipe:  # `plan --custom ... tensor_parallel=2`: no name, only overrides
        overrides.insert(0, recipe)
        recipe = None
    shape = {
        field: getattr(args, f"shape_{field}")
        for _, field, _ in SHAPE_FLAGS
        if getattr(args, f"shape_{field}") is not None
    }
    base = _base(recipe, shape, args.custom, args.family)

    # Flags are spellings of recipe fields: the cluster flags of num_nodes and num_gpus_per_node, the shape flags of
    # theirs. A field given both ways with two values is reported, and `num_nodes=4` plans on 4 nodes as --nodes 4.
    flags = {field: (f"--{flag}", shape[field]) for flag, field, _ in SHAPE_FLAGS if field in shape}
    flags.update(
        {
            field: (f"--{option.replace('_', '-')}", getattr(args, option))
            for option, field in CLUSTER_FLAGS
            if getattr(args, option) is not None
        }
    )
    problems: list[Problem] = []
    spec = gpu = tokens = None
    applied: dict[str, Any] = {}
    try:
        spec, applied = apply_overrides(base, overrides, flags)
    except InvalidInputError as error:
        problems += error.problems
    try:
        gpu = get_gpu(args.gpu or base.default_gpu)
    except InvalidInputError as error:
        problems += error.problems
    try:
        tokens = _tokens(args.tokens)
    except InvalidInputError as error:
        problems += error.problems
    if problems:
        raise InvalidInputError(problems, context=f"recipe {base.name!r}")
    spec = known(spec, "apply_overrides gave a spec or raised, reported above")
    # The tokenizer decides the vocabulary, so parameters, memory and throughput follow it.
    spec, data = read_data(spec, vocab_given="vocab_size" in applied)
    cluster = Cluster.of(spec.num_nodes, spec.num_gpus_per_node, gpu)
    if args.fit or args.best:
        # --fit and --best move the recipe onto the cluster themselves (--fit scales the batch from the recipe's own
        # data parallelism).
        spec = spec.replace(num_nodes=base.num_nodes, num_gpus_per_node=base.num_gpus_per_node)
    return spec, cluster, tokens, data


def _tokens(text: Optional[str]) -> Optional[int]:
    """--tokens: the token count the time to train is estimated for (the recipe's train_tokens when not given)."""
    if text is None:
        return None
    try:
        tokens = _output.parse_count(text)
    except ValueError:
        tokens = 0
    if not 1 <= tokens <= INT64_MAX:
        raise InvalidInputError([Problem("tokens", text, "is not a token count.", "write it like 300B, 1.5T or 3e11.")])
    return tokens


def _base(recipe: Optional[str], shape: dict[str, Any], custom: bool, family: Optional[str]) -> RecipeSpec:
    if family is not None and not custom:
        raise InvalidInputError(
            [
                Problem(
                    "family",
                    family,
                    "goes with --custom only: a recipe's family is the one its name says.",
                    "leave --family out, or plan --custom with shape flags.",
                )
            ]
        )
    if custom:
        if recipe is not None:
            raise InvalidInputError(
                [
                    Problem(
                        "recipe",
                        recipe,
                        "cannot be combined with --custom.",
                        "give either a recipe name or --custom with shape flags.",
                    )
                ]
            )
        field_of = {flag: field for flag, field, _ in SHAPE_FLAGS}
        missing = [f"--{flag}" for flag in CUSTOM_REQUIRED if field_of[flag] not in shape]
        if missing:
            raise InvalidInputError(
                [
                    Problem(
                        "custom",
                        " ".join(missing),
                        "is required with --custom.",
                        "give --layers, --hidden and --heads (e.g. --layers 48 --hidden 6144 --heads 48).",
                    )
                ]
            )
        return _custom_base(shape, get_family(DEFAULT_FAMILY if family is None else family).name)
    if recipe is None:
        raise InvalidInputError(
            [
                Problem(
                    "recipe",
                    None,
                    "is missing.",
                    f"give a recipe name ({', '.join(RECIPES)}) or --custom with shape flags.",
                )
            ]
        )
    return get_recipe(recipe)


def _custom_base(shape: dict[str, Any], family: str) -> RecipeSpec:
    """The recipe of `family` closest in parameter count supplies every value the custom shape does not give; the
    FFN, when not given, keeps that family's ratio to the hidden size (4 x hidden for GPT, as in GPT-3), not the
    neighbour's width. The name is the family's custom name (`families.registry.custom_name`), by which the spec
    keeps its family."""
    first = next(spec for spec in RECIPES.values() if spec.family == family)
    counted = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size")
    draft = first.replace(**{k: v for k, v in shape.items() if k in counted}, **_ffn(first, shape))
    nearest = closest_recipe(draft.num_parameters, family)
    return nearest.replace(
        name=custom_name(family), size_label=f"custom, choices of {nearest.name}", **_ffn(nearest, shape)
    )


def _ffn(row: RecipeSpec, shape: dict[str, Any]) -> dict[str, int]:
    """The FFN of a custom shape that gives none: `row`'s ratio of FFN to hidden size at the shape's hidden size."""
    if "ffn_hidden_size" in shape:
        return {}
    return {"ffn_hidden_size": row.ffn_hidden_size * shape["hidden_size"] // row.hidden_size}


# ---- scaling: the same plan on more or fewer nodes ----


def _scaling(spec: RecipeSpec, cluster: Cluster, stack: Any) -> list:
    """Tokens/s at a few cluster sizes around the plan's (same global batch), where the plan stays valid."""
    from nemo_recipes.plan import assess
    from nemo_recipes.plan.plot import ScalingPoint

    points = []
    for nodes in sorted({max(1, int(cluster.nodes * f)) for f in (0.25, 0.5, 1, 2, 4, 8)}):
        try:  # beyond the bounds of a cluster, no point
            candidate = Cluster.of(nodes, cluster.gpus_per_node, cluster.gpu)
            sized = spec.replace(num_nodes=nodes)
        except InvalidInputError:
            continue
        throughput = assess(sized, candidate, stack=stack, advise=False).throughput  # None where invalid there
        if throughput is not None:
            points.append(ScalingPoint(candidate.world_size, throughput["tokens_per_s"], nodes == cluster.nodes))
    return points


def run(args: argparse.Namespace) -> int:
    if args.calibrate:
        return _calibrate.run(args)
    return _plan(args, _calibrate.chosen(args))


def _plan(args: argparse.Namespace, calibration: Any) -> int:
    if args.plot:
        from nemo_recipes.plan.plot import image_problems  # with --plot only: no plot module for a plain plan

        raise_if_any(image_problems("plot", args.plot, "plan"))
    if args.fit and args.best:
        raise InvalidInputError(
            [
                Problem(
                    "best",
                    True,
                    "cannot be combined with --fit.",
                    "use --fit to make a plan valid with few changes, or --best for the fastest valid plan.",
                )
            ]
        )
    # Options that only --fit reads would be ignored without a word: refused, like --fit with --best, because the
    # plan printed would not be the one asked for.
    alone = [
        Problem(field, value, f"changes nothing without {needs}.", f"add {needs}, or leave --{flag} out.")
        for field, value, needs, given in (
            ("scale_global_batch", True, "--fit", args.scale_global_batch and not args.fit),
            ("lr_scaling", args.lr_scaling, "--fit --scale-global-batch", args.lr_scaling is not None),
        )
        if given and not (field == "lr_scaling" and args.fit and args.scale_global_batch)
        for flag in [field.replace("_", "-")]
    ]
    if alone:
        raise InvalidInputError(alone)
    spec, cluster, tokens, data = _spec_and_cluster(args)
    if args.plot:  # a pipe would block the drawing; the recipe's files and the calibration are not overwritten
        used = [("calibration", calibration.source)] if calibration is not None else []
        raise_if_any(output_problems(args.plot, [*spec.input_paths, *used], "plot"), context="plan")
    calibrated = _calibrate.applied(calibration, spec, cluster, args.stack)
    applies = calibrated is not None and calibrated["applied"]
    with using_constants(calibration.constants) if applies else contextlib.nullcontext():
        return _planned(args, spec, cluster, tokens, data, calibrated)


def _planned(
    args: argparse.Namespace,
    spec: RecipeSpec,
    cluster: Cluster,
    tokens: Optional[int],
    data: DataReport,
    calibrated: "dict | None",
) -> int:
    from nemo_recipes.plan import best, fit, validate, with_estimates  # the planner: standard library only

    explanation = None
    if args.fit or args.best:
        if args.best:
            result = best(spec, cluster, stack=args.stack)
        else:
            result = fit(
                spec,
                cluster,
                scale_global_batch=args.scale_global_batch,
                lr_scaling=None if args.lr_scaling == "none" else (args.lr_scaling or "sqrt"),
                stack=args.stack,
            )
        spec, report, explanation = result.spec, result.report, result.explanation or None
    else:
        report = validate(spec, cluster, stack=args.stack)

    report = with_estimates(report, tokens=tokens, stack=args.stack, advise=not args.best)
    report = replace(report, problems=report.problems + list(data.problems))

    plotted = None
    if args.plot:
        plotted = _plot(args.plot, report, spec, cluster, report.throughput, args.stack)

    payload = report.to_dict()
    payload["explanation"] = explanation
    payload["plot"] = plotted
    payload["data"] = data.to_dict()
    payload["calibration"] = calibrated
    if args.json:
        _output.print_json(payload)
    else:
        changed_by = "--best" if args.best else "--fit"
        print(plan_text(payload, spec, changed_by=changed_by, faster="--best", data=data.format()))
    return _output.EXIT_OK if report.valid else _output.EXIT_INVALID


def _plot(path: str, report: Any, spec: RecipeSpec, cluster: Cluster, throughput: Any, stack: Any) -> str:
    from nemo_recipes.plan.plot import plot_plan  # standard library only: matplotlib is imported when it draws

    try:
        import matplotlib  # noqa: F401  (checked here to give the install hint rather than a traceback)
    except ImportError:
        raise _output.CLIError("--plot needs matplotlib; install it with: pip install 'nemo-recipes[plot]'") from None
    memory = report.to_dict()["memory_gib"] or {}
    scaling = _scaling(spec, cluster, stack) if throughput is not None else []
    gpu = cluster.gpu.name if cluster.gpu else "GPUs"
    title = f"{spec.name} on {cluster.nodes} x {cluster.gpus_per_node} {gpu} ({cluster.world_size} GPUs)" + (
        "" if report.valid else ": INVALID"
    )
    try:
        return plot_plan(path, title=title, memory_gib=memory, scaling=scaling if len(scaling) > 1 else None)
    except OSError as error:
        raise _output.CLIError(f"cannot write {path}: {error.strerror or error}") from None
