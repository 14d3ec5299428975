"""Text from a model `nemo-recipes hf export` wrote, with transformers alone (offline: nothing is downloaded).

python examples/hf_generate.py build/quickstart/hf "ROMEO:" --tokens 40
"""

from __future__ import annotations

import argparse
import os
import warnings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the directory `nemo-recipes hf export --out` wrote")
    parser.add_argument("prompt", help="the text to continue")
    parser.add_argument("--tokens", type=int, default=40, help="tokens to add (default 40)")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's import-time notice about pynvml
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    inputs = tokenizer(args.prompt, return_tensors="pt")
    room = model.config.max_position_embeddings - inputs.input_ids.shape[1]  # the context the recipe trained
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max(0, min(args.tokens, room)), do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)  # fmt: skip
    print(f"transformers ({type(model).__name__}, greedy): {tokenizer.decode(out[0])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
