#!/usr/bin/env bash
# Create .venv (if missing) and install rirlab with its dependencies; a no-op when nothing changed.
# CPU machines: torch==2.13.0 is installed first (a local CPU build). With a GPU, install the CUDA build of
# torch you want into .venv first (e.g. .venv/bin/pip install torch --index-url <your CUDA wheel index>);
# this script then leaves it alone. Every step says what it does and how long it took; pip's "Collecting" lines
# show it moving (a fresh install takes minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup [$(( SECONDS / 60 ))m$(printf %02d $(( SECONDS % 60 )))s] $*"; }
# pip without -q, its download bars off; only the lines that show progress, indented (the rest is noise)
pip_progress() {
  "$@" --progress-bar off 2> >(grep -v "is ignored: it is neither" >&2) |
    { grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed)' || true; } |
    cut -c1-150 | sed -u 's/^/    /'
}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
stamp=".venv/.rirlab-installed-$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  say ".venv is up to date (rirlab and its dependencies installed); nothing to do"
  exit 0
fi
if .venv/bin/python -c "import torch" 2>/dev/null; then
  say "keeping the torch already in .venv ($(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
else
  say "installing torch==2.13.0 (CPU build, a large download: a few minutes) ..."
  pip_progress .venv/bin/python -m pip install torch==2.13.0
fi
say "installing rirlab and its dependencies (Ray, MLflow, Optuna, pandas, ...: a few minutes) ..."
pip_progress .venv/bin/python -m pip install -e '.[dev]'
rm -f .venv/.rirlab-installed-*
touch "$stamp"
say "done: .venv/bin/rirlab is ready (source .venv/bin/activate to drop the .venv/bin/ prefix)"
