# Shared by scripts/demo and scripts/test: create (or reuse) the project's virtual
# environment and install loadgen into it. Source it; it sets VENV and PY.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LOADGEN_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "loadgen needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
EXTRAS="${LOADGEN_EXTRAS:-fast,tokenizers,report}"
stamp="$VENV/.loadgen-installed-$(cat "$ROOT/pyproject.toml" | sha1sum | cut -c1-12)-${EXTRAS//,/_}"
if [ ! -f "$stamp" ]; then
  "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  # --no-compile: no .pyc for the ~8,000 files of the extras up front (18 s of CPU on 2 cores, on the path of
  # every first install); Python writes one for each module the first time it is imported
  "$PY" -m pip install --quiet --disable-pip-version-check --no-compile -e "$ROOT[$EXTRAS]"
  rm -f "$VENV"/.loadgen-installed-*
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
