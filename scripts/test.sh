#!/usr/bin/env bash
# Quick start: set up this machine, then build and run every test
# (unit, integration on the real binary, samples and models) with all features.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "==> cargo test --all-features"
cargo test --locked --all-features "$@"
