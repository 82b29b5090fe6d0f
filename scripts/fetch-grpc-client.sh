#!/usr/bin/env bash
# The gRPC test client's Python environment: .deps/grpc-venv with the pinned
# grpcio and grpcio-tools from tests/support/grpc-requirements.txt. Used by
# tests/serve_infer.rs (tests/support/grpc_client.py generates its stubs from
# proto/ when it runs); infer-stream itself needs no Python. Safe to rerun:
# nothing is installed when the venv already matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

pinned_venv "gRPC client venv" .deps/grpc-venv tests/support/grpc-requirements.txt '"$PY" -c "import grpc, grpc_tools.protoc"'
