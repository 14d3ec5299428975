"""What users see of every catalog recipe, as bytes: `show --json`, `plan --json` (its default cluster, and a fitted
one on another cluster), `export` (the NeMo-Run configuration as written, and the values of the model config class
it names, which the YAML only names) and, per family, the tensors `hf export` writes from a small torch_dist
checkpoint (`hf import`'s of a seeded tiny Hugging Face model, as tests/test_hf_import.py builds it). Recorded in
tests/golden/recipes/ by tests/test_recipe_outputs.py, which fails on any byte of difference: a change of structure
must leave every one of them as it was."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path
from typing import Any, Callable

GOLDEN = Path(__file__).parent / "golden" / "recipes"
#: A case on another cluster than the row's own, planned with --fit (the search over layouts), per family.
FITTED = {
    "gpt_13b": ["--nodes", "2", "--gpu", "a100-80gb", "--fit"],
    "llama_8b": ["--nodes", "1", "--gpus-per-node", "4", "--gpu", "h200", "--fit"],
}
#: The tiny Hugging Face models of each family (tests/test_hf_import.py's shapes) and the recipe each imports into.
HF_CASES = {"gpt": "gpt_1_3b", "llama": "llama_8b"}
ONE_PROCESS = ["tensor_parallel=1", "pipeline_parallel=1", "virtual_pipeline=null", "context_parallel=1"]


def _cli(argv: list[str]) -> bytes:
    """`nemo-recipes ARGV` in this process (the command's own code path; one process for every call)."""
    from nemo_recipes.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    assert code == 0, (argv, code, out.getvalue()[-2000:])
    return out.getvalue().encode()


def fast_outputs(names: list[str]) -> dict[str, bytes]:
    """show and plan of each recipe: file name -> bytes."""
    found: dict[str, bytes] = {}
    for name in names:
        found[f"{name}.show.json"] = _cli(["show", name, "--json"])
        found[f"{name}.plan.json"] = _cli(["plan", name, "--json", "--no-calibration"])
        if name in FITTED:
            found[f"{name}.plan_fit.json"] = _cli(["plan", name, *FITTED[name], "--json", "--no-calibration"])
    return found


def _value(value: Any) -> Any:
    if callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return repr(value)


def export_outputs(names: list[str]) -> dict[str, bytes]:
    """export's YAML of each recipe (--no-check: llama_70b's YAML does not load back equal today, a fault of its
    own), and the fields of the model config class it names (NeMo imported)."""
    import dataclasses

    from nemo_recipes.training.model import CONFIG_CLASSES

    found: dict[str, bytes] = {}
    for name in names:
        found[f"{name}.export.yaml"] = _cli(["export", name, "--format", "yaml", "--no-check"])
        # The class's defaults (building one runs Megatron's checks of a GPU run): what the YAML's target holds.
        values = {
            f.name: _value(f.default)
            for f in dataclasses.fields(CONFIG_CLASSES[name])
            if f.default is not dataclasses.MISSING
        }
        found[f"{name}.model_config.json"] = (json.dumps(values, indent=1, sort_keys=True) + "\n").encode()
    return found


def _digests(directory: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    tensors = {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    return {
        key: [str(t.dtype), list(t.shape), hashlib.sha256(t.contiguous().view(-1).view(__import__("torch").uint8)
                                                          .numpy().tobytes()).hexdigest()]
        for key, t in sorted(tensors.items())
    }  # fmt: skip


def hf_outputs(tmp: Path, model: Callable[[str], Any]) -> dict[str, bytes]:
    """Per family: a seeded tiny Hugging Face model imported as the recipe's torch_dist checkpoint, that checkpoint
    exported; the exported config.json and a digest of every tensor written."""
    import torch

    from nemo_recipes.catalog import get_recipe
    from nemo_recipes.conversion.hf_export import export_hf
    from nemo_recipes.conversion.hf_import import import_hf
    from nemo_recipes.overrides import apply_overrides

    found: dict[str, bytes] = {}
    for family, recipe in HF_CASES.items():
        model(family).to(torch.bfloat16).save_pretrained(tmp / family / "hf")
        spec, given = apply_overrides(get_recipe(recipe), ONE_PROCESS)
        report = import_hf(str(tmp / family / "hf"), spec, str(tmp / family / "ckpt"), given=given)
        export_hf(str(tmp / family / "ckpt"), str(tmp / family / "out"), spec.replace(**report.overrides))
        config = json.loads((tmp / family / "out" / "config.json").read_text())
        config.pop("transformers_version", None)
        record = {"config": config, "tensors": _digests(tmp / family / "out")}
        found[f"hf_{family}.json"] = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    return found
