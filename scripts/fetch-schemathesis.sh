#!/usr/bin/env bash
# schemathesis, pinned, in .deps/schemathesis-venv (from
# tests/support/schemathesis-requirements.txt): tests/serve.rs runs it against
# the OpenAPI document `infer-stream serve` serves. infer-stream itself needs
# no Python. Safe to rerun: nothing is installed when the venv matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

pinned_venv "schemathesis venv" .deps/schemathesis-venv tests/support/schemathesis-requirements.txt 'test -x "$(dirname "$PY")/st"'
