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
# Two stages. Most tests run on two pytest-xdist workers (PYTEST_WORKERS to change): a smoke run spends most of its
# time importing NeMo on one core, so two at a time nearly halve the wall time of a 2-core machine (a module
# marked xdist_group keeps its tests on one worker: its shared runs are trained once). Then, one at a
# time, the tests of the Slurm clusters (they count, requeue and cancel the jobs of clusters of 2 CPUs, and a lost
# node is noticed by a timer) and those that time how fast processes stop (marker `serial`).
status=0
stage() {  # stage ARGS...: pytest's exit status, 5 (no test selected) counted as success
    local code=0
    python -m pytest --durations=15 "$@" || code=$?
    [ "$code" -eq 5 ] && code=0
    [ "$code" -eq 0 ] || status=$code
}
stage -n "${PYTEST_WORKERS:-2}" --dist loadgroup -m "not slurm and not slurm2 and not serial" "$@"
stage -m "slurm or slurm2 or serial" "$@"
echo "test.sh: $( [ "$status" -eq 0 ] && echo "every test passed" || echo "FAILED (pytest exit status $status)" )"
exit "$status"
