#!/usr/bin/env bash
# Prove the GPU path on a GPU host, from a bundle built elsewhere
# (scripts/gpu-bundle.sh): no Rust toolchain, FFmpeg or network needed there,
# only an NVIDIA GPU, its driver and NVRTC (CUDA 12 or 13). Prints what it
# checked and every figure; exits non-zero if any check failed.
#
#   scripts/gpu-check.sh [BUNDLE]      (default .gpu-bundle/bundle.tar.xz)
#
# Checks, in order (each bounded by a timeout; the whole run takes a few minutes):
#   1. the machine: nvidia-smi, driver libraries, NVRTC
#   2. infer-stream doctor
#   3. doctor --gpu-check: NVDEC vs software decode, kernels vs CPU twins,
#      stream order, a 1000-frame soak, decode and kernel figures
#   4. the unit tests of the kernels, CPU twins and CUDA backend, GPU tests included
#   5. a pipeline on GPU vs CPU: NVDEC + CUDA kernel, software + CUDA kernel,
#      software + CPU preprocess, and NVDEC + kernel with io_binding = "on"
#      (device tensors into the bound input); results compared frame by frame
#   6. annotated videos from NVDEC frames, read back: NVENC in place with
#      results drawn on the GPU (where the GPU has NVENC), and one download
#      per frame for a CPU encoder
#   7. bench: preprocess and end-to-end throughput, CPU path vs GPU path
#   8. with ONNX Runtime's GPU build (scripts/gpu-bundle.sh --cuda-ep): the
#      CUDA provider, its device-memory bindings (unit test and pipeline),
#      results against the CPU provider, the loud TensorRT fallback, fps
#
#   scripts/gpu-check.sh --only cuda-ep [BUNDLE]     step 8 alone
#   scripts/gpu-check.sh --only stash                keep the GPU build's parts, nothing else
#
# The GPU build comes in parts (.gpu-bundle/ort-cuda/part-NN, 40 MiB each) and
# with the bundle is more than one device call carries (64 MiB): each run
# keeps the parts it finds in $GPU_STASH (default /tmp/infer-stream-stash,
# which outlives a call on a machine kept warm), and step 8 runs once all of
# them are there. So: one call carries .gpu-bundle/ort-cuda and runs
# `--only stash`; the next, at once, carries the bundle and runs the checks.
set -uo pipefail
cd "$(dirname "$0")/.."
ONLY=all
if [[ ${1:-} == --only ]]; then ONLY=${2:-}; shift 2; fi
[[ $ONLY == all || $ONLY == cuda-ep || $ONLY == stash ]] || { echo "usage: scripts/gpu-check.sh [--only cuda-ep|stash] [BUNDLE]"; exit 2; }
BUNDLE=${1:-.gpu-bundle/bundle.tar.xz}
WORK=${GPU_CHECK_DIR:-/tmp/infer-stream-gpu-check}
STASH=${GPU_STASH:-/tmp/infer-stream-stash}
FAILS=0
# Keep the parts of ONNX Runtime's GPU build this call carried (parts of
# another build kept earlier are dropped first: they would never add up).
if compgen -G ".gpu-bundle/ort-cuda/part-*" >/dev/null; then
  if [[ -f $STASH/SHA256 ]] && ! cmp -s "$STASH/SHA256" .gpu-bundle/ort-cuda/SHA256; then
    echo "dropping stashed parts of another GPU build of ONNX Runtime" && rm -f "$STASH"/part-* "$STASH/SHA256"
  fi
  mkdir -p "$STASH" && cp .gpu-bundle/ort-cuda/SHA256 .gpu-bundle/ort-cuda/part-* "$STASH/" || exit 1
fi
if [[ $ONLY == stash ]]; then
  ls -l "$STASH" 2>/dev/null || echo "no parts of ONNX Runtime's GPU build here (.gpu-bundle/ort-cuda/part-*)"
  exit 0
fi
step() { printf '\n===== %s =====\n' "$*"; }
check() { # check NAME LINES CMD...: run, print the last LINES lines of its output, PASS/FAIL by exit code
  local name=$1 lines=$2; shift 2
  local log
  log="$WORK/log-$(printf '%s' "$name" | tr -c 'a-zA-Z0-9' '_').txt"
  "$@" >"$log" 2>&1; local rc=$?
  tail -n "$lines" "$log"
  if [[ $rc == 0 ]]; then echo "[PASS] $name"; else echo "[FAIL] $name (exit $rc)"; FAILS=$((FAILS + 1)); fi
}

