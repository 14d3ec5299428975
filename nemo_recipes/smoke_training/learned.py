"""Did a smoke run on the user's data learn the text? Two pieces of evidence beside the loss curve:

- the data's unigram entropy under its tokenizer, -sum p log p over the blend's token frequencies (in nats, as the
  loss is): a model that only learned how often each token occurs reaches it and no lower, so a loss clearly below
  it means the model predicts from context;
- text sampled from the last checkpoint through Megatron's own forward pass (`sample.py`, in a process of its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.catalog import RecipeSpec

#: Tokens the sampler adds to each prompt; prompts are the first PROMPT_TOKENS tokens of the first document.
SAMPLE_TOKENS = 48
PROMPT_TOKENS = 6
#: Greedy, then sampled at this temperature.
TEMPERATURES = (0.0, 0.8)
#: Steps at the end of the run whose mean loss is compared with the entropy (single steps are noisy).
LAST_STEPS = 10


@dataclass
class Learned:
    unigram_entropy: float
    final_loss: float  # mean of the last `final_steps` steps
    final_steps: int  # LAST_STEPS, or every step of a shorter run
    samples: list[dict[str, Any]] = field(default_factory=list)
    sample_error: Optional[str] = None

    @property
    def below(self) -> float:
        return self.unigram_entropy - self.final_loss

    def to_dict(self) -> dict[str, Any]:
        return {
            "unigram_entropy": self.unigram_entropy,
            "final_loss": self.final_loss,
            "final_loss_steps": self.final_steps,
            "below_unigram_entropy": self.below,
            "samples": self.samples,
            "sample_error": self.sample_error,
        }

    def format(self) -> list[str]:
        verdict = (
            f"{self.below:.2f} below it: the model predicts from context, not only token frequencies"
            if self.below > 0
            else "not below it: train more steps (or a higher max_lr) to learn more than token frequencies"
        )
        lines = [
            f"  learned     mean loss of the last {self.final_steps} steps {self.final_loss:.3f} nats; the data's "
            f"unigram entropy {self.unigram_entropy:.3f} nats; {verdict}"
        ]
        for sample in self.samples:
            how = "greedy" if not sample["temperature"] else f"temperature {sample['temperature']}"
            lines.append(f"  sample      ({how}) " + sample["text"].replace("\n", "\n              "))
        if self.sample_error:
            lines.append(f"  sample      failed: {self.sample_error}")
        return lines


def _tokens(prefix: str) -> Any:
    import numpy as np

    from nemo_recipes.data.manifest import index_summary

    return np.memmap(f"{prefix}.bin", dtype=np.dtype(index_summary(prefix).dtype), mode="r")


def unigram_entropy(spec: RecipeSpec) -> float:
    """-sum p log p (nats) of the token distribution Megatron samples: each source's frequencies mixed by its
    normalised weight (equal weights when none are given, as the recipe's blend)."""
    import numpy as np

    weights = np.asarray(spec.data_weights or (1.0,) * len(spec.data_paths), dtype=np.float64)
    weights /= weights.sum()
    mixed = np.zeros(0)
    for path, weight in zip(spec.data_paths, weights, strict=True):
        counts = np.bincount(np.asarray(_tokens(path), dtype=np.int64)).astype(np.float64)
        if len(counts) > len(mixed):
            mixed = np.pad(mixed, (0, len(counts) - len(mixed)))
        mixed[: len(counts)] += weight * counts / counts.sum()
    p = mixed[mixed > 0]
    return float(-(p * np.log(p)).sum())


def learned(
    spec: RecipeSpec,
    losses: list[tuple[int, float]],
    root: Path,
    checkpoint: Optional[str],
    sample: bool,
    entropy: Optional[float] = None,
) -> Learned:
    """The evidence for a finished run whose spec names data_paths (and, to sample, tokenizer_path); `entropy`: the
    data's unigram entropy where the caller has it already."""
    last = [loss for _, loss in losses[-LAST_STEPS:]]
    result = Learned(
        unigram_entropy=unigram_entropy(spec) if entropy is None else entropy,
        final_loss=sum(last) / len(last),
        final_steps=len(last),
    )
    if sample and checkpoint and spec.tokenizer_path:
        try:
            result.samples = run_sampler(spec, f"{checkpoint}/weights", root)
        except RuntimeError as error:
            result.sample_error = str(error)
    return result


def run_sampler(spec: RecipeSpec, weights: str, root: Path) -> list[dict[str, Any]]:
    """Samples from the checkpoint at `weights`, in a fresh process (log: root/sample.log)."""
    prompt = _tokens(spec.data_paths[0])[:PROMPT_TOKENS].tolist()
    config = {
        "spec": spec.to_dict(),
        "weights": weights,
        "prompt_ids": prompt,
        "tokens": SAMPLE_TOKENS,
        "temperatures": list(TEMPERATURES),
    }
    (root / "sample.json").write_text(json.dumps(config), encoding="utf-8")
    with open(root / "sample.log", "wb") as log:
        code = subprocess.call(
            [sys.executable, "-m", "nemo_recipes.smoke_training.sample", str(root / "sample.json"),
             str(root / "samples.json")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    if code != 0:
        raise RuntimeError(f"the sampler exited with status {code}; log: {root / 'sample.log'}")
    return list(json.loads((root / "samples.json").read_text(encoding="utf-8"))["samples"])
