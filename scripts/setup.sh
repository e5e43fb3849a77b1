#!/usr/bin/env bash
# Create .venv (if missing) and install rirlab with its dependencies; a no-op when nothing changed.
# CPU machines: torch==2.13.0 is installed first (a local CPU build). With a GPU, install the CUDA build of
# torch you want into .venv first (e.g. .venv/bin/pip install torch --index-url <your CUDA wheel index>);
# this script then leaves it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
quiet() { "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.rirlab-installed-$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -c "import torch" 2>/dev/null || quiet .venv/bin/python -m pip install -q torch==2.13.0
  quiet .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.rirlab-installed-*
  touch "$stamp"
fi
