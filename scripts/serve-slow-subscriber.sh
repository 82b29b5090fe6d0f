#!/usr/bin/env bash
# Does a live-results subscriber that reads nothing slow the pipeline, and is
# it told what it missed?
#
# Runs `infer-stream serve` with PP-OCRv4 text detection (as in
# pipelines/serve.toml) on samples/text-720p.mp4 added through POST
# /v1/streams and played again and again as fast as it goes (CPU-bound on the
# model: every queue blocks, so the decoder goes at the model's pace). The
# fps (frames the sink wrote a second) is measured in three windows, interleaved to cancel
# drift: no subscriber (QUIET s), a subscriber connected to /v1/results that
# reads nothing (SILENT s), no subscriber (QUIET s). ratio = fps with it /
# fps over both windows without. Then the silent subscriber reads: it must
# get the `dropped` event, and the drops it was told must be the hub's count
# for it (GET /v1/pipeline, `.results.subscribers`). Exit 1 if it was not
# told (or the counts differ), 2 if the ratio is below 0.95.
#   scripts/serve-slow-subscriber.sh [SILENT] [QUIET] [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SILENT=${1:-30}
QUIET=${2:-15}
BIN=${3:-target/debug/infer-stream}
PORT=18099
DIR=$(mktemp -d)
SERVE=; SUB=
trap 'kill $SERVE $SUB 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
[ -x "$BIN" ] || { echo "no $BIN: cargo build --features serve first" >&2; exit 1; }
cat > "$DIR/p.toml" <<TOML
[pipeline]
name = "slow-subscriber"
api = { listen = "127.0.0.1:$PORT", results_buffer = 64 }

[sources.clips]
kind = "file"
dynamic = true
uri = "$ROOT/samples/text-720p.mp4"
restart = "always"
restart_backoff_ms = 0

[stages.pre]
kind = "preprocess"
queue = { when_full = "block" }
inputs = ["clips"]
width = 640
height = 384
color = "bgr"
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]

[stages.det]
kind = "infer"
queue = { when_full = "block" }
inputs = ["pre"]
model = "$ROOT/models/ppocr/ch_PP-OCRv4_det_infer.onnx"

[stages.boxes]
kind = "text_detection"
queue = { when_full = "block" }
inputs = ["det"]

[sinks.out]
kind = "ndjson"
queue = { when_full = "block" }
inputs = ["boxes"]
path = "$DIR/out/{stream}.ndjson"
TOML
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
"$BIN" serve "$DIR/p.toml" 2>"$DIR/log" & SERVE=$!
for _ in $(seq 600); do curl -sf "localhost:$PORT/healthz" >/dev/null && break; sleep 0.1; done
curl -sf -X POST "localhost:$PORT/v1/streams" -d '{"source":"clips","id":"s"}' >/dev/null
# Frames through the whole pipeline: what the sink wrote.
frames() { curl -sf "localhost:$PORT/v1/pipeline" | jq '.nodes[] | select(.name == "out") | .frames_out'; }
now() { date +%s.%N; }
for _ in $(seq 600); do [ "$(frames)" -gt 0 ] && break; sleep 0.1; done
sleep 8 # warm up: the model's first runs, the decoder's threads, the page cache
# One window: "frames seconds" over $1 seconds.
window() { local f0 t0 f1 t1; f0=$(frames); t0=$(now); sleep "$1"; f1=$(frames); t1=$(now); echo "$((f1 - f0)) $(echo "$t1 - $t0" | bc)"; }
fps() { echo "scale=2; $1 / $2" | bc; }

read -r fa ta < <(window "$QUIET")
echo "window 1, no subscriber:              $(fps "$fa" "$ta") fps ($fa frames in $(printf %.1f "$ta") s)"

# The silent subscriber: subscribes, reads nothing until told, then reads the
# stream (HTTP/1.1 chunked, server-sent events) for 3 s, adding up the drops it
# is told; writes them to $DIR/told and stays connected until $DIR/close exists.
python3 - "$PORT" "$DIR" <<'PY' & SUB=$!
import json, os, socket, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /v1/results?stream=s HTTP/1.1\r\nHost: x\r\n\r\n")
open(os.path.join(d, "subscribed"), "w").close()
while not os.path.exists(os.path.join(d, "read")):
    time.sleep(0.05)  # reads nothing
f = s.makefile("rb")
while f.readline() not in (b"\r\n", b""):
    pass  # the response head
told, total, items, event, until = 0, None, 0, None, None
give_up = time.time() + 15
while time.time() < (until or give_up):
    size = int(f.readline().strip() or b"0", 16)  # one chunk
    body = f.read(size).decode()
    f.read(2)
    for line in body.splitlines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            if event == "dropped":
                d_ = json.loads(line[6:])
                told += d_["dropped"]
                total = d_["total"]
                until = until or time.time() + 3
            else:
                items += 1
with open(os.path.join(d, "told.tmp"), "w") as out:
    json.dump({"told": told, "total": total, "items_read": items}, out)
os.rename(os.path.join(d, "told.tmp"), os.path.join(d, "told"))
s.settimeout(0.2)
while not os.path.exists(os.path.join(d, "close")):
    try:
        s.recv(1 << 16)  # a fast reader now: no more drops
    except socket.timeout:
        pass
PY
for _ in $(seq 100); do [ -e "$DIR/subscribed" ] && break; sleep 0.05; done
for _ in $(seq 100); do [ "$(curl -sf "localhost:$PORT/v1/pipeline" | jq '.results.subscribers | length')" = 1 ] && break; sleep 0.05; done
read -r fb tb < <(window "$SILENT")
echo "window 2, a subscriber reading nothing: $(fps "$fb" "$tb") fps ($fb frames in $(printf %.1f "$tb") s)"

touch "$DIR/read"
for _ in $(seq 200); do [ -e "$DIR/told" ] && break; sleep 0.1; done
hub=$(curl -sf "localhost:$PORT/v1/pipeline" | jq -c '.results.subscribers[0]')
touch "$DIR/close"
wait "$SUB" || true; SUB=
told=$(jq .told "$DIR/told" 2>/dev/null || echo 0)
echo "the subscriber was told it missed $told results ($(cat "$DIR/told" 2>/dev/null || echo nothing)); the hub: $hub"

read -r fc tc < <(window "$QUIET")
echo "window 3, no subscriber:              $(fps "$fc" "$tc") fps ($fc frames in $(printf %.1f "$tc") s)"

without=$(echo "scale=3; ($fa + $fc) / ($ta + $tc)" | bc)
with=$(echo "scale=3; $fb / $tb" | bc)
ratio=$(echo "scale=3; $with / $without" | bc)
echo "fps without a subscriber (windows 1 and 3): $without; with one reading nothing: $with; ratio $ratio"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$told" -le 0 ] || [ "$told" != "$(echo "$hub" | jq .dropped)" ]; then
  echo "FAIL: the silent subscriber was not told the drops the hub made for it" >&2
  exit 1
fi
if [ "$(echo "$ratio < 0.95" | bc)" = 1 ]; then
  echo "FAIL: ratio $ratio is below 0.95" >&2
  exit 2
fi
echo "ok"
