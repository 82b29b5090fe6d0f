#!/usr/bin/env bash
# schemathesis, pinned, in .deps/schemathesis-venv (from
# tests/support/schemathesis-requirements.txt): tests/serve.rs runs it against
# the OpenAPI document `infer-stream serve` serves. infer-stream itself needs
# no Python. Safe to rerun: nothing is installed when the venv matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

VENV=.deps/schemathesis-venv
REQS=tests/support/schemathesis-requirements.txt

up_to_date() {
  [[ -x $VENV/bin/st ]] || return 1
  local have
  have=$("$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | sort -f) || return 1
  [[ -n $have && $have == "$(grep -v '^#' "$REQS" | sort -f)" ]]
}

if up_to_date; then
  log "schemathesis venv: up to date ($VENV)"
  exit 0
fi

log "creating $VENV from $REQS"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
up_to_date || die "$VENV does not match $REQS after installing (see $VENV/bin/pip freeze)"
log "schemathesis venv: done"
