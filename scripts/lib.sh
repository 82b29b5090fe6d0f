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
