# Shared by scripts/_env.sh and scripts/setup_servers: `pkg_install VENV_PYTHON ARGS...` installs
# packages into a virtual environment with uv when it can, else with pip (the same packages, the
# same versions: uv resolves what pip resolves; session 24, with bytecode compiled as pip does: ~16-26 s
# against 62 s for loadgen's environment, 59 s against 175 s for vLLM's). uv does not read pip's configuration, so what pip is
# configured with on this machine (`pip config list`: index, extra indexes, find-links and
# constraints that exist, from its files and its PIP_* environment variables) is passed to it, and uv
# looks at every index for the best version, as pip does. LOADGEN_INSTALLER=pip keeps pip; if uv
# cannot be installed or fails, pip installs instead.
# Source it.

_pip_setting() {  # the values of one pip setting (global or from the environment), one per line
  "$1" -m pip config list 2>/dev/null | sed -nE "s/^(global|:env:|install)\.$2='(.*)'$/\2/p" | tr ' ' '\n' \
    | sed '/^$/d'
}

_uv_args() {  # uv's options for what pip is configured with here
  local py="$1" v
  while read -r v; do case "$v" in
    file://*) [ -e "${v#file://}" ] && printf -- '--index-url\n%s\n' "$v" ;;
    *) printf -- '--index-url\n%s\n' "$v" ;;
  esac; done < <(_pip_setting "$py" index-url)
  while read -r v; do case "$v" in
    file://*) [ -e "${v#file://}" ] && printf -- '--extra-index-url\n%s\n' "$v" ;;
    *) printf -- '--extra-index-url\n%s\n' "$v" ;;
  esac; done < <(_pip_setting "$py" extra-index-url)
  while read -r v; do [ -e "${v#file://}" ] && printf -- '--find-links\n%s\n' "$v"; done \
    < <(_pip_setting "$py" find-links)
  while read -r v; do [ -f "$v" ] && printf -- '--constraint\n%s\n' "$v"; done < <(_pip_setting "$py" constraint)
  return 0
}

pkg_install() {  # pkg_install VENV_PYTHON PACKAGE-ARGS...
  local py="$1"; shift
  if [ "${LOADGEN_INSTALLER:-uv}" = uv ] && { "$py" -m uv --version >/dev/null 2>&1 \
         || "$py" -m pip install --quiet --disable-pip-version-check uv >/dev/null 2>&1; }; then
    local extra=()
    mapfile -t extra < <(_uv_args "$py")
    # pip looks at every index for the best version: uv does so with unsafe-best-match
    # --compile-bytecode: as pip does (where PYTHONDONTWRITEBYTECODE is set, nothing is compiled later: every
    # process would compile what it imports again; a vLLM start took 81 s instead of 37)
    if "$py" -m uv pip install --quiet --compile-bytecode --python "$py" --index-strategy unsafe-best-match \
      "${extra[@]}" "$@"; then
      return 0
    fi
    echo "uv could not install $*: pip installs it instead" >&2
  fi
  "$py" -m pip install --quiet --disable-pip-version-check "$@"
}
