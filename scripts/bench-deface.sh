#!/usr/bin/env bash
# deface against infer-stream on the same real clip: both blur the faces
# CenterFace finds in every frame and write an H.264 mp4. deface is installed
# from PyPI in its own venv as its users install it (`pip install deface
# onnx onnxruntime`, so it runs its faster backend, ONNX Runtime), and run as
# its users run it (the `deface` command, its defaults: threshold 0.2,
# mask_scale 1.3, blurred ellipses, the frame's own size rounded up to 32).
# infer-stream runs pipelines/anonymize.toml with the same settings. Whole
# process each (start-up, model load, decode, inference, blur, encode),
# ROUNDS interleaved rounds; prints the fps of both and the ratio (median,
# min, max over rounds). Quality: the faces each found on the clip's frames
# and the share of deface's faces (score >= 0.5) we redact too: the detail left
# in each of them in both written videos, and the picture away from faces.
# Then `infer-stream bench` names where our time goes.
#
#   scripts/bench-deface.sh [CLIP]     (default samples/Megamind.avi; ROUNDS=5;
#                                       BIN: an infer-stream binary, else a release build;
#                                       DEFACE_VENV: where deface is installed)
#
# Ratios from one run on one machine, never absolute claims.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

CLIP=${1:-samples/Megamind.avi}
ROUNDS=${ROUNDS:-5}
VENV=${DEFACE_VENV:-.deps/deface-venv}
[[ -f $CLIP ]] || die "$CLIP is missing: run scripts/fetch-vision.sh"
if [[ ! -x $VENV/bin/deface ]]; then
  log "creating $VENV: deface 1.5.0 with onnx and onnxruntime from PyPI (reference only)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check deface==1.5.0 onnx==1.23.2 onnxruntime==1.31.1
fi
if [[ -z ${BIN:-} ]]; then
  cargo build --release --locked --quiet
  BIN=target/release/infer-stream
fi

IFS=, read -r W H FRAMES < <(ffprobe -v error -select_streams v:0 -count_frames \
  -show_entries stream=width,height,nb_read_frames -of csv=p=0 "$CLIP")
PW=$(((W + 31) / 32 * 32)) PH=$(((H + 31) / 32 * 32))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed -e "s#^width = .*#width = $PW#" -e "s#^height = .*#height = $PH#" -e "s#\.\./models/#$PWD/models/#" \
  pipelines/anonymize.toml >"$work/anonymize.toml"
CLIP=$(realpath "$CLIP")
log "$CLIP: $FRAMES frames ${W}x$H (CenterFace at ${PW}x$PH), $ROUNDS rounds"

ours=() theirs=()
for r in $(seq 1 "$ROUNDS"); do
  t0=$(date +%s.%N)
  ANON_INPUT=$CLIP ANON_OUTPUT=$work/ours.mp4 ANON_RESULTS=$work/ours.ndjson \
    "$BIN" -q run --progress never "$work/anonymize.toml" 2>"$work/ours.err" || die "infer-stream failed: $(tail -5 "$work/ours.err")"
  t1=$(date +%s.%N)
  "$VENV/bin/deface" "$CLIP" -o "$work/deface.mp4" --backend onnxrt >"$work/deface.log" 2>&1 || die "deface failed: $(tail -5 "$work/deface.log")"
  t2=$(date +%s.%N)
  ours+=("$(echo "$FRAMES / ($t1 - $t0)" | bc -l)")
  theirs+=("$(echo "$FRAMES / ($t2 - $t1)" | bc -l)")
  log "round $r: infer-stream $(printf %.2f "${ours[-1]}") fps, deface $(printf %.2f "${theirs[-1]}") fps"
done

# Quality: deface's own decode of every frame (its centerface.py, as tests/faces.rs uses it) against ours.
.deps/vision-venv/bin/python tests/support/faces_ref.py decode "$CLIP" "$FRAMES" 0.2 >"$work/deface.ndjson" 2>/dev/null
# Redaction, measured on the written videos against the clip: the detail left
# in each reference face (mean |Laplacian| after / before) and the PSNR away from faces.
for who in ours deface; do
  .deps/vision-venv/bin/python tests/support/faces_ref.py compare "$CLIP" "$work/$who.mp4" "$work/deface.ndjson" 1.3 \
    >"$work/$who.compare" 2>/dev/null || die "faces_ref.py compare failed on $who.mp4"
done
python3 - "$work/ours.ndjson" "$work/deface.ndjson" "${ours[*]}" "${theirs[*]}" "$work/ours.compare" "$work/deface.compare" <<'PY'
import json, statistics, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if '"seq"' in l]
ref = [json.loads(l) for l in open(sys.argv[2])]
def iou(a, b):
    iw, ih = max(0, min(a[2], b[2]) - max(a[0], b[0])), max(0, min(a[3], b[3]) - max(a[1], b[1]))
    i = iw * ih
    return i / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - i)
faces = matched = 0
for o, r in zip(ours, ref):
    mine = [d["bbox"] for d in o["results"]["faces"]["detections"]]
    for b in (b for b in r["boxes"] if b[4] >= 0.5):
        faces += 1
        matched += any(iou(b, m) >= 0.9 for m in mine)
a = [float(x) for x in sys.argv[3].split()]
b = [float(x) for x in sys.argv[4].split()]
ratio = [x / y for x, y in zip(a, b)]
print(f"infer-stream {statistics.median(a):.2f} fps (min {min(a):.2f}, max {max(a):.2f})")
print(f"deface       {statistics.median(b):.2f} fps (min {min(b):.2f}, max {max(b):.2f})")
print(f"ratio        {statistics.median(ratio):.2f}x (min {min(ratio):.2f}, max {max(ratio):.2f}) over {len(ratio)} rounds")
print(f"quality      {matched} of {faces} deface faces (score >= 0.5) found by infer-stream at IoU >= 0.9")
for name, path in (("infer-stream", sys.argv[5]), ("deface", sys.argv[6])):
    rows = [json.loads(l) for l in open(path)]
    detail = [d for r in rows for d in r["detail"]]
    psnr = [r["psnr"] for r in rows if r.get("psnr") is not None]
    gone = sum(d <= 0.25 for d in detail)
    print(f"redaction    {name}: {gone} of {len(detail)} reference faces lose >= 75% of their detail"
          f" (worst keeps {max(detail, default=0):.0%}); PSNR away from faces median {statistics.median(psnr):.1f} dB, min {min(psnr):.1f} dB")
PY
log "where infer-stream's time goes (bench, 100 frames)"
ANON_INPUT=$CLIP ANON_OUTPUT=$work/bench.mp4 ANON_RESULTS=$work/bench.ndjson \
  "$BIN" bench --frames 100 "$work/anonymize.toml" 2>/dev/null | grep -E '^((pipeline|node|cam|pre|centerface|faces|anon|video) |bottleneck:)' || true
