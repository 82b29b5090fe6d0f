#!/usr/bin/env bash
# Fetch the ONNX Runtime shared library and the ONNX models from pinned PyPI
# wheels, verify them, and unpack them:
#   .deps/onnxruntime/libonnxruntime.so{,.1,.1.31.1}   (ORT_DYLIB_PATH)
#   models/ppocr/   PP-OCRv4 det/rec + mobile v2 cls, dictionary, rapidocr config
#   models/silero/  Silero VAD
# Works offline once fetched: nothing is downloaded when the files are there
# and their sha256 match (models/SHA256SUMS, pins below).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

WHEELS=.deps/wheels
ORT_DIR=.deps/onnxruntime
ORT_LIB=libonnxruntime.so.1.31.1
ORT_LIB_SHA256=fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3

# requirement | wheel file | sha256 of the wheel
PINS=(
  "onnxruntime==1.31.1|onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl|5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f"
  "rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime-1.4.4-py3-none-any.whl|971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"
  "silero-vad==6.2.3|silero_vad-6.2.3-py3-none-any.whl|7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"
)
ORT_WHL=$WHEELS/onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl
OCR_WHL=$WHEELS/rapidocr_onnxruntime-1.4.4-py3-none-any.whl
VAD_WHL=$WHEELS/silero_vad-6.2.3-py3-none-any.whl

# wheel | member | destination
EXTRACT=(
  "$ORT_WHL|onnxruntime/capi/$ORT_LIB|$ORT_DIR/$ORT_LIB"
  "$ORT_WHL|onnxruntime/LICENSE|$ORT_DIR/LICENSE"
  "$OCR_WHL|rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx|models/ppocr/ch_PP-OCRv4_det_infer.onnx"
  "$OCR_WHL|rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx|models/ppocr/ch_PP-OCRv4_rec_infer.onnx"
  "$OCR_WHL|rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx|models/ppocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"
  "$OCR_WHL|rapidocr_onnxruntime/config.yaml|models/ppocr/rapidocr_config.yaml"
  "$VAD_WHL|silero_vad/data/silero_vad.onnx|models/silero/silero_vad.onnx"
  "$VAD_WHL|silero_vad-6.2.3.dist-info/licenses/LICENSE|models/silero/LICENSE"
)
KEYS=models/ppocr/ppocr_keys_v1.txt   # taken from the rec model's metadata

# All outputs present and matching their checksums?
up_to_date() {
  [[ -f models/SHA256SUMS && -f $KEYS ]] || return 1
  (cd models && sha256sum --check --quiet --status SHA256SUMS 2>/dev/null) || return 1
  [[ -f $ORT_DIR/$ORT_LIB && -L $ORT_DIR/libonnxruntime.so && -L $ORT_DIR/libonnxruntime.so.1 ]] || return 1
  [[ $(sha256 "$ORT_DIR/$ORT_LIB") == "$ORT_LIB_SHA256" ]]
}

if up_to_date; then
  log "models and onnxruntime: up to date (export ORT_DYLIB_PATH=$PWD/$ORT_DIR/libonnxruntime.so)"
  exit 0
fi

# 1. Download (only what is missing) and verify the wheels.
mkdir -p "$WHEELS"
for pin in "${PINS[@]}"; do
  IFS='|' read -r req file want <<<"$pin"
  if [[ ! -f $WHEELS/$file ]]; then
    log "downloading $req"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$WHEELS" "$req"
    [[ -f $WHEELS/$file ]] || die "pip did not produce $WHEELS/$file for $req (ls $WHEELS)"
  fi
  got=$(sha256 "$WHEELS/$file")
  [[ $got == "$want" ]] || die "sha256 mismatch for $WHEELS/$file
  expected $want
  got      $got
delete the file to download it again; if PyPI really changed it, review and update the pin"
done
log "wheels verified"

# 2. Unpack the files we need.
for item in "${EXTRACT[@]}"; do
  IFS='|' read -r whl member dest <<<"$item"
  python3 - "$whl" "$member" "$dest" <<'PY'
import os, shutil, sys, zipfile
whl, member, dest = sys.argv[1:]
os.makedirs(os.path.dirname(dest), exist_ok=True)
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dest + ".tmp", "wb") as out:
    shutil.copyfileobj(src, out)
os.replace(dest + ".tmp", dest)
PY
done
ln -sfn "$ORT_LIB" "$ORT_DIR/libonnxruntime.so"
ln -sfn "$ORT_LIB" "$ORT_DIR/libonnxruntime.so.1"   # the library's SONAME

# The rec model's character dictionary lives in its ONNX metadata (key
# "character"); write it out as a plain file, one entry per line. Tiny
# protobuf walk, stdlib only: ModelProto.metadata_props is field 14.
python3 - models/ppocr/ch_PP-OCRv4_rec_infer.onnx "$KEYS" <<'PY'
import sys
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7F) << s; s += 7
        if c < 0x80: return r, i
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        wt = key & 7
        if wt == 0: v, i = varint(b, i)
        elif wt == 1: v, i = b[i:i + 8], i + 8
        elif wt == 2: n, i = varint(b, i); v, i = b[i:i + n], i + n
        elif wt == 5: v, i = b[i:i + 4], i + 4
        else: raise SystemExit(f"unexpected protobuf wire type {wt}")
        yield key >> 3, v
model = memoryview(open(sys.argv[1], "rb").read())
meta = {}
for f, v in fields(model):
    if f == 14:
        kv = dict(fields(v))
        meta[bytes(kv.get(1, b"")).decode()] = bytes(kv.get(2, b"")).decode()
if "character" not in meta:
    raise SystemExit("rec model has no 'character' metadata")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write(meta["character"] + "\n")
PY

# 3. Verify what was unpacked.
[[ $(sha256 "$ORT_DIR/$ORT_LIB") == "$ORT_LIB_SHA256" ]] || die "$ORT_DIR/$ORT_LIB: sha256 mismatch"
if ldd "$ORT_DIR/libonnxruntime.so" | grep -q 'not found'; then
  ldd "$ORT_DIR/libonnxruntime.so" >&2
  die "libonnxruntime.so has unresolved dependencies"
fi
if [[ -f models/SHA256SUMS ]]; then
  (cd models && sha256sum --check --quiet SHA256SUMS) \
    || die "unpacked models do not match models/SHA256SUMS"
else
  log "writing models/SHA256SUMS (commit it)"
  (cd models && find ppocr silero -type f | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
fi
log "models and onnxruntime ready (export ORT_DYLIB_PATH=$PWD/$ORT_DIR/libonnxruntime.so)"
