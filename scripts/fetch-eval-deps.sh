#!/usr/bin/env bash
# The tracker evaluation's Python environment: .deps/eval-venv with the
# pinned motmetrics (scores, and the TUD ground truth it ships) and
# supervision (the reference ByteTrack) from tests/support/track-requirements.txt.
# Used by tests/track.rs only; infer-stream itself needs no Python. Safe to
# rerun: nothing is installed when the venv already matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

VENV=.deps/eval-venv
REQS=tests/support/track-requirements.txt

up_to_date() {
  [[ -x $VENV/bin/python ]] || return 1
  local have
  have=$("$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | sort -f) || return 1
  [[ -n $have && $have == "$(grep -v '^#' "$REQS" | sort -f)" ]] || return 1
  "$VENV/bin/python" -c 'import motmetrics, supervision; supervision.ByteTrack' 2>/dev/null
}

if up_to_date; then
  log "evaluation venv: up to date ($VENV)"
  exit 0
fi

log "creating $VENV from $REQS"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
up_to_date || die "$VENV does not match $REQS after installing (see $VENV/bin/pip freeze)"
log "evaluation venv: done"
