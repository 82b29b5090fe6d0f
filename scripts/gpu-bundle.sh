#!/usr/bin/env bash
# Build what scripts/gpu-check.sh needs on a minimal GPU host (an NVIDIA GPU,
# its driver and CUDA 13 NVRTC; no Rust, no FFmpeg, no network) and pack it:
#   .gpu-bundle/bundle.tar.xz  (well under 64 MiB)
#     bin/infer-stream          release build with the `cuda` feature (no GStreamer)
#     bin/infer-stream-tests    the library's test binary, same build (GPU tests run for real there)
#     lib/                      a small FFmpeg 5.1 (scripts/build-gpu-ffmpeg.sh) + ONNX Runtime
#     samples/, models/ppocr/   the clips and the text detection model the checks use
# Then on the GPU host, from the repository root: scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

scripts/build-gpu-ffmpeg.sh
[[ -f models/ppocr/ch_PP-OCRv4_det_infer.onnx && -f samples/eval-720p.mp4 ]] || scripts/setup.sh

log "building release binary and test binary (features: cuda)"
cargo build --locked --release --no-default-features --features cuda
tests_bin=$(cargo test --locked --release --no-default-features --features cuda --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])' | tail -1)
[[ -x $tests_bin ]] || die "no test binary found"

STAGE=.gpu-bundle/stage
rm -rf "$STAGE" && mkdir -p "$STAGE"/{bin,lib,samples,models/ppocr}
strip -o "$STAGE/bin/infer-stream" target/release/infer-stream
strip -o "$STAGE/bin/infer-stream-tests" "$tests_bin"
cp -a .deps/ffmpeg-gpu/lib/*.so.* "$STAGE/lib/"
cp -a .deps/onnxruntime/libonnxruntime.so* "$STAGE/lib/"
cp samples/eval-720p.mp4 samples/eval-720p.truth.json samples/text-720p.mp4 samples/text-720p.truth.json "$STAGE/samples/"
cp models/ppocr/ch_PP-OCRv4_det_infer.onnx "$STAGE/models/ppocr/"
git rev-parse HEAD >"$STAGE/COMMIT"
tar -C "$STAGE" -cf - . | xz -T0 -6 >.gpu-bundle/bundle.tar.xz
rm -rf "$STAGE"
log "bundle: $(du -h .gpu-bundle/bundle.tar.xz | cut -f1) in .gpu-bundle/bundle.tar.xz"
