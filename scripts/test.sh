#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine (as root: Slurm and MariaDB are system
# services), then run the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
EXTRAS=test bash scripts/setup.sh
echo "test.sh: python environment ready in $(( $(date +%s) - start )) s"
bash .ci/start-slurm.sh
# Beside it, a two-node cluster in network namespaces for the multi-node tests (tests/test_slurm_two_nodes.py).
bash .ci/start-two-node-slurm.sh
. .venv/bin/activate
exec python -m pytest "$@"
