#!/usr/bin/env bash
# The whole set-up, for the tests (scripts/test.sh, CI): what the demo needs
# (scripts/setup-run.sh), then the test tools: every system package (brokers,
# servers, podman, ...), every sample, NVRTC, the brokers' and deployment
# tools, and the Python venvs of the test clients. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-run.sh
scripts/install-deps.sh
scripts/fetch-nvrtc.sh
scripts/make-samples.sh
scripts/fetch-eval-deps.sh
scripts/fetch-vision.sh
scripts/fetch-brokers.sh
scripts/fetch-deploy-tools.sh
scripts/fetch-schemathesis.sh
scripts/fetch-playwright.sh
scripts/fetch-grpc-client.sh
