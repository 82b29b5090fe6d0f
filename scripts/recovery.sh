#!/usr/bin/env bash
# Camera recovery: run an RTSP camera pipeline (default retry settings) against
# the test camera (tests/support/rtsp_server.py), take the camera away for each
# outage length in turn and bring it back, and print, per outage, the recovery
# time (camera accepting connections again → first new frame in the pipeline's
# NDJSON output), then the worst. Fails (exit 1) if the worst exceeds LIMIT.
#
#   scripts/recovery.sh [SECONDS...]     (default: 1 2 3 5 8 13 20 30 45 60)
#
# INFER_STREAM_BIN=path/to/infer-stream uses that binary instead of building
# one; RECOVERY_PORT (default 18590) is the camera's port; RECOVERY_LIMIT
# (default 2.0) the worst recovery allowed, in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

bin=${INFER_STREAM_BIN:-}
if [[ -z $bin ]]; then
  cargo build --locked --quiet
  bin=target/debug/infer-stream
fi
[[ -x $bin ]] || die "$bin is not an executable"
[[ -x /usr/bin/python3 ]] || die "needs /usr/bin/python3 with GStreamer's RTSP server (scripts/install-deps.sh)"
for s in "$@"; do
  [[ $s =~ ^[0-9]+([.][0-9]+)?$ ]] || die "outage lengths are seconds (got '$s')"
done

exec /usr/bin/python3 scripts/recovery.py "$bin" "${RECOVERY_PORT:-18590}" "${RECOVERY_LIMIT:-2.0}" "$@"
