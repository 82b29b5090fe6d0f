#!/usr/bin/env bash
# Soak: run endless synthetic video through text detection (metrics on, scraped
# as it runs) for SECONDS (default 600), sampling the process's resident memory,
# open file descriptors and threads every few seconds. Prints the samples, the
# figures at the end of warm-up and at the end, and fails (exit 1) if memory grew
# more than 5% after warm-up or if descriptors or threads grew at all.
#
#   scripts/soak.sh [SECONDS]
#
# INFER_STREAM_BIN=path/to/infer-stream uses that binary instead of building a
# release one; SOAK_INTERVAL (default 5) sets the sampling period in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

duration=${1:-600}
interval=${SOAK_INTERVAL:-5}
[[ $duration =~ ^[0-9]+$ && $duration -ge 30 ]] || die "SECONDS must be a whole number, at least 30 (got '$duration')"
# Warm-up: models load, pools and ONNX Runtime's arenas fill, the allocator settles.
warmup=$(( duration / 10 > 20 ? duration / 10 : 20 ))

bin=${INFER_STREAM_BIN:-}
if [[ -z $bin ]]; then
  cargo build --release --locked --quiet
  bin=target/release/infer-stream
fi
[[ -x $bin ]] || die "$bin is not an executable"

out=$(mktemp -d)
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$out"
}
trap cleanup EXIT

INFER_STREAM_TEST_OUT=$out "$bin" run tests/data/soak.toml --progress never --metrics-addr 0 2>"$out/stderr" &
pid=$!

# The metrics port (0 = any free port) is logged at start.
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$out/stderr" | head -n1)
  [[ -n $port ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$out/stderr" >&2; die "infer-stream exited early"; }
  sleep 0.1
done
[[ -n $port ]] || die "no metrics address logged"

# GET /metrics with bash's /dev/tcp (no curl needed); prints the frames decoded so far.
scrape() {
  local body
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 0
  printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' >&3
  body=$(cat <&3)
  exec 3<&-
  sed -n 's/^infer_stream_frames_decoded_total{[^}]*} \([0-9]*\).*/\1/p' <<<"$body"
}
# calc EXPR: floating-point arithmetic with awk (bc is not always installed).
calc() { awk "BEGIN { print $1 }"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
fds() { find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
threads() { find "/proc/$pid/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

log "soak: $bin, pid $pid, ${duration} s (warm-up ${warmup} s), a sample every ${interval} s"
printf '%8s %10s %6s %8s %10s\n' seconds rss_mib fds threads frames
start=$(date +%s)
rss0= fds0= thr0= rss_max=0
while :; do
  now=$(( $(date +%s) - start ))
  kill -0 "$pid" 2>/dev/null || { cat "$out/stderr" >&2; die "infer-stream stopped after ${now} s"; }
  # Sample before scraping: the scrape's own connection is an extra descriptor for a moment.
  rss=$(rss_kib); f=$(fds); t=$(threads)
  frames=$(scrape || true)
  printf '%8d %10.1f %6d %8d %10s\n' "$now" "$(calc "$rss / 1024")" "$f" "$t" "${frames:--}"
  if [[ -z $rss0 && $now -ge $warmup ]]; then
    rss0=$rss fds0=$f thr0=$t
  fi
  [[ -n $rss0 && $rss -gt $rss_max ]] && rss_max=$rss
  (( now >= duration )) && break
  sleep "$interval"
done
rss1=$rss fds1=$f thr1=$t

kill -INT "$pid"
code=0
wait "$pid" || code=$?
pid=
grep -E '^frames: decoded|^wall ' "$out/stderr" || true

ratio=$(calc "$rss1 / $rss0")
printf 'rss after warm-up %.1f MiB, at the end %.1f MiB (ratio %.3f, max %.1f MiB)\n' \
  "$(calc "$rss0 / 1024")" "$(calc "$rss1 / 1024")" "$ratio" "$(calc "$rss_max / 1024")"
printf 'fds %d -> %d, threads %d -> %d\n' "$fds0" "$fds1" "$thr0" "$thr1"

fail=0
[[ $code -eq 130 ]] || { echo "FAIL: exit code $code after Ctrl-C (expected 130)"; fail=1; }
grep -q '(all accounted for)' "$out/stderr" || { echo "FAIL: accounting does not balance"; fail=1; }
(( $(calc "($ratio > 1.05) ? 1 : 0") )) && { echo "FAIL: memory grew more than 5% after warm-up"; fail=1; }
(( fds1 > fds0 )) && { echo "FAIL: open file descriptors grew"; fail=1; }
(( thr1 > thr0 )) && { echo "FAIL: threads grew"; fail=1; }
(( fail == 0 )) && echo "soak passed: no growth in memory, descriptors or threads"
exit "$fail"
