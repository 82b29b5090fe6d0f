#!/usr/bin/env bash
# What do live-view viewers cost the pipeline?
#
# Runs `infer-stream serve pipelines/serve.toml` (PP-OCRv4 text detection)
# with its sample stream and two cameras added through POST /v1/streams, both
# from the RTSP test camera (tests/support/rtsp_server.py) at 30 fps: more
# than the model keeps up with on a small machine, so the pipeline is
# CPU-bound and its fps (frames the `results` sink wrote a second, all three
# streams) shows any cost. Windows
# of WIN s are interleaved to cancel drift: ROUNDS rounds of (no viewer, one
# viewer per stream reading live.mjpeg at the default 5 fps), then one more
# without; then a viewer per stream that asks for live.mjpeg and reads
# nothing for STALL s (default 30), between two windows of as long without.
# ratio = fps with viewers / fps without them. The reading viewers must get
# pictures, encoded once for all viewers of a stream, and the stalled
# viewers' pictures must be dropped for them (GET /v1/pipeline,
# `.live.dropped`) and, once they count as stalled (their buffer full for
# 2 s), no more pictures encoded for them. Exit 1 if the viewers got nothing or nothing was dropped
# for the stalled ones, 2 if a ratio is below 0.95.
#   scripts/serve-live-cost.sh [STALL] [ROUNDS] [WIN] [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
STALL=${1:-30}
ROUNDS=${2:-3}
WIN=${3:-10}
BIN=${4:-target/debug/infer-stream}
PORT=18097
CAM_PORT=18554
DIR=$(mktemp -d)
SERVE=; CAM=; VIEWERS=
STREAMS="sample live-cost-1 live-cost-2"
trap 'kill $SERVE $CAM $VIEWERS 2>/dev/null || true; wait 2>/dev/null || true; if [ -z "${KEEP:-}" ]; then rm -rf "$DIR" out/serve/live-cost-*.ndjson; else echo "kept $DIR" >&2; fi' EXIT
[ -x "$BIN" ] || { echo "no $BIN: cargo build --features serve first" >&2; exit 1; }
[ -e models/ppocr/ch_PP-OCRv4_det_infer.onnx ] || { echo "no models: scripts/setup.sh first" >&2; exit 1; }

/usr/bin/python3 tests/support/rtsp_server.py "$CAM_PORT" --fps 30 >"$DIR/cam.log" 2>&1 & CAM=$!
for _ in $(seq 100); do grep -q ready "$DIR/cam.log" && break; sleep 0.1; done
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
"$BIN" serve pipelines/serve.toml --listen "$PORT" 2>"$DIR/log" & SERVE=$!
for _ in $(seq 600); do curl -sf "localhost:$PORT/healthz" >/dev/null && break; sleep 0.1; done
for id in live-cost-1 live-cost-2; do
  curl -sf -X POST "localhost:$PORT/v1/streams" \
    -d "{\"source\":\"cams\",\"id\":\"$id\",\"uri\":\"rtsp://127.0.0.1:$CAM_PORT/cam\"}" >/dev/null
done
pipeline() { curl -sf "localhost:$PORT/v1/pipeline"; }
frames() { pipeline | jq '.nodes[] | select(.name == "results") | .frames_out'; }
now() { date +%s.%N; }
for _ in $(seq 600); do [ "$(frames)" -gt 0 ] && break; sleep 0.1; done
sleep 8 # warm up: the model's first runs, the decoders' threads
# One window: "frames seconds" over $1 seconds.
window() { local f0 t0 f1 t1; f0=$(frames); t0=$(now); sleep "$1"; f1=$(frames); t1=$(now); echo "$((f1 - f0)) $(echo "$t1 - $t0" | bc)"; }
fps() { echo "scale=2; $1 / $2" | bc; }

start_viewers() {
  for id in $STREAMS; do
    curl -sN "localhost:$PORT/v1/streams/$id/live.mjpeg" -o "$DIR/$id.$1.mjpeg" & VIEWERS="$VIEWERS $!"
  done
  for _ in $(seq 100); do [ "$(pipeline | jq .live.viewers)" = 3 ] && break; sleep 0.05; done
}
stop_viewers() {
  # shellcheck disable=SC2086
  kill $VIEWERS 2>/dev/null || true; wait $VIEWERS 2>/dev/null || true; VIEWERS=
  for _ in $(seq 100); do [ "$(pipeline | jq .live.viewers)" = 0 ] && break; sleep 0.05; done
}

