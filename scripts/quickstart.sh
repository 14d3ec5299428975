#!/usr/bin/env bash
# Set up, then run the main job: the 70B recipe through NeMo's own CLI. Without GPUs this is a dry run (NeMo's
# training loop needs CUDA); on a GPU machine, RUN=train trains on this machine's GPUs.
#   bash scripts/quickstart.sh                       # dry run of gpt_70b
#   RECIPE=gpt_1_3b RUN=train bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
RECIPE=${RECIPE:-gpt_70b}
nemo-recipes plan "$RECIPE"
if [ "${RUN:-dryrun}" = train ]; then
    exec nemo llm pretrain --factory "$RECIPE" --yes
fi
exec nemo llm pretrain --factory "$RECIPE" --dryrun --yes
