"""A layout's checkpoint, exported, against its one-process reference's (tests/test_smoke_layouts.py's runs): the same
Hugging Face tensors within a bound that training noise cannot exceed and a misplaced shard, stage or chunk cannot
stay under; and the breaks an exporter assembling the layout's pieces wrongly would make, planted to fail it.

The bound, per element: the two runs start from the same weights (the invariant start) and see the same batches; they
differ only in the order of rounded sums, so their gradients differ, but each AdamW step moves an element by at most
lr_t x c_t, where c_t bounds |m_hat / sqrt(v_hat)| whatever the gradients (Cauchy-Schwarz over Adam's two moving
averages: c_t = (1 - b1) / sqrt(1 - b2) x sqrt(sum_k<t (b1^2 / b2)^k) x sqrt(1 - b2^t) / (1 - b1^t), 1.0 at the first
step and below 1.17 for b1 = 0.9, b2 = 0.95), plus the decoupled weight decay lr_t x wd x |w|. Two runs therefore
part by at most sum_t 2 lr_t (c_t + wd |w|), then each rounds its FP32 master weight to BF16: one unit in the last
place more. At the smoke schedule (max_lr 8e-5 to 1.2e-4, 20 steps) that is 1.7e-3 to 2.6e-3, while the weights have
standard deviations of 0.03 to 0.08: a shard, stage or chunk put in another's place moves most elements of a tensor by
about that, up to 0.5. Measured: TP2, PP2 and PP2 x VP2 within 0.53, 0.38 and 0.36 of the bound (a QKV bias, by sign
flips of Adam's step; the weights within one BF16 ulp); each planted break beyond it in 97-99 % of a matrix's
elements, by up to 0.45-0.55.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

#: A tensor's elements above the bound that are listed when the exports differ.
SHOWN = 3


def _spec(record: Path) -> Any:
    from nemo_recipes.catalog import RecipeSpec

    return RecipeSpec(**json.loads(record.read_text())["spec"])


def _lrs(metrics: Path) -> list[float]:
    steps = {}
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "step":
            steps[record["step"]] = record["lr"]
    return [steps[s] for s in sorted(steps)]


def adam_step_bound(step: int, beta1: float, beta2: float) -> float:
    """The largest |m_hat / sqrt(v_hat)| AdamW can take at `step` (1-based), whatever the gradients."""
    ratio = beta1 * beta1 / beta2
    series = step if ratio == 1 else (1 - ratio**step) / (1 - ratio)
    return (1 - beta1) / math.sqrt(1 - beta2) * math.sqrt(series) * math.sqrt(1 - beta2**step) / (1 - beta1**step)


def drift(spec: Any, lrs: list[float], largest_weight: float) -> float:
    """How far two runs from the same start, on the same batches, can part in one element (before BF16 rounding)."""
    return sum(
        2 * lr * (adam_step_bound(t, spec.adam_beta1, spec.adam_beta2) + spec.weight_decay * largest_weight)
        for t, lr in enumerate(lrs, start=1)
    )


def exports(run: Path, reference_root: Path, out: Path) -> tuple[dict, dict, Any, list[float]]:
    """(the layout run's last checkpoint exported, the reference's, the spec, the reference's learning rates)."""
    from nemo_recipes.conversion.hf_export import export_hf

    spec = _spec(reference_root / "reference.json")
    reference = max(reference_root.glob("reference/checkpoints/*/weights"), key=lambda p: p.stat().st_mtime)
    export_hf(str(run), str(out / "layout"), force=True)
    export_hf(str(reference.parent), str(out / "reference"), spec, force=True)
    return tensors(out / "layout"), tensors(out / "reference"), spec, _lrs(reference_root / "metrics.jsonl")


def tensors(directory: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def differences(layout: dict, reference: dict, spec: Any, lrs: list[float]) -> list[str]:
    """Each tensor of the two exports that differs beyond the bound (or is in one export only), described."""
    import torch

    found = [f"{k}: in one export only" for k in sorted(set(layout) ^ set(reference))]
    largest = max(float(t.float().abs().max()) for t in reference.values())
    allowed = drift(spec, lrs, largest)
    for key in sorted(set(layout) & set(reference)):
        a, b = layout[key].float(), reference[key].float()
        if a.shape != b.shape:
            found.append(f"{key}: shape {list(a.shape)} against {list(b.shape)}")
            continue
        magnitude = torch.maximum(a.abs(), b.abs())
        ulp = torch.where(magnitude > 0, torch.exp2(torch.floor(torch.log2(magnitude)) - 7), torch.zeros_like(a))
        excess = (a - b).abs() - (allowed + ulp)
        if (excess > 0).any():
            worst = excess.flatten().topk(min(SHOWN, excess.numel())).values.tolist()
            found.append(
                f"{key}: {int((excess > 0).sum())} of {a.numel()} elements beyond {allowed:.1e} + 1 BF16 ulp "
                f"(by up to {max(worst):.1e})"
            )
    return found


# --- planted: an exporter that assembles the layout's pieces wrongly --------------------------------------------------


def _layer_chunks(ckpt: Any, key: str) -> list[Any]:
    return list(ckpt.metadata.state_dict_metadata[key].chunks)


def _swapped_layers(ckpt: Any, key: str, same_stage: bool) -> dict[int, int]:
    """Layer -> the layer read in its place: the layers of two equal chunks of `key` exchanged, two chunks of one
    pipeline stage (its virtual chunks: saved by one rank, `same_stage`) or of two stages (by two ranks)."""
    chunks = [c for c in _layer_chunks(ckpt, key) if not any(c.offsets[1:])]  # the first TP shard's
    ranks = {id(c): _saved_by(ckpt, key, c) for c in chunks}
    for i, a in enumerate(chunks):
        for b in chunks[i + 1 :]:
            if (ranks[id(a)] == ranks[id(b)]) == same_stage and tuple(a.sizes) == tuple(b.sizes):
                ones = range(a.offsets[0], a.offsets[0] + a.sizes[0])
                twos = range(b.offsets[0], b.offsets[0] + b.sizes[0])
                return {**dict(zip(ones, twos, strict=True)), **dict(zip(twos, ones, strict=True))}
    return {}


def chunks_swapped_reader(original: Any, same_stage: bool, planted: list[str]) -> Any:
    """MegatronCheckpoint.read with the layers of two chunks of each stacked layer tensor read in each other's place:
    a stage's two virtual chunks (`same_stage`) or two stages, as an exporter that misnumbers them would."""

    def read(self: Any, key: str, layer: Any = None) -> Any:
        if layer is None or not key.startswith("module.decoder.layers."):
            return original(self, key, layer)
        swapped = _swapped_layers(self, key, same_stage)
        if layer in swapped:
            planted.append(f"{key}[{layer}]")
        return original(self, key, swapped.get(layer, layer))

    return read


def _saved_by(ckpt: Any, key: str, chunk: Any) -> str:
    """The rank that saved `chunk`: torch_dist names its files __RANK_INDEX.distcp (one rank, several files)."""
    import torch
    from torch.distributed.checkpoint.metadata import MetadataIndex

    return ckpt.metadata.storage_data[MetadataIndex(key, torch.Size(chunk.offsets))].relative_path.split("_")[2]


def transposed_tp_shard_reader(original: Any, planted: list[str]) -> Any:
    """MegatronCheckpoint.read with the second tensor-parallel shard of each matrix read as its own transpose (the
    shard's bytes taken in the other order), as an exporter that forgets which axis a shard was split on would."""

    def read(self: Any, key: str, layer: Any = None) -> Any:
        tensor = original(self, key, layer)
        if tensor.dim() != 2:
            return tensor
        for chunk in _layer_chunks(self, key):
            offsets, sizes = list(chunk.offsets), list(chunk.sizes)
            if layer is not None:
                if not offsets[0] <= layer < offsets[0] + sizes[0]:
                    continue
                offsets, sizes = offsets[1:], sizes[1:]
            if not any(offsets):
                continue  # the first shard: where a transposed second one would be noticed
            region = tensor[offsets[0] : offsets[0] + sizes[0], offsets[1] : offsets[1] + sizes[1]]
            region.copy_(region.t().reshape(region.shape).clone())
            planted.append(key)
        return tensor

    return read
