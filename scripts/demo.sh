#!/usr/bin/env bash
# Quick start: set up what running needs (scripts/setup-run.sh: packages to
# build and run, ONNX Runtime, the models, the demo's clip), build
# infer-stream's default features, and run the text-detection pipeline on the
# bundled sample. The tests' tools are scripts/test.sh's set-up, not this one.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-run.sh
echo "==> building infer-stream (release; default features: the bus and serve features are not built, see README's Build features)"
cargo build --release --locked --quiet
echo "==> infer-stream run pipelines/text-detection.toml"
target/release/infer-stream run pipelines/text-detection.toml
echo "==> first result line of out/text-detection.ndjson:"
head -n 1 out/text-detection.ndjson
