#!/usr/bin/env bash
# Set up, then run the main job: plan a recipe, build it through NeMo's own CLI, and train it with NeMo's loop.
# Without GPUs the recipe trains scaled down in shape (every other choice kept) on the CPU: `nemo-recipes smoke`
# trains, stops, resumes from its checkpoint and judges the run. On a GPU machine, RUN=train trains the full-size
# recipe on this machine's GPUs.
#   bash scripts/quickstart.sh                             # gpt_70b: plan, dry run, smoke training (~1 min on a CPU)
#   RECIPE=gpt_1_3b RUN=train bash scripts/quickstart.sh   # full size on this machine's GPUs
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
RECIPE=${RECIPE:-gpt_70b}
nemo-recipes plan "$RECIPE"
if [ "${RUN:-smoke}" = train ]; then
    exec nemo llm pretrain --factory "$RECIPE" --yes
fi
nemo llm pretrain --factory "$RECIPE" --dryrun --yes
exec nemo-recipes smoke "$RECIPE"
