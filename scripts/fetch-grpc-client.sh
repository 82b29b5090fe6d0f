#!/usr/bin/env bash
# The gRPC test client's Python environment: .deps/grpc-venv with the pinned
# grpcio and grpcio-tools from tests/support/grpc-requirements.txt. Used by
# tests/serve_infer.rs (tests/support/grpc_client.py generates its stubs from
# proto/ when it runs); infer-stream itself needs no Python. Safe to rerun:
# nothing is installed when the venv already matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

VENV=.deps/grpc-venv
REQS=tests/support/grpc-requirements.txt

up_to_date() {
  [[ -x $VENV/bin/python ]] || return 1
  local have
  have=$("$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | sort -f) || return 1
  [[ -n $have && $have == "$(grep -v '^#' "$REQS" | sort -f)" ]] || return 1
  "$VENV/bin/python" -c 'import grpc, grpc_tools.protoc' 2>/dev/null
}

if up_to_date; then
  log "gRPC client venv: up to date ($VENV)"
  exit 0
fi

log "creating $VENV from $REQS"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
up_to_date || die "$VENV does not match $REQS after installing (see $VENV/bin/pip freeze)"
log "gRPC client venv: done"
