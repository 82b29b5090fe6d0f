#!/usr/bin/env bash
# The tracker evaluation's Python environment: .deps/eval-venv with the
# pinned motmetrics (scores, and the TUD ground truth it ships) and
# supervision (the reference ByteTrack) from tests/support/track-requirements.txt.
# Used by tests/track.rs only; infer-stream itself needs no Python. Safe to
# rerun: nothing is installed when the venv already matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

pinned_venv "evaluation venv" .deps/eval-venv tests/support/track-requirements.txt '"$PY" -c "import motmetrics, supervision; supervision.ByteTrack"'
