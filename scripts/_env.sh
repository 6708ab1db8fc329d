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
  source "$ROOT/scripts/_install.sh"  # uv where it can (CI: ~16 s against pip's 62 s), else pip
  pkg_install "$PY" -e "$ROOT[$EXTRAS]"
  rm -f "$VENV"/.loadgen-installed-*
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
