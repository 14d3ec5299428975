"""One rank of `test_hf_moe.py`'s expert-parallel check (run by torchrun, one process per EP rank): for each model
of the config, the imported checkpoint loaded into Megatron's GPTModel at expert_parallel=EP, as a training run at
that EP would restore it; written back: the rank's local experts as the model holds them (`rank{R}.pt`), the
checkpoint saved again at that EP (`saved/`), and Megatron's FP32 logits of the given tokens (`logits.json`, rank 0).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(config_path: str) -> None:
    rank = int(os.environ["RANK"])
    # Megatron's import compiles an extension under a lock in the shared cache: a directory of this rank's own.
    os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(config_path).parent / f"extensions-{rank}")
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing, parallel_state

    from nemo_recipes.catalog import RecipeSpec
    from nemo_recipes.smoke_training import cpu_compat
    from nemo_recipes.smoke_training.sample import forward_logits, load_model

    config = json.loads(Path(config_path).read_text())
    for model in config["models"]:
        out = Path(model["out"])
        spec = RecipeSpec(**model["spec"])
        gpt, _ = load_model(spec, model["weights"], expert_parallel=config["expert_parallel"])
        experts = {k: v.detach().clone() for k, v in gpt.named_parameters() if "local_experts" in k}
        torch.save(experts, out / f"rank{rank}.pt")
        if rank == 0:
            (out / "saved").mkdir()
        dist.barrier()
        with cpu_compat.cpu_scope():  # the save's torch.cuda.synchronize() means the CPU here
            dist_checkpointing.save(gpt.sharded_state_dict(prefix="module."), str(out / "saved"))
        logits = forward_logits(gpt, model["ids"], spec.vocab_size)  # every rank: the experts' all-to-all
        if rank == 0:
            (out / "logits.json").write_text(json.dumps(logits))
        parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
