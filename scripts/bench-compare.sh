#!/usr/bin/env bash
# One run, one input (the 30 s 720p evaluation clip), three figures and their
# ratios: the ffmpeg CLI decoding alone (-f null), ONNX Runtime alone (Python,
# same model, same tensor size, same thread count), and infer-stream's whole
# pipeline (decode + preprocess + inference + postprocess). Ratios from one run
# on one machine, never absolute claims.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

INPUT=samples/eval-720p.mp4
MODEL=models/ppocr/ch_PP-OCRv4_det_infer.onnx
PIPELINE=pipelines/text-detection-bench.toml
RUNS=${RUNS:-60}

scripts/setup.sh >/dev/null
cargo build --release --locked --quiet
# ONNX Runtime's own Python package, in a private venv (not used by infer-stream itself).
VENV=.deps/venv
if [[ ! -x $VENV/bin/python ]] || ! $VENV/bin/python -c 'import onnxruntime, numpy' 2>/dev/null; then
  log "creating $VENV with onnxruntime==1.31.1 (reference only)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check onnxruntime==1.31.1 numpy
fi
frames=$(jq .frames "${INPUT%.mp4}.truth.json")
threads=$(nproc)

log "ffmpeg -f null: decode alone"
t0=$(date +%s.%N)
ffmpeg -nostdin -hide_banner -loglevel error -i "$INPUT" -f null -
t1=$(date +%s.%N)
ffmpeg_fps=$(echo "$frames / ($t1 - $t0)" | bc -l)

log "ONNX Runtime alone: $MODEL, 1x3x384x640, $threads intra-op threads, $RUNS runs"
ort_fps=$("$VENV/bin/python" - "$MODEL" "$threads" "$RUNS" <<'PY'
import sys, time
import numpy as np, onnxruntime as ort
model, threads, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
o = ort.SessionOptions()
o.intra_op_num_threads = threads
o.inter_op_num_threads = 1
o.add_session_config_entry("session.intra_op.allow_spinning", "0")
s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).random((1, 3, 384, 640), dtype=np.float32)
name = s.get_inputs()[0].name
s.run(None, {name: x})
t = time.perf_counter()
for _ in range(runs):
    s.run(None, {name: x})
print(runs / (time.perf_counter() - t))
PY
)

log "infer-stream: $PIPELINE (decode + preprocess + inference + postprocess)"
pipe_fps=$(target/release/infer-stream -q bench "$PIPELINE" --json | jq .fps)

printf '\n%-44s %10.2f fps\n' "ffmpeg CLI decode alone (-f null)" "$ffmpeg_fps"
printf '%-44s %10.2f fps\n' "ONNX Runtime alone (Python, same model)" "$ort_fps"
printf '%-44s %10.2f fps\n' "infer-stream pipeline (everything)" "$pipe_fps"
printf '\npipeline / ONNX Runtime alone   = %.3f  (1.0: the whole pipeline runs as fast as inference by itself)\n' "$(echo "$pipe_fps / $ort_fps" | bc -l)"
printf 'pipeline / ffmpeg decode alone  = %.3f  (share of decode-only speed kept while also running the model)\n' "$(echo "$pipe_fps / $ffmpeg_fps" | bc -l)"
