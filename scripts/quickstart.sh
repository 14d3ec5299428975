#!/usr/bin/env bash
# Set up, then run the main job on real text: prepare the shipped Shakespeare corpus (training a tokenizer), plan the
# recipe with that data, build it through NeMo's own CLI, and train it with NeMo's loop on the text.
# Without GPUs the recipe trains scaled down in shape (every other choice kept) on the CPU: `nemo-recipes smoke`
# trains, stops, resumes from its checkpoint, judges the run, compares the loss with the text's unigram entropy and
# samples text from the last checkpoint. On a GPU machine, RUN=train trains the full-size recipe on this machine's
# GPUs (mock data).
#   bash scripts/quickstart.sh                             # gpt_70b: prepare, plan, dry run, smoke, export (~6 min)
#   RECIPE=gpt_1_3b RUN=train bash scripts/quickstart.sh   # full size on this machine's GPUs
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
RECIPE=${RECIPE:-gpt_70b}
if [ "${RUN:-smoke}" = train ]; then
    nemo-recipes plan "$RECIPE"
    exec nemo llm pretrain --factory "$RECIPE" --yes
fi

# One source per play. A 2,048-entry BPE vocabulary: on 1 MB of text, merges beyond a few thousand are seen too
# rarely to learn, and a small vocabulary keeps the embedding (tied with the output layer, most of the scaled-down
# model's parameters) and the softmax cheap on a CPU. A re-run finds the data up to date and redoes nothing.
DATA=${DATA:-build/quickstart/shakespeare}
nemo-recipes data prepare examples/data/shakespeare/*.jsonl --out "$DATA" --train-tokenizer --vocab-size 2048
paths=$(for f in examples/data/shakespeare/*.jsonl; do printf '%s,' "$DATA/$(basename "$f" .jsonl)"; done)
data=("data_paths=[${paths%,}]" "tokenizer_path=$DATA/tokenizer")

# The plan with this data: the tokenizer's vocabulary, each play's tokens, and how many epochs of it 300B planned
# tokens would be (a warning: this corpus is for trying things out, not for a 70B model).
nemo-recipes plan "$RECIPE" "${data[@]}"
nemo llm pretrain --factory "$RECIPE" --dryrun --yes
# 300 steps of 16 x 64 tokens, hidden 128, max_lr 3e-3 (the recipe's own 70B rate is far too low to learn anything
# in 300 steps): about 3 minutes on 2 cores, and the loss ends about 1 nat below the text's unigram entropy. The run
# is kept (a fresh one each time), so that its model can leave.
RUN_DIR=build/quickstart/run
rm -rf "$RUN_DIR"
nemo-recipes smoke "$RECIPE" "${data[@]}" --steps 300 max_lr=0.003 hidden_size=128 ffn_hidden_size=512 \
    micro_batch_size=8 global_batch_size=16 --dir "$RUN_DIR"
# The trained model as a Hugging Face model (GPT2LMHeadModel for gpt_* rows, LlamaForCausalLM for llama_*), with the
# tokenizer the data was prepared with; transformers continues a line of the text, as Megatron's sampler did above.
nemo-recipes hf export "$RUN_DIR" --out build/quickstart/hf --force
python examples/hf_generate.py build/quickstart/hf "MACBETH:" --tokens 40
