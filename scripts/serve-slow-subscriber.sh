#!/usr/bin/env bash
# Does a live-results subscriber that reads nothing slow the pipeline?
# Runs `infer-stream serve` on a small clip played again and again as fast as
# it decodes (CPU-bound: any cost shows), measures the stream's fps for
# SECONDS (default 30) with no subscriber, then for SECONDS with a subscriber
# that connects to /v1/results and reads nothing, and prints the ratio and
# the drops the hub counted for that subscriber.
#   scripts/serve-slow-subscriber.sh [SECONDS] [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
BIN=${2:-target/debug/infer-stream}
PORT=18099
DIR=$(mktemp -d)
trap 'kill $SERVE $SILENT 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
SERVE=; SILENT=
ffmpeg -v error -f lavfi -i testsrc=size=160x120:rate=30 -t 20 -c:v libx264 -preset ultrafast -pix_fmt yuv420p -g 30 "$DIR/clip.mp4"
cat > "$DIR/p.toml" <<TOML
[pipeline]
api = { listen = "127.0.0.1:$PORT", results_buffer = 256 }
[sources.clips]
kind = "file"
dynamic = true
uri = "$DIR/clip.mp4"
restart = "always"
restart_backoff_ms = 0
[sinks.out]
kind = "ndjson"
inputs = ["clips"]
path = "$DIR/out/{stream}.ndjson"
TOML
"$BIN" serve "$DIR/p.toml" 2>"$DIR/log" & SERVE=$!
for _ in $(seq 100); do curl -sf "localhost:$PORT/healthz" >/dev/null && break; sleep 0.1; done
curl -sf -X POST "localhost:$PORT/v1/streams" -d '{"source":"clips","id":"s"}' >/dev/null
frames() { curl -sf "localhost:$PORT/v1/streams/s" | jq .frames; }
sleep 3
a=$(frames); sleep "$SECS"; b=$(frames)
python3 - "$PORT" "$((SECS + 5))" <<'PY' & SILENT=$!
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /v1/results?stream=s HTTP/1.1\r\nHost: x\r\n\r\n")
time.sleep(float(sys.argv[2]))  # reads nothing
PY
sleep 1
c=$(frames); sleep "$SECS"; d=$(frames)
subs=$(curl -sf "localhost:$PORT/v1/pipeline" | jq -c '.results.subscribers')
without=$(echo "scale=1; ($b - $a) / $SECS" | bc)
with=$(echo "scale=1; ($d - $c) / $SECS" | bc)
ratio=$(echo "scale=3; ($d - $c) / ($b - $a)" | bc)
echo "fps without a subscriber: $without; with one that reads nothing: $with; ratio $ratio"
echo "the silent subscriber: $subs"
