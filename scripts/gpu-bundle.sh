#!/usr/bin/env bash
# Build what scripts/gpu-check.sh needs on a minimal GPU host (an NVIDIA GPU,
# its driver and CUDA 13 NVRTC; no Rust, no FFmpeg, no network) and pack it:
#   .gpu-bundle/bundle.tar.xz  (well under 64 MiB)
#     bin/infer-stream          release build with the `cuda` feature (no GStreamer)
#     bin/infer-stream-tests    the library's test binary, same build (GPU tests run for real there)
#     lib/                      a small FFmpeg 5.1 (scripts/build-gpu-ffmpeg.sh) + ONNX Runtime
#     samples/, models/ppocr/   the clips and the text detection model the checks use
#     fonts/                    DejaVu Sans, for the labels the checks draw
# Then on the GPU host, from the repository root: scripts/gpu-check.sh
#
#   scripts/gpu-bundle.sh [--cuda-ep [SM]]
#
# --cuda-ep also packs ONNX Runtime's GPU build (PyPI onnxruntime-gpu, CUDA 13)
# so gpu-check.sh can run inference on the CUDA provider with device-memory
# bindings (a host with CUDA 13 cuBLAS/cuDNN/cuRAND, e.g. PyTorch's pip wheels):
#   .gpu-bundle/ort-cuda/part-NN, SHA256   parts of at most 40 MiB, to carry in
#                                          separate calls (one call carries 64 MiB)
# The CUDA provider holds code for sm_75 … sm_120 (284 MB); only the GPU's own
# architecture SM (default 90: H100/H200) is kept (scripts/prune-fatbin.py),
# so these parts run on that architecture only.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

CUDA_EP=0 SM=90
if [[ ${1:-} == --cuda-ep ]]; then
  CUDA_EP=1
  [[ -n ${2:-} ]] && SM=$2
elif [[ -n ${1:-} ]]; then
  die "usage: scripts/gpu-bundle.sh [--cuda-ep [SM]]"
fi

# NVIDIA's own cuobjdump (PyPI nvidia-cuda-cuobjdump, 290 kB) reads both
# libraries: the pruned one must parse, and hold exactly the original's sm_$SM
# machine code, byte for byte.
verify_pruned() {
  local original pruned whl=.deps/wheels/nvidia_cuda_cuobjdump-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
  local want=38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58
  original=$(realpath "$1") pruned=$(realpath "$2")
  if [[ ! -f $whl ]]; then
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      -d .deps/wheels nvidia-cuda-cuobjdump==13.5.37
  fi
  [[ $(sha256 "$whl") == "$want" ]] || die "sha256 mismatch for $whl (delete it to download again)"
  local tmp
  tmp=$(mktemp -d)
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("nvidia/cu13/bin/cuobjdump", sys.argv[2])' "$whl" "$tmp"
  chmod +x "$tmp/nvidia/cu13/bin/cuobjdump"
  mkdir -p "$tmp/a" "$tmp/b"
  (cd "$tmp/a" && "$tmp/nvidia/cu13/bin/cuobjdump" --extract-elf all "$original" >/dev/null) || die "cuobjdump cannot read $original"
  (cd "$tmp/b" && "$tmp/nvidia/cu13/bin/cuobjdump" --extract-elf all "$pruned" >/dev/null) || die "cuobjdump cannot read the pruned library"
  local a b
  a=$(cd "$tmp/a" && find . -name "*sm_$SM*" -exec sha256sum {} + | cut -d' ' -f1 | sort)
  b=$(cd "$tmp/b" && find . -name "*sm_$SM*" -exec sha256sum {} + | cut -d' ' -f1 | sort)
  [[ -n $a && $a == "$b" ]] || die "the pruned library's sm_$SM code differs from the original's"
  log "cuobjdump: the pruned library holds $(wc -l <<<"$b") sm_$SM cubins, identical to the original's ($(find "$tmp/a" -name '*.cubin' | wc -l) cubins before, $(find "$tmp/b" -name '*.cubin' | wc -l) after)"
  rm -rf "$tmp"
}

