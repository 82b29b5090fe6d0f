#!/usr/bin/env bash
# Two builds of infer-stream on one pipeline, in interleaved rounds on the same
# machine in the same run: A, B, A, B, ... Prints each round's frames per
# second and the ratio B/A per round, then the median ratio and its spread.
# A ratio within the spread of 1.0 is "within noise" (a restructure must keep it).
#
#   scripts/bench-ab.sh BEFORE_BIN AFTER_BIN [PIPELINE] [ROUNDS] [FRAMES]
#   e.g. scripts/bench-ab.sh /tmp/before/infer-stream target/release/infer-stream
#
# Defaults: pipelines/text-detection-bench.toml, 5 rounds, 300 frames (30 left
# out as warm-up). The same ONNX Runtime serves both builds (ORT_DYLIB_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

[[ $# -ge 2 ]] || die "usage: scripts/bench-ab.sh BEFORE_BIN AFTER_BIN [PIPELINE] [ROUNDS] [FRAMES]"
A=$1
B=$2
PIPELINE=${3:-pipelines/text-detection-bench.toml}
ROUNDS=${4:-5}
FRAMES=${5:-300}
WARMUP=$((FRAMES / 10))
for bin in "$A" "$B"; do [[ -x $bin ]] || die "$bin is not an executable"; done
if [[ -z ${ORT_DYLIB_PATH:-} ]]; then
  [[ -e .deps/onnxruntime/libonnxruntime.so ]] || die "no ONNX Runtime in .deps/onnxruntime: run scripts/fetch-models.sh or set ORT_DYLIB_PATH"
  export ORT_DYLIB_PATH=$PWD/.deps/onnxruntime/libonnxruntime.so
fi

fps() {
  "$1" bench --quiet --json --frames "$FRAMES" --warmup "$WARMUP" --null-sinks "$PIPELINE" | jq -r .fps
}

log "$PIPELINE: $ROUNDS interleaved rounds of $FRAMES frames; A=$A B=$B; load $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  a=$(fps "$A")
  b=$(fps "$B")
  ratio=$(jq -n "$b / $a")
  ratios+=("$ratio")
  printf 'round %d: A %.2f fps, B %.2f fps, B/A %.3f\n' "$r" "$a" "$b" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -g | jq -s -r '
  "B/A median \(.[length/2|floor] * 1000 | round / 1000) (min \(.[0] * 1000 | round / 1000), max \(.[-1] * 1000 | round / 1000)) over \(length) rounds"'
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
