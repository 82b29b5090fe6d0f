#!/usr/bin/env bash
# Two builds give the same results: every pipeline in pipelines/ is validated
# by both (same exit code, same output), and every one that runs offline on
# the samples (files, folders, test sources; no camera, broker, stdin or
# GPU) is run by both, bounded to FRAMES frames per source (default 90), and
# everything it writes (NDJSON, subtitles, images, video) must be
# byte-identical; NDJSON files line for line, in any order (lines of
# different streams interleave as they arrive, which differs from run to run
# of one build; an event's `at_ms`, the wall-clock time it was made, is left
# out). Folder batches (`dir`) read a folder of two short clips
# (BATCH_INPUT) whole: bounded by frames, which files get them would depend
# on timing. For a restructure: BEFORE is a build of the commit before it,
# AFTER of the commit after.
#
#   scripts/compare-outputs.sh BEFORE_BIN AFTER_BIN
#
# Prints one line per pipeline and a total; exits 1 when any differ.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 2 ]] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2")
FRAMES=${FRAMES:-90}
# One ONNX Runtime for both (each build's default is its own checkout's).
if [[ -z ${ORT_DYLIB_PATH:-} && -e .deps/onnxruntime/libonnxruntime.so ]]; then
  export ORT_DYLIB_PATH=$PWD/.deps/onnxruntime/libonnxruntime.so
fi
# Live or outside inputs and outputs: validated only.
live='^(rtsp|kafka|kafka-jobs|mqtt|push-rtmp|serve|serve-infer|stdin|stdin-raw|vad-stdin|video-stdout|container|container-live|gpu|gstreamer)$'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/batch-in"
ln -s "$PWD/samples/plates.mp4" "$PWD/samples/speech-short.wav" "$work/batch-in/"
export BATCH_INPUT="$work/batch-in"
# The checksum of each output file; NDJSON by its sorted lines, wall-clock `at_ms` masked.
sums() {
  find . -type f | sort | while read -r f; do
    if [[ $f == *.ndjson ]]; then printf '%s  %s\n' "$(sed -E 's/"at_ms":[0-9]+/"at_ms":_/' "$f" | LC_ALL=C sort | sha256sum | cut -d' ' -f1)" "$f"; else sha256sum "$f"; fi
  done
}
for side in before after; do
  mkdir -p "$work/$side/out"
  cp -r pipelines "$work/$side/pipelines"
  ln -s "$PWD/samples" "$work/$side/samples"
  ln -s "$PWD/models" "$work/$side/models"
done

differ=0 ran=0 validated=0
for p in pipelines/*.toml; do
  name=$(basename "$p" .toml)
  for side in before after; do
    bin=$before; [[ $side == after ]] && bin=$after
    (set +e; cd "$work/$side/pipelines" && "$bin" validate "$name.toml" >"../validate-$name.out" 2>&1; echo "exit $?" >>"../validate-$name.out")
  done
  validated=$((validated + 1))
  if ! cmp -s "$work/before/validate-$name.out" "$work/after/validate-$name.out"; then
    echo "DIFFER  $name: validate"
    diff "$work/before/validate-$name.out" "$work/after/validate-$name.out" | head -5
    differ=$((differ + 1))
    continue
  fi
  if [[ $name =~ $live ]] || ! grep -q '^exit 0' "$work/before/validate-$name.out"; then
    echo "same    $name: validate (not run: live or outside input)"
    continue
  fi
  for side in before after; do
    bin=$before; [[ $side == after ]] && bin=$after
    rm -rf "$work/$side/out" && mkdir "$work/$side/out"
    bound=(--frames "$FRAMES")
    grep -q '^kind = "dir"' "$p" && bound=()
    (set +e; cd "$work/$side/pipelines" && timeout 300 "$bin" -q run --progress never "${bound[@]}" "$name.toml" >/dev/null 2>"../run-$name.err"; echo "$?" >"../run-$name.code")
    (cd "$work/$side/out" && sums) >"$work/$side/run-$name.sums"
  done
  ran=$((ran + 1))
  files=$(wc -l <"$work/before/run-$name.sums")
  if cmp -s "$work/before/run-$name.code" "$work/after/run-$name.code" && cmp -s "$work/before/run-$name.sums" "$work/after/run-$name.sums"; then
    echo "same    $name: exit $(cat "$work/before/run-$name.code"), $files output file(s) byte-identical"
  else
    echo "DIFFER  $name: exit $(cat "$work/before/run-$name.code") / $(cat "$work/after/run-$name.code")"
    diff "$work/before/run-$name.sums" "$work/after/run-$name.sums" | head -5 || true
    differ=$((differ + 1))
  fi
done
echo "pipelines: $validated validated, $ran run; differing: $differ"
[[ $differ -eq 0 ]]
