#!/usr/bin/env bash
# Throughput against the isolated stage rate, measured in one run on the 30 s
# 720p evaluation clip: decode alone, preprocess alone, inference alone, the
# rate 1/(1/decode + 1/preprocess + 1/infer) they imply run one after another
# (an estimate, not a limit), the whole pipeline, and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
cargo build --release --locked --quiet
target/release/infer-stream -q bench pipelines/text-detection-bench.toml --isolate "$@"
