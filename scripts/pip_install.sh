# Sourced by the set-up scripts: `pip_install PYTHON ARGS...` installs into PYTHON's environment.
# uv (a pip-compatible installer) resolves and installs the serving stack several times faster than
# pip, which matters on a fresh machine (`make eval`) and in CI. uv does not read pip's configuration,
# so the index URLs, find-links and constraints this machine gives pip are passed on to it. Without
# uv (MAZE_NO_UV=1, or it cannot be installed), or when uv fails, pip does the same install.
# ARGS use only flags both accept: -q, --upgrade, -c FILE, -e PATH, requirements.

UV=""
UV_INDEX_ARGS=()  # pip's index settings as uv arguments, read once by setup_uv

# setup_uv VENV: uv into VENV (the main venv; the framework venvs use the same binary).
setup_uv() {
  [ "${MAZE_NO_UV:-0}" = 1 ] && return 0
  if [ ! -x "$1/bin/uv" ]; then
    "$1/bin/python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 || return 0
  fi
  UV="$1/bin/uv"
  mapfile -t UV_INDEX_ARGS < <(_uv_args_from_pip "$1/bin/python")
}

# pip's index settings as uv arguments (one per line), from `pip config list` (files and PIP_* variables).
_uv_args_from_pip() {
  "$1" -m pip config list 2>/dev/null | "$1" -c '
import shlex, sys
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}
seen = set()
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    flag = flags.get(key.rpartition(".")[2])
    if not flag or not value:
        continue
    for item in shlex.split(value)[0].split():
        if (flag, item) not in seen:
            seen.add((flag, item))
            print(flag); print(item)
'
}

pip_install() {
  local py="$1"; shift
  if [ -n "$UV" ]; then
    # pip picks the best version over all indexes; uv's default stops at the first index that has a package.
    if "$UV" pip install --python "$py" --index-strategy unsafe-best-match "${UV_INDEX_ARGS[@]}" "$@"; then
      return 0
    fi
    echo "uv failed; installing with pip" >&2
  fi
  "$py" -m pip install --disable-pip-version-check "$@"
}

# uv leaves no bytecode where pip compiles it at install; with PYTHONDONTWRITEBYTECODE set (as in many
# containers) every process would then compile torch, vLLM and Ray from source at each start. Called
# once after a venv's installs: compileall skips what is already compiled.
compile_bytecode() {
  [ -n "$UV" ] || return 0
  local site
  site="$("$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  "$1" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true  # a few packages ship files that never compile
}

pip_uninstall() {
  local py="$1"; shift
  if [ -n "$UV" ]; then
    "$UV" pip uninstall --python "$py" "$@" && return 0
  fi
  "$py" -m pip uninstall -y "$@"
}
