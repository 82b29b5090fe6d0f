#!/usr/bin/env bash
# What a `kind = "python"` stage costs (docs/python.md, "Performance"): the
# text-detection benchmark (pipelines/text-detection-bench.toml) with and
# without a trivial python stage after its last stage (`process` returns
# None), run by the same binary in interleaved rounds on the same machine:
# base, python, base, python, ... Prints each round's frames per second and the
# ratio python/base, then the median ratio and its spread. Also the python
# stage's time per frame (bench's per-node latency, p50, in µs) in three
# variants run in the same rounds: `none` (returns None), `tensors` (reads
# each array of frame.tensors), `image` (`image = true`, calls frame.image()):
# the extra µs per frame of `tensors` and of `image()` are their differences
# with `none`.
#
#   scripts/bench-python.sh [BIN] [ROUNDS] [FRAMES]
#   e.g. scripts/bench-python.sh target/release/infer-stream 5 300
#
# Defaults: target/release/infer-stream, 5 rounds, 300 frames (30 left out as
# warm-up). Needs the models and samples of scripts/setup.sh, and jq.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

BIN=${1:-target/release/infer-stream}
ROUNDS=${2:-5}
FRAMES=${3:-300}
WARMUP=$((FRAMES / 10))
[[ -x $BIN ]] || die "$BIN is not an executable (cargo build --release, or name another)"
command -v jq >/dev/null || die "jq is missing (scripts/install-deps.sh)"
if [[ -z ${ORT_DYLIB_PATH:-} ]]; then
  [[ -e .deps/onnxruntime/libonnxruntime.so ]] || die "no ONNX Runtime in .deps/onnxruntime: run scripts/fetch-models.sh or set ORT_DYLIB_PATH"
  export ORT_DYLIB_PATH=$PWD/.deps/onnxruntime/libonnxruntime.so
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s#\.\./#$PWD/#g" pipelines/text-detection-bench.toml >"$work/base.toml"

# variant NAME IMAGE BODY: the benchmark with a python stage `py` (process's BODY) before its sink.
variant() {
  printf 'def process(frame):\n%s\n' "$3" >"$work/$1.py"
  sed 's#^inputs = \["boxes"\]$#inputs = ["py"]#' "$work/base.toml" >"$work/$1.toml"
  grep -q 'inputs = \["py"\]' "$work/$1.toml" || die "the sink of text-detection-bench.toml no longer reads \"boxes\""
  printf '\n[stages.py]\nkind = "python"\ninputs = ["boxes"]\nscript = "%s"\nimage = %s\n' "$work/$1.py" "$2" >>"$work/$1.toml"
}
variant none false '    return None'
variant tensors false '    for t in frame.tensors.values():
        t.flat[0]
    return None'
variant image true '    frame.image()
    return None'

# bench FILE: the report as JSON.
bench() {
  "$BIN" bench --quiet --json --frames "$FRAMES" --warmup "$WARMUP" --null-sinks "$1"
}
py_us() { jq -r '.nodes[] | select(.name == "py") | .latency_ms.p50 * 1000'; }

# median LIST...: "median (min, max)" of the numbers, to $2 decimals... of the args.
spread() {
  printf '%s\n' "$@" | sort -g | jq -s -r --argjson d "$DIGITS" '
    def r: . * pow(10; $d) | round / pow(10; $d);
    "\(.[length/2|floor] | r) (min \(.[0] | r), max \(.[-1] | r))"'
}

log "$BIN on pipelines/text-detection-bench.toml: $ROUNDS interleaved rounds of $FRAMES frames; load $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=() none=() tensors=() image=()
for r in $(seq 1 "$ROUNDS"); do
  base=$(bench "$work/base.toml" | jq -r .fps)
  j=$(bench "$work/none.toml")
  fps=$(jq -r .fps <<<"$j")
  none+=("$(py_us <<<"$j")")
  tensors+=("$(bench "$work/tensors.toml" | py_us)")
  image+=("$(bench "$work/image.toml" | py_us)")
  ratio=$(jq -n "$fps / $base")
  ratios+=("$ratio")
  printf 'round %d: base %.2f fps, with python %.2f fps, ratio %.3f; python stage per frame: none %.0f µs, tensors %.0f µs, image %.0f µs\n' \
    "$r" "$base" "$fps" "$ratio" "${none[-1]}" "${tensors[-1]}" "${image[-1]}"
done
DIGITS=3
echo "fps with a trivial python stage / without: median $(spread "${ratios[@]}") over $ROUNDS rounds"
DIGITS=0
echo "python stage per frame, p50 µs: process returns None $(spread "${none[@]}")"
echo "  reading frame.tensors $(spread "${tensors[@]}"); frame.image() (1280 x 720) $(spread "${image[@]}")"
dt=() di=()
for i in "${!none[@]}"; do
  dt+=("$(jq -n "${tensors[$i]} - ${none[$i]}")")
  di+=("$(jq -n "${image[$i]} - ${none[$i]}")")
done
echo "  extra for tensors $(spread "${dt[@]}") µs, for image() $(spread "${di[@]}") µs (per round: variant - none)"
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
