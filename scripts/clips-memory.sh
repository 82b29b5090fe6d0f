#!/usr/bin/env bash
# Event clips' memory: STREAMS (default 32) streams of 1080p H.264 at 4 Mb/s
# (one file made with ffmpeg's libx264, 25 fps, a keyframe every 2 s, used
# STREAMS times), each with a packet ring for a clips sink with pre_s = 5.
# Scrapes /metrics while it runs and prints the largest total of
# infer_stream_clip_ring_bytes (every stream's ring) and the process's
# resident memory, with and without the clips sink (the same streams into a
# null sink), and checks the rings against the budget in docs/clips.md:
# (pre_s + one GOP + 1 s) of 4 Mb/s per stream, 4 MB (8 s × 0.5 MB/s), plus
# a quarter, so 5 MB per stream (160 MB for 32). Exit 1 over budget.
#
#   scripts/clips-memory.sh [SECONDS]     (the file's length, default 20)
#
# INFER_STREAM_BIN=path/to/infer-stream uses that binary instead of building a
# release one; STREAMS sets the number of streams.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

seconds=${1:-20}
streams=${STREAMS:-32}
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 8 ]] || die "SECONDS must be a whole number, at least 8 (got '$seconds')"
bin=${INFER_STREAM_BIN:-}
if [[ -z $bin ]]; then
  cargo build --release --locked --quiet
  bin=target/release/infer-stream
fi
[[ -x $bin ]] || die "$bin is not an executable"

out=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$out"' EXIT
video=$out/1080p-4mbps.mp4
log "making $video: ${seconds} s of 1080p25 H.264 at 4 Mb/s, a keyframe every 2 s"
ffmpeg -nostdin -y -loglevel error -f lavfi -i "testsrc2=s=1920x1080:r=25:d=$seconds" \
  -c:v libx264 -preset ultrafast -b:v 4M -maxrate 4M -bufsize 8M -g 50 -keyint_min 50 -sc_threshold 0 -pix_fmt yuv420p "$video"
bytes=$(stat -c %s "$video")
log "$(( bytes * 8 / seconds / 1000 )) kb/s on average"

# pipeline FILE SINK_KIND PORT: STREAMS file sources (in real time) into one sink.
pipeline() {
  local file=$1 sink=$2 port=$3
  {
    printf '[pipeline]\nmetrics_addr = "127.0.0.1:%s"\n\n' "$port"
    for i in $(seq 1 "$streams"); do
      printf '[sources.cam%s]\nkind = "file"\nuri = "%s"\nrealtime = true\n\n' "$i" "$video"
    done
    printf '[sinks.out]\nkind = "%s"\ninputs = [' "$sink"
    for i in $(seq 1 "$streams"); do printf '"cam%s"%s' "$i" "$([[ $i -lt $streams ]] && echo ', ')"; done
    printf ']\n'
    if [[ $sink == clips ]]; then
      printf 'on = ["lost"]\npre_s = 5\npost_s = 5\npath = "%s/clips/{stream}-{seq}.mp4"\n' "$out"
    fi
  } > "$file"
}

# measure SINK: run, scrape every second; prints "ring_max rss_max".
measure() {
  local sink=$1 port ring_max=0 rss_max=0
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  pipeline "$out/$sink.toml" "$sink" "$port"
  "$bin" -q run "$out/$sink.toml" 2>"$out/$sink.log" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    local m
    m=$(curl -s --max-time 2 "http://127.0.0.1:$port/metrics" || true)
    local ring rss
    ring=$(awk '/^infer_stream_clip_ring_bytes\{/ {s += $2} END {printf "%d", s}' <<<"$m")
    rss=$(awk '/^process_resident_memory_bytes / {printf "%d", $2}' <<<"$m")
    (( ring > ring_max )) && ring_max=$ring
    (( ${rss:-0} > rss_max )) && rss_max=$rss
  done
  wait "$pid" || die "the $sink run failed: $(tail -5 "$out/$sink.log")"
  pid=
  echo "$ring_max $rss_max"
}

log "$streams streams into a clips sink (pre_s = 5), then into a null sink"
read -r ring rss_clips < <(measure clips)
read -r _ rss_null < <(measure null)
budget=$(( streams * 5 * 1000 * 1000 ))
mb() { awk -v b="$1" 'BEGIN {printf "%.1f MB", b / 1e6}'; }
echo "streams:                 $streams (1080p25 H.264, 4 Mb/s, keyframe every 2 s, played in real time)"
echo "rings, largest total:    $(mb "$ring") ($(mb $(( ring / streams ))) per stream)"
echo "budget for the rings:    $(mb "$budget") (5 MB per stream)"
echo "resident memory:         $(mb "$rss_clips") with the clips sink, $(mb "$rss_null") with a null sink instead"
(( ring > 0 )) || die "no ring bytes in /metrics"
(( ring <= budget )) || die "the rings took $(mb "$ring"), over the budget of $(mb "$budget")"
log "within budget"
