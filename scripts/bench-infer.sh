#!/usr/bin/env bash
# Request/response inference under load: `infer-stream serve
# pipelines/serve-infer.toml`, then N concurrent `POST /v1/infer` (default
# 100, curl with xargs -P) of one 720p frame of samples/eval-720p.mp4.
# Prints p50/p99 latency, throughput, and the batches the infer stage formed.
#   scripts/bench-infer.sh [N] [BINARY]   (BINARY default target/release/infer-stream)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

n=${1:-100}
bin=${2:-target/release/infer-stream}
[[ -x $bin ]] || die "$bin is missing: cargo build --release --locked (or pass the binary)"
port=${BENCH_PORT:-18471}
addr=127.0.0.1:$port
work=$(mktemp -d)
server=
cleanup() {
  if [[ -n $server ]]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

ffmpeg -nostdin -y -loglevel error -ss 2 -i samples/eval-720p.mp4 -frames:v 1 "$work/frame.jpg"
"$bin" -q serve pipelines/serve-infer.toml --listen "$addr" 2>"$work/serve.log" &
server=$!
for _ in $(seq 200); do
  curl -sf -m 1 -o /dev/null "http://$addr/healthz" && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; die "serve exited"; }
  sleep 0.1
done
curl -sf -o /dev/null "http://$addr/healthz" || die "serve did not start on $addr"
# One request first: the model's first run is not part of the figures.
curl -sf -o /dev/null --data-binary @"$work/frame.jpg" "http://$addr/v1/infer"

start=$(date +%s.%N)
seq "$n" | xargs -P "$n" -I{} curl -s -o /dev/null -w '%{http_code} %{time_total}\n' \
  -H 'content-type: image/jpeg' -H 'x-timeout-ms: 300000' --data-binary @"$work/frame.jpg" "http://$addr/v1/infer" >"$work/times"
end=$(date +%s.%N)

ok=$(awk '$1 == 200' "$work/times" | wc -l)
awk '$1 == 200 {print $2}' "$work/times" | sort -n >"$work/ok"
pct() { awk -v p="$1" '{v[NR] = $1} END { i = int((NR * p + 99) / 100); if (i < 1) i = 1; printf "%.1f", v[i] * 1000 }' "$work/ok"; }
printf 'requests: %d concurrent, %d answered 200 (others: %s)\n' "$n" "$ok" "$(awk '$1 != 200 {print $1}' "$work/times" | sort | uniq -c | tr -s ' ' | paste -sd, -)"
printf 'latency: p50 %s ms, p99 %s ms\n' "$(pct 50)" "$(pct 99)"
printf 'throughput: %.2f pictures/s (wall %.2f s)\n' "$(echo "$ok / ($end - $start)" | bc -l)" "$(echo "$end - $start" | bc -l)"
curl -s "http://$addr/metrics" | grep -E '^infer_stream_node_batch_size_(count|sum)\{[^}]*node="det"' || true
