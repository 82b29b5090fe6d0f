#!/usr/bin/env bash
# Quick start: set up this machine (packages, ONNX Runtime, models, samples),
# build infer-stream, and run the text-detection pipeline on the bundled sample.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "==> building infer-stream (release)"
cargo build --release --locked --quiet
echo "==> infer-stream run pipelines/text-detection.toml"
target/release/infer-stream run pipelines/text-detection.toml
echo "==> first result line of out/text-detection.ndjson:"
head -n 1 out/text-detection.ndjson
