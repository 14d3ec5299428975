#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install nemo-recipes with NeMo 2, NeMo-Run and Megatron-Core, pinned by
# constraints.txt. Safe to run again: an up-to-date environment is left as it is.
#   EXTRAS=test bash scripts/setup.sh     # also the test tools
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRAS=${EXTRAS:-}

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "setup: Python 3.11 or newer is needed ($PYTHON is $("$PYTHON" --version 2>&1))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip
# torch first, on its own: resolving it inside NeMo's dependency tree can pick a multi-GB CUDA build on CPU machines.
python -m pip install -q -c constraints.txt torch
target="."
[ -n "$EXTRAS" ] && target=".[$EXTRAS]"
python -m pip install -q -c constraints.txt -e "$target"
python -c 'import nemo_recipes, nemo_run; from nemo.collections import llm' 2>/dev/null \
    || { echo "setup: the stack does not import; see docs/guides/troubleshooting.md" >&2; exit 1; }
echo "setup: ready ($(python -c 'import nemo, nemo_run; print("nemo", nemo.__version__, "nemo-run", nemo_run.__version__)' 2>/dev/null | tail -1))"
