# Shared helpers for scripts/*.sh. Source it after `cd` to the repo root.
# shellcheck shell=bash

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# sha256 <file>: print the file's hex sha256.
sha256() { sha256sum "$1" | cut -d' ' -f1; }

# as_root <cmd...>: run a command as root (directly, or via sudo when not root).
as_root() {
  if [[ $EUID -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root (or sudo) to run: $*"
  fi
}

# pinned_venv NAME VENV REQS CHECK: make VENV hold exactly the pins of REQS
# (pip freeze equal to the file's lines), then run the shell command CHECK
# with the venv's python as $PY (an import, a tool's presence). Nothing is
# installed when the venv already matches and CHECK passes.
pinned_venv() {
  local name=$1 venv=$2 reqs=$3 check=$4
  _venv_ok() {
    [[ -x $venv/bin/python ]] || return 1
    local have
    have=$("$venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | sort -f) || return 1
    [[ -n $have && $have == "$(grep -v '^#' "$reqs" | sort -f)" ]] || return 1
    PY=$venv/bin/python bash -c "$check" 2>/dev/null
  }
  if _venv_ok; then
    log "$name: up to date ($venv)"
    return 0
  fi
  log "creating $venv from $reqs"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
  _venv_ok || die "$venv does not match $reqs after installing (see $venv/bin/pip freeze)"
  log "$name: done"
}