# ONNX Runtime's GPU build, the CUDA provider pruned to sm_$SM, in parts.
pack_ort_cuda() {
  local whl=.deps/wheels/onnxruntime_gpu-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl
  local want=e26c475fe361b2015f45b4b824bd13f0bb20204e59b62814e6f0acd5f3d491a6
  if [[ ! -f $whl ]]; then
    log "downloading onnxruntime-gpu==1.31.1 (256 MB)"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_28_x86_64 -d .deps/wheels onnxruntime-gpu==1.31.1
  fi
  [[ $(sha256 "$whl") == "$want" ]] || die "sha256 mismatch for $whl (delete it to download again)"
  local stage=.gpu-bundle/ort-stage out=.gpu-bundle/ort-cuda
  rm -rf "$stage" "$out" && mkdir -p "$stage/lib" "$out"
  python3 - "$whl" "$stage/lib" <<'PY'
import os, shutil, sys, zipfile
whl, dest = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for m in ["libonnxruntime.so.1.31.1", "libonnxruntime_providers_shared.so",
              "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_tensorrt.so"]:
        with z.open("onnxruntime/capi/" + m) as src, open(os.path.join(dest, m), "wb") as out:
            shutil.copyfileobj(src, out)
PY
  cp "$stage/lib/libonnxruntime_providers_cuda.so" "$stage/original.so"
  python3 scripts/prune-fatbin.py "$stage/original.so" "$stage/lib/libonnxruntime_providers_cuda.so" "$SM"
  verify_pruned "$stage/original.so" "$stage/lib/libonnxruntime_providers_cuda.so"
  rm "$stage/original.so"
  echo "sm_$SM" >"$stage/ARCH"
  log "compressing ONNX Runtime GPU build (a minute)"
  tar -C "$stage" -cf - . | xz -T0 -6 >"$out/ort-cuda.tar.xz"
  rm -rf "$stage"
  (cd "$out" && sha256sum ort-cuda.tar.xz >SHA256 && split -b 40M -d -a 2 ort-cuda.tar.xz part- && rm ort-cuda.tar.xz)
  log "ONNX Runtime CUDA provider (sm_$SM): $(du -ch "$out"/part-* | tail -1 | cut -f1) in $(ls "$out"/part-* | wc -l) part(s) in $out/"
}

scripts/build-gpu-ffmpeg.sh
[[ -f models/ppocr/ch_PP-OCRv4_det_infer.onnx && -f samples/eval-720p.mp4 ]] || scripts/setup.sh

log "building release binary and test binary (features: cuda, bus, serve)"
cargo build --locked --release --no-default-features --features cuda,bus,serve
tests_bin=$(cargo test --locked --release --no-default-features --features cuda,bus,serve --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])' | tail -1)
[[ -x $tests_bin ]] || die "no test binary found"

STAGE=.gpu-bundle/stage
rm -rf "$STAGE" && mkdir -p "$STAGE"/{bin,lib,samples,models/ppocr,fonts}
strip -o "$STAGE/bin/infer-stream" target/release/infer-stream
strip -o "$STAGE/bin/infer-stream-tests" "$tests_bin"
cp -a .deps/ffmpeg-gpu/lib/*.so.* "$STAGE/lib/"
cp -a .deps/onnxruntime/libonnxruntime.so* "$STAGE/lib/"
cp samples/eval-720p.mp4 samples/eval-720p.truth.json samples/text-720p.mp4 samples/text-720p.truth.json "$STAGE/samples/"
cp models/ppocr/ch_PP-OCRv4_det_infer.onnx "$STAGE/models/ppocr/"
# Labels drawn by the overlay (GPU hosts often have no fonts); DejaVu's licence allows this.
cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$STAGE/fonts/"
cp /usr/share/doc/fonts-dejavu-core/copyright "$STAGE/fonts/DejaVu-copyright"
git rev-parse HEAD >"$STAGE/COMMIT"
tar -C "$STAGE" -cf - . | xz -T0 -6 >.gpu-bundle/bundle.tar.xz
rm -rf "$STAGE"
log "bundle: $(du -h .gpu-bundle/bundle.tar.xz | cut -f1) in .gpu-bundle/bundle.tar.xz"
if [[ $CUDA_EP == 1 ]]; then pack_ort_cuda; fi