# ROUNDS rounds of (no viewer, one viewer per stream), then no viewer again.
fq=0; tq=0; fv=0; tv=0
enc0=$(pipeline | jq .live.encoded)
for r in $(seq "$ROUNDS"); do
  read -r f t < <(window "$WIN")
  echo "round $r, no viewer:                $(fps "$f" "$t") fps ($f frames in $(printf %.1f "$t") s)"
  fq=$((fq + f)); tq=$(echo "$tq + $t" | bc)
  start_viewers "$r"
  read -r f t < <(window "$WIN")
  stop_viewers
  echo "round $r, one viewer per stream:    $(fps "$f" "$t") fps ($f frames in $(printf %.1f "$t") s)"
  fv=$((fv + f)); tv=$(echo "$tv + $t" | bc)
done
read -r f t < <(window "$WIN")
echo "last, no viewer:                    $(fps "$f" "$t") fps ($f frames in $(printf %.1f "$t") s)"
fq=$((fq + f)); tq=$(echo "$tq + $t" | bc)
enc1=$(pipeline | jq .live.encoded)
got=$(cat "$DIR"/*.mjpeg | grep -a -c '^Content-Type: image/jpeg' || true)
echo "the viewers got $got pictures; the server encoded $((enc1 - enc0)) (one encode per picture for all viewers of a stream)"

# Stalled viewers: each asks for the pictures and reads nothing for STALL s,
# between two windows without a viewer.
read -r fa ta < <(window "$STALL")
echo "before the stall, no viewer:        $(fps "$fa" "$ta") fps ($fa frames in $(printf %.1f "$ta") s)"
drop0=$(pipeline | jq .live.dropped)
for id in $STREAMS; do
  python3 - "$PORT" "$id" <<'PY' & VIEWERS="$VIEWERS $!"
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(f"GET /v1/streams/{sys.argv[2]}/live.mjpeg HTTP/1.1\r\nHost: x\r\n\r\n".encode())
time.sleep(3600)  # reads nothing
PY
done
for _ in $(seq 100); do [ "$(pipeline | jq .live.viewers)" = 3 ] && break; sleep 0.05; done
# The fps over the whole stall; pictures encoded for the stalled viewers over
# its last third (by then the sockets and the server's buffers are full, a
# few hundred KB of small pictures, and the viewers count as stalled).
f0=$(frames); t0=$(now)
sleep "$((STALL * 2 / 3))"
enc2=$(pipeline | jq .live.encoded)
sleep "$((STALL - STALL * 2 / 3))"
fs=$(($(frames) - f0)); ts=$(echo "$(now) - $t0" | bc)
drop1=$(pipeline | jq .live.dropped); enc3=$(pipeline | jq .live.encoded)
stop_viewers
echo "a stalled viewer per stream:        $(fps "$fs" "$ts") fps ($fs frames in $(printf %.1f "$ts") s; $((drop1 - drop0)) pictures dropped for them, $((enc3 - enc2)) encoded in its last $((STALL - STALL * 2 / 3)) s)"
read -r fb tb < <(window "$STALL")
echo "after the stall, no viewer:         $(fps "$fb" "$tb") fps ($fb frames in $(printf %.1f "$tb") s)"

without=$(echo "scale=3; $fq / $tq" | bc)
viewing=$(echo "scale=3; $fv / $tv" | bc)
around=$(echo "scale=3; ($fa + $fb) / ($ta + $tb)" | bc)
stalled=$(echo "scale=3; $fs / $ts" | bc)
r_view=$(echo "scale=3; $viewing / $without" | bc)
r_stall=$(echo "scale=3; $stalled / $around" | bc)
echo "viewing: $viewing fps against $without without (ratio $r_view); stalled: $stalled fps against $around around it (ratio $r_stall)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
# Stalled viewers cost encodes only until they count as stalled (2 s of a full buffer).
limit=3
if [ "$got" -le 0 ] || [ $((drop1 - drop0)) -le 0 ] || [ $((enc3 - enc2)) -gt $limit ]; then
  echo "FAIL: the viewers got no pictures, none were dropped for the stalled ones, or more than $limit were encoded for them" >&2
  exit 1
fi
if [ "$(echo "$r_view < 0.95 || $r_stall < 0.95" | bc)" = 1 ]; then
  echo "FAIL: a ratio is below 0.95" >&2
  exit 2
fi
echo "ok"