# expect PATTERN CMD...: run CMD; pass only if it exits 0 and prints PATTERN (a skipped GPU test does not pass).
expect() {
  local pat=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out"
  [[ $rc == 0 ]] || return $rc
  grep -qE "$pat" <<<"$out" || { echo "expected output matching: $pat"; return 1; }
}

step "bundle"
rm -rf "$WORK" && mkdir -p "$WORK" && tar -C "$WORK" -xJf "$BUNDLE" || { echo "cannot unpack $BUNDLE"; exit 1; }
echo "built from commit $(cat "$WORK/COMMIT")"
export LD_LIBRARY_PATH="$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ORT_DYLIB_PATH="$WORK/lib/libonnxruntime.so.1.31.1"
# Labels need a font; a bare GPU host may have none: the bundle carries DejaVu Sans.
[[ -f $WORK/fonts/DejaVuSans.ttf ]] && export INFER_STREAM_FONT="$WORK/fonts/DejaVuSans.ttf"
BIN="$WORK/bin/infer-stream"
OUT="$WORK/out" && mkdir -p "$OUT"
# Pipelines in this checkout read ../samples and ../models: point them at the bundle's.
mkdir -p "$WORK/repo" && cp -r pipelines "$WORK/repo/" && ln -sfn "$WORK/samples" "$WORK/repo/samples" && ln -sfn "$WORK/models" "$WORK/repo/models"

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || echo "nvidia-smi failed"
ldconfig -p | grep -E 'libcuda\.so|libnvcuvid|libnvidia-encode' | sed 's/^/  /'
if [[ -z ${INFER_STREAM_NVRTC:-} ]]; then
  # The driver's CUDA version decides which NVRTC can make PTX it loads: 13 first only for a CUDA 13 driver.
  driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
  versions="13 12"; [[ -n $driver_cuda && $driver_cuda -lt 13 ]] && versions="12"
  py_nvidia=$(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
  for v in $versions; do
    # shellcheck disable=SC2086
    INFER_STREAM_NVRTC=$(find /usr/local/cuda*/lib64 $py_nvidia /opt /usr/lib /usr/local/lib -name "libnvrtc.so.$v" 2>/dev/null | head -1)
    [[ -n $INFER_STREAM_NVRTC ]] && break
  done
fi
export INFER_STREAM_NVRTC
echo "NVRTC: ${INFER_STREAM_NVRTC:-not found}"
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH${INFER_STREAM_NVRTC:+:$(dirname "$INFER_STREAM_NVRTC")}"

if [[ $ONLY == all ]]; then
step "doctor"
check "doctor" 40 timeout 60 "$BIN" doctor

step "doctor --gpu-check (NVDEC, kernels vs CPU twins, stream order, soak)"
check "gpu-check" 20 timeout 300 "$BIN" doctor --gpu-check "$WORK/samples/eval-720p.mp4" --soak-frames 1000

step "unit tests: kernels, CPU twins, CUDA backend, GPU check (GPU tests run for real here)"
cd "$WORK"
check "unit tests (cuda, convert, gpu)" 40 timeout 300 "$WORK/bin/infer-stream-tests" cuda convert gpu --nocapture --test-threads 1
cd - >/dev/null

step "pipeline: GPU vs CPU results"
P="$WORK/repo/pipelines"
sed -e 's/^hwaccel = .*/hwaccel = "none"/' -e 's/^device = .*/device = "cuda"/' "$P/gpu.toml" >"$P/gpu-upload.toml"
sed -e 's/^hwaccel = .*/hwaccel = "none"/' -e 's/^device = .*/device = "cpu"/' "$P/gpu.toml" >"$P/gpu-cpu.toml"
# Device tensors downloaded straight into the bound input of the session (IoBinding in host memory).
sed -e 's/^providers = .*/&\nio_binding = "on"/' "$P/gpu.toml" >"$P/gpu-bound.toml"
for v in gpu gpu-upload gpu-cpu gpu-bound; do
  check "run $v" 14 env OUT="$OUT/$v.ndjson" timeout 300 "$BIN" run "$P/$v.toml" --progress never
done
check "results: NVDEC+kernel = software+kernel = bound input (exact); CPU preprocess boxes all found (IoU >= 0.8, 90% >= 0.9)" 10 python3 - "$OUT" <<'PY'
import sys
sys.path.insert(0, "scripts")
from boxes import frames, match
out = sys.argv[1]
g, up, cpu, bound = (frames(f"{out}/{n}.ndjson") for n in ["gpu", "gpu-upload", "gpu-cpu", "gpu-bound"])
ok = True
print(f"frames: NVDEC {len(g)}, upload {len(up)}, CPU {len(cpu)}; boxes: {sum(map(len, g.values()))}, {sum(map(len, up.values()))}, {sum(map(len, cpu.values()))}")
if len(g) != len(cpu) or len(g) == 0: ok = False; print("frame counts differ")
exact = sum(1 for k in g if g[k] == up.get(k))
print(f"NVDEC+kernel equals software+kernel on {exact}/{len(g)} frames")
if exact != len(g): ok = False
same = sum(1 for k in g if g[k] == bound.get(k))
print(f"with io_binding = on (device tensors into the bound input): equal on {same}/{len(g)} frames")
if same != len(g): ok = False
# The CPU path resamples with swscale, the kernel bilinearly: boxes move by a
# pixel or two. Every box must be found (IoU >= 0.8), nine in ten closely (>= 0.9).
total, close, worst, _ = match(cpu, g)
print(f"CPU-preprocess boxes matched by GPU boxes at IoU>=0.9: {close}/{total} (worst IoU {worst:.3f})")
if total == 0 or close < 0.9 * total or worst < 0.8: ok = False
sys.exit(0 if ok else 1)
PY

step "annotated video from NVDEC frames"
# With NVENC (not on H100/H200) the device frames are encoded where they are,
# results drawn by the overlay kernel; with a CPU encoder (FFmpeg's mpeg4 in
# the bundle) each frame is downloaded once. Each file must read back with
# every frame.
readback() { # readback NAME: decode $OUT/NAME.mp4 and expect as many frames as $OUT/NAME.ndjson has lines
  local want=0
  [[ -s $OUT/$1.mp4 && -f $OUT/$1.ndjson ]] || { echo "[FAIL] $1.mp4 was not written: nothing to read back"; FAILS=$((FAILS + 1)); return; }
  want=$(wc -l <"$OUT/$1.ndjson")
  printf '[pipeline]\nname = "readback"\n[sources.v]\nkind = "file"\nuri = "%s"\n[sinks.n]\nkind = "null"\ninputs = ["v"]\n' \
    "$OUT/$1.mp4" >"$P/readback-$1.toml"
  check "$1.mp4 reads back with all $want frames" 3 expect "frames: decoded $want = processed $want " \
    timeout 120 "$BIN" run "$P/readback-$1.toml" --progress never
}
annotate() { # annotate NAME: run $P/NAME.toml on the text sample into $OUT/NAME.{mp4,ndjson}
  env ANNOTATE_INPUT="$WORK/samples/text-720p.mp4" ANNOTATE_OUTPUT="$OUT/$1.mp4" ANNOTATE_NDJSON="$OUT/$1.ndjson" \
    timeout 300 "$BIN" run "$P/$1.toml" --progress never
}
sed -e 's/^hwaccel = .*/hwaccel = "cuda"/' -e 's/^codec = .*/codec = "h264_nvenc"/' -e '/^preset = /d' "$P/annotate.toml" >"$P/annotate-nvenc.toml"
sed -e 's/^hwaccel = .*/hwaccel = "cuda"/' -e 's/^codec = .*/codec = "mpeg4"/' -e '/^preset = /d' -e '/^crf = /d' \
  "$P/annotate.toml" >"$P/annotate-download.toml"
annotate annotate-nvenc >"$WORK/log-annotate-nvenc.txt" 2>&1; rc=$?
if [[ $rc == 0 ]] && grep -q 'encodes the device frames in place' "$WORK/log-annotate-nvenc.txt"; then
  grep -E 'in place|fps|frames:' "$WORK/log-annotate-nvenc.txt"
  echo "[PASS] NVENC encoded the device frames in place, results drawn on the GPU"
  readback annotate-nvenc
elif grep -q 'cannot open encoder `h264_nvenc`' "$WORK/log-annotate-nvenc.txt"; then
  grep -m1 'h264_nvenc' "$WORK/log-annotate-nvenc.txt"
  echo "[SKIP] this GPU has no NVENC: the in-place encode cannot run here"
else
  tail -12 "$WORK/log-annotate-nvenc.txt"
  echo "[FAIL] annotate-nvenc (exit $rc)"; FAILS=$((FAILS + 1))
fi
check "run annotate-download (NVDEC frames, one download each, CPU encode)" 8 annotate annotate-download
readback annotate-download

step "bench: CPU path vs GPU path"
for v in gpu-cpu gpu; do
  echo "--- $v"
  timeout 300 "$BIN" bench "$P/$v.toml" --null-sinks 2>&1 | grep -E 'fps|bottleneck|pre |det |cam ' | head -12
done

fi # ONLY == all

# Step 8's pieces: the GPU build of ONNX Runtime, once all its parts are here,
# and the CUDA 13 libraries it needs (cuBLAS, cuRAND, runtime; cuDNN, cuFFT
# when a model asks), found in the host's Python packages or CUDA toolkit.
unpack_ort_cuda() {
  [[ -f $STASH/SHA256 ]] || { echo "no GPU build of ONNX Runtime carried: step 8 skipped (scripts/gpu-bundle.sh --cuda-ep makes one)"; return 1; }
  local want got
  want=$(cut -d' ' -f1 "$STASH/SHA256")
  got=$(cat "$STASH"/part-* | sha256sum | cut -d' ' -f1)
  if [[ $got != "$want" ]]; then
    echo "parts of the GPU build here: $(cd "$STASH" && echo part-*); not all of them yet (sha256 differs)."
    echo "carry the others in another call while this machine is warm: step 8 skipped"
    return 1
  fi
  rm -rf "$WORK/ort-cuda" && mkdir -p "$WORK/ort-cuda" && cat "$STASH"/part-* | xz -d | tar -C "$WORK/ort-cuda" -xf - || return 1
  echo "ONNX Runtime GPU build unpacked (code for $(cat "$WORK/ort-cuda/ARCH") only)"
}
cuda_lib_dirs() {
  python3 - <<'PY'
import glob, os, sys
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
roots += sorted(glob.glob("/usr/local/cuda*/lib64")) + sorted(glob.glob("/usr/local/cuda*/targets/x86_64-linux/lib"))
dirs = []
for name in ["libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10", "libcudart.so.13", "libcudnn.so.9", "libcufft.so.12"]:
    hit = next((os.path.dirname(g[0]) for r in roots for g in [glob.glob(os.path.join(r, "**", name), recursive=True)] if g), None)
    print(f"  {name}: {hit or 'not found'}", file=sys.stderr)
    if hit and hit not in dirs:
        dirs.append(hit)
print(":".join(dirs))
PY
}

# Can this host run that build? Its code is for one architecture (ARCH), it
# needs a CUDA 13 driver and CUDA 13 libraries, and cuDNN 9 for convolutions
# (every model here has them: the provider loads cuDNN at the first Conv).
ort_cuda_fits() {
  local want have cuda
  want=$(sed 's/^sm_//' "$WORK/ort-cuda/ARCH")
  have=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [[ $have == "$want" ]] || { echo "the GPU build carried has code for sm_$want only; this GPU is sm_${have:-unknown}: step 8 skipped (scripts/gpu-bundle.sh --cuda-ep $have)"; return 1; }
  cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
  [[ -n $cuda && $cuda -ge 13 ]] || { echo "the driver supports CUDA ${cuda:-unknown}; this ONNX Runtime build needs CUDA 13: step 8 skipped"; return 1; }
  echo "CUDA 13 libraries:"
  CUDA_LD=$(cuda_lib_dirs)
  for lib in libcublasLt.so.13 libcublas.so.13 libcurand.so.10 libcudart.so.13 libcudnn.so.9; do
    tr ':' '\n' <<<"$CUDA_LD" | while read -r d; do [[ -e $d/$lib ]] && echo found; done | grep -q found \
      || { echo "$lib not found on this host: step 8 skipped (the CUDA provider needs CUDA 13's cuBLAS, cuRAND and runtime, and cuDNN 9)"; return 1; }
  done
}

step "ONNX Runtime CUDA provider: device-memory bindings, results vs CPU provider"
if unpack_ort_cuda && ort_cuda_fits; then
  GPU_ORT="$WORK/ort-cuda/lib/libonnxruntime.so.1.31.1"
  ortcuda() { env LD_LIBRARY_PATH="$WORK/ort-cuda/lib:$CUDA_LD:$LD_LIBRARY_PATH" ORT_DYLIB_PATH="$GPU_ORT" "$@"; }
  P="$WORK/repo/pipelines"
  check "doctor (ONNX Runtime GPU build)" 8 expect '=> inference: (cuda|tensorrt)' ortcuda timeout 60 "$BIN" doctor
  # The GPU build lists TensorRT even without libnvinfer; doctor says whether it loads.
  trt_loads=yes
  ortcuda timeout 60 "$BIN" doctor 2>&1 | grep -q 'tensorrt (cannot load)' && trt_loads=no
  echo "TensorRT loads here: $trt_loads"
  cd "$WORK"
  check "unit test: device bindings on the CUDA provider vs plain runs and the CPU provider" 12 \
    expect 'device bindings: worst' ortcuda env INFER_STREAM_TEST_MODELS="$WORK/models" \
    timeout 300 "$WORK/bin/infer-stream-tests" gpu_device_bindings --nocapture --test-threads 1
  cd - >/dev/null
  # One input (NVDEC + kernel), four ways: CPU provider (reference), CUDA with
  # device bindings (the default), CUDA without bindings, TensorRT first.
  sed -e 's/^providers = .*/providers = ["cpu"]/' "$P/gpu.toml" >"$P/ep-cpu.toml"
  sed -e 's/^providers = .*/providers = ["cuda"]/' "$P/gpu.toml" >"$P/ep-cuda.toml"
  sed -e 's/^providers = .*/providers = ["cuda"]\nio_binding = "off"/' "$P/gpu.toml" >"$P/ep-cuda-unbound.toml"
  sed -e 's/^providers = .*/providers = ["tensorrt", "cuda"]/' "$P/gpu.toml" >"$P/ep-trt.toml"
  check "run ep-cpu" 6 env OUT="$OUT/ep-cpu.ndjson" timeout 300 "$BIN" run "$P/ep-cpu.toml" --progress never
  check "run ep-cuda (IoBinding in device memory)" 14 expect 'IoBinding in device memory' \
    ortcuda env OUT="$OUT/ep-cuda.ndjson" timeout 300 "$BIN" run "$P/ep-cuda.toml" --progress never
  check "run ep-cuda-unbound" 6 ortcuda env OUT="$OUT/ep-cuda-unbound.ndjson" timeout 300 "$BIN" run "$P/ep-cuda-unbound.toml" --progress never
  if [[ $trt_loads == no ]]; then
    # No TensorRT libraries here: the fallback to CUDA must be said, not silent.
    check "run ep-trt (TensorRT missing: loud fallback to cuda)" 8 expect 'falling back to `cuda`' \
      ortcuda env OUT="$OUT/ep-trt.ndjson" timeout 300 "$BIN" run "$P/ep-trt.toml" --progress never
  else
    # TensorRT is here: it builds its engine in the first run (the probe) and runs, CUDA behind it.
    check "run ep-trt (TensorRT, CUDA behind it)" 8 expect 'on tensorrt' \
      ortcuda env OUT="$OUT/ep-trt.ndjson" timeout 300 "$BIN" run "$P/ep-trt.toml" --progress never
  fi
  check "results: CUDA provider (bound, unbound, after fallback) vs CPU provider (IoU >= 0.8, 90% >= 0.9)" 10 python3 - "$OUT" <<'PY'
import sys
sys.path.insert(0, "scripts")
from boxes import frames, match
out = sys.argv[1]
ref = frames(f"{out}/ep-cpu.ndjson"); ok = len(ref) > 0
print(f"CPU provider: {len(ref)} frames, {sum(map(len, ref.values()))} boxes")
for n in ["ep-cuda", "ep-cuda-unbound", "ep-trt"]:
    got = frames(f"{out}/{n}.ndjson")
    exact = sum(1 for k in ref if ref[k] == got.get(k))
    total, close, worst, extra = match(ref, got)
    good = len(got) == len(ref) and total > 0 and close >= 0.9 * total and worst >= 0.8 and extra <= 0.05 * total
    ok &= good
    print(f"{n}: {len(got)} frames, equal to CPU on {exact}; boxes matched at IoU>=0.9 {close}/{total} (worst {worst:.3f}), extra boxes {extra}: {'ok' if good else 'FAILED'}")
b, u = frames(f"{out}/ep-cuda.ndjson"), frames(f"{out}/ep-cuda-unbound.ndjson")
print(f"CUDA bound vs unbound: equal on {sum(1 for k in b if b[k] == u.get(k))}/{len(b)} frames")
sys.exit(0 if ok else 1)
PY
  for v in ep-cpu ep-cuda; do
    echo "--- bench $v"
    ortcuda timeout 300 "$BIN" bench "$P/$v.toml" --null-sinks 2>&1 | grep -E 'fps|bottleneck|pre |det |cam ' | head -12
  done
elif [[ $ONLY == cuda-ep ]]; then
  echo "[FAIL] step 8 asked for but could not run"; FAILS=$((FAILS + 1))
else
  echo "[SKIP] step 8"
fi

step "summary"
if [[ $FAILS == 0 ]]; then echo "GPU CHECK: ALL PASSED"; else echo "GPU CHECK: $FAILS FAILED"; fi
exit $(( FAILS > 0 ))
