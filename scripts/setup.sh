#!/usr/bin/env bash
# One command to set up a fresh Debian 12 machine for infer-stream:
# system packages, ONNX Runtime + models, sample media. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/fetch-models.sh
scripts/fetch-nvrtc.sh
scripts/make-samples.sh
scripts/fetch-eval-deps.sh
scripts/fetch-vision.sh
scripts/fetch-brokers.sh
scripts/fetch-deploy-tools.sh
scripts/fetch-schemathesis.sh
scripts/fetch-grpc-client.sh
