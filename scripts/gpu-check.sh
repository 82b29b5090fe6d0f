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
#   6. bench: preprocess and end-to-end throughput, CPU path vs GPU path
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${1:-.gpu-bundle/bundle.tar.xz}
WORK=${GPU_CHECK_DIR:-/tmp/infer-stream-gpu-check}
FAILS=0
step() { printf '\n===== %s =====\n' "$*"; }
check() { # check NAME LINES CMD...: run, print the last LINES lines of its output, PASS/FAIL by exit code
  local name=$1 lines=$2; shift 2
  local log
  log="$WORK/log-$(printf '%s' "$name" | tr -c 'a-zA-Z0-9' '_').txt"
  "$@" >"$log" 2>&1; local rc=$?
  tail -n "$lines" "$log"
  if [[ $rc == 0 ]]; then echo "[PASS] $name"; else echo "[FAIL] $name (exit $rc)"; FAILS=$((FAILS + 1)); fi
}

step "bundle"
rm -rf "$WORK" && mkdir -p "$WORK" && tar -C "$WORK" -xJf "$BUNDLE" || { echo "cannot unpack $BUNDLE"; exit 1; }
echo "built from commit $(cat "$WORK/COMMIT")"
export LD_LIBRARY_PATH="$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ORT_DYLIB_PATH="$WORK/lib/libonnxruntime.so.1.31.1"
BIN="$WORK/bin/infer-stream"
OUT="$WORK/out" && mkdir -p "$OUT"
# Pipelines in this checkout read ../samples and ../models: point them at the bundle's.
mkdir -p "$WORK/repo" && cp -r pipelines "$WORK/repo/" && ln -sfn "$WORK/samples" "$WORK/repo/samples" && ln -sfn "$WORK/models" "$WORK/repo/models"

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || echo "nvidia-smi failed"
ldconfig -p | grep -E 'libcuda\.so|libnvcuvid|libnvidia-encode' | sed 's/^/  /'
if [[ -z ${INFER_STREAM_NVRTC:-} ]]; then
  for v in 13 12; do
    INFER_STREAM_NVRTC=$(find /usr/local/cuda*/lib64 /opt /usr/lib /usr/local/lib -name "libnvrtc.so.$v" 2>/dev/null | head -1)
    [[ -n $INFER_STREAM_NVRTC ]] && break
  done
fi
export INFER_STREAM_NVRTC
echo "NVRTC: ${INFER_STREAM_NVRTC:-not found}"
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH${INFER_STREAM_NVRTC:+:$(dirname "$INFER_STREAM_NVRTC")}"

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
import json, sys
out = sys.argv[1]
def boxes(rec):
    found = []
    def walk(x):
        if isinstance(x, dict):
            if "bbox" in x: found.append(x["bbox"])
            for v in x.values(): walk(v)
        elif isinstance(x, list):
            for v in x: walk(v)
    walk(rec); return found
def frames(n):
    res = {}
    for i, line in enumerate(open(f"{out}/{n}.ndjson")):
        r = json.loads(line); res[r.get("seq", i)] = boxes(r)
    return res
def iou(a, b):
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0])); iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    u = (a[2]-a[0])*(a[3]-a[1]) + (b[2]-b[0])*(b[3]-b[1]) - ix*iy
    return ix*iy/u if u > 0 else 0
g, up, cpu = frames("gpu"), frames("gpu-upload"), frames("gpu-cpu")
ok = True
print(f"frames: NVDEC {len(g)}, upload {len(up)}, CPU {len(cpu)}; boxes: {sum(map(len, g.values()))}, {sum(map(len, up.values()))}, {sum(map(len, cpu.values()))}")
if len(g) != len(cpu) or len(g) == 0: ok = False; print("frame counts differ")
exact = sum(1 for k in g if g[k] == up.get(k))
print(f"NVDEC+kernel equals software+kernel on {exact}/{len(g)} frames")
if exact != len(g): ok = False
bound = frames("gpu-bound")
same = sum(1 for k in g if g[k] == bound.get(k))
print(f"with io_binding = on (device tensors into the bound input): equal on {same}/{len(g)} frames")
if same != len(g): ok = False
# The CPU path resamples with swscale, the kernel bilinearly: boxes move by a
# pixel or two. Every box must be found (IoU >= 0.8), nine in ten closely (>= 0.9).
matched = total = 0; worst = 1.0
for k, bs in cpu.items():
    for b in bs:
        total += 1; best = max((iou(b, c) for c in g.get(k, [])), default=0); worst = min(worst, best)
        matched += best >= 0.9
print(f"CPU-preprocess boxes matched by GPU boxes at IoU>=0.9: {matched}/{total} (worst IoU {worst:.3f})")
if total == 0 or matched < 0.9 * total or worst < 0.8: ok = False
sys.exit(0 if ok else 1)
PY

step "bench: CPU path vs GPU path"
for v in gpu-cpu gpu; do
  echo "--- $v"
  timeout 300 "$BIN" bench "$P/$v.toml" --null-sinks 2>&1 | grep -E 'fps|bottleneck|pre |det |cam ' | head -12
done

step "summary"
if [[ $FAILS == 0 ]]; then echo "GPU CHECK: ALL PASSED"; else echo "GPU CHECK: $FAILS FAILED"; fi
exit $(( FAILS > 0 ))
