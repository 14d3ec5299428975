#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine (as root: Slurm and MariaDB are system
# services), check lint, format and types, then run the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
EXTRAS=test bash scripts/setup.sh
echo "test.sh: python environment ready in $(( $(date +%s) - start )) s"
. .venv/bin/activate
# The gates first: they take seconds, and a failing one needs no cluster to report (config: pyproject.toml).
ruff check .
ruff format --check .
mypy
echo "test.sh: lint, format and type checks passed"
bash .ci/start-slurm.sh
# Beside it, a two-node cluster in network namespaces for the multi-node tests (tests/test_slurm_two_nodes.py).
bash .ci/start-two-node-slurm.sh
exec python -m pytest --durations=15 "$@"
