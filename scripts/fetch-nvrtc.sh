#!/usr/bin/env bash
# Fetch NVRTC (the CUDA runtime compiler) from its pinned PyPI wheel into
# .deps/nvrtc/, so the GPU kernels can be compiled and checked on a machine
# without a GPU (CI does this). At run time the GPU path looks there too, or
# at INFER_STREAM_NVRTC, or in the CUDA toolkit. Offline once fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

WHEELS=.deps/wheels
DEST=.deps/nvrtc
REQ="nvidia-cuda-nvrtc-cu12==12.9.86"
WHL=nvidia_cuda_nvrtc_cu12-12.9.86-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl
WHL_SHA256=210cf05005a447e29214e9ce50851e83fc5f4358df8b453155d5e1918094dcb4
MEMBERS=(libnvrtc.so.12 libnvrtc-builtins.so.12.9)

ok=1
[[ -f $DEST/.ok-$WHL_SHA256 ]] || ok=0
for m in "${MEMBERS[@]}"; do [[ -f $DEST/$m ]] || ok=0; done
if [[ $ok == 1 ]]; then
  log "nvrtc: up to date ($DEST)"
  exit 0
fi

mkdir -p "$WHEELS" "$DEST"
if [[ ! -f $WHEELS/$WHL ]]; then
  log "downloading $REQ"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 -d "$WHEELS" "$REQ"
  [[ -f $WHEELS/$WHL ]] || die "pip did not produce $WHEELS/$WHL"
fi
got=$(sha256 "$WHEELS/$WHL")
[[ $got == "$WHL_SHA256" ]] || die "sha256 mismatch for $WHEELS/$WHL (expected $WHL_SHA256, got $got)"
python3 - "$WHEELS/$WHL" "$DEST" "${MEMBERS[@]}" <<'PY'
import os, shutil, sys, zipfile
whl, dest, *members = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for m in members:
        with z.open("nvidia/cuda_nvrtc/lib/" + m) as src, open(os.path.join(dest, m + ".tmp"), "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(os.path.join(dest, m + ".tmp"), os.path.join(dest, m))
PY
touch "$DEST/.ok-$WHL_SHA256"
log "nvrtc: unpacked into $DEST"
