#!/usr/bin/env bash
# Check `bench --capacity` against plain runs: find N for a pipeline (by
# default pipelines/capacity.toml: text detection on the 30 s 720p clip), then
# `run` a pipeline written here with N paced sources, and one with N+1, and
# say whether each kept real time (drops within --max-drops) with p99 under
# the budget. N should; N+1 should not.
#
#   scripts/capacity-check.sh [PIPELINE] [BUDGET_MS] [MAX_DROPS]
#
# A busy machine moves the figures: state the budget generously. The binary is
# target/debug/infer-stream unless INFER_STREAM names another (e.g. a release build).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh

pipeline=${1:-pipelines/capacity.toml}
budget=${2:-1000}
drops=${3:-0.01}
step=${STEP_SECONDS:-8}
frames=${RUN_FRAMES:-120}
bin=${INFER_STREAM:-target/debug/infer-stream}
if [[ -z ${INFER_STREAM:-} ]]; then cargo build --locked --quiet; fi
[[ -x $bin ]] || die "$bin: not built"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log "bench --capacity $pipeline (budget p99 < $budget ms, drops ≤ $drops, $step s per count)"
"$bin" -q bench "$pipeline" --capacity --latency-budget "$budget" --max-drops "$drops" \
  --step-seconds "$step" --json ${PLOT:+--plot "$PLOT"} >"$work/capacity.json"
python3 - "$work/capacity.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'streams':>7} {'fps':>7} {'p99 ms':>8} {'dropped':>8}  result")
for s in sorted(r["steps"], key=lambda s: s["streams"]):
    print(f"{s['streams']:>7} {s['fps']:>7.1f} {s['latency_ms']['p99']:>8.1f} {s['frames']['dropped']:>8}  {'ok' if s['ok'] else 'FAIL: ' + s['reason']}")
print("answer:", r["answer"])
PY
n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["streams"])' "$work/capacity.json")
[[ $n -ge 1 ]] || die "not even one stream keeps real time here: nothing to check"

# write_pipeline K FILE: the pipeline with its one source as K paced streams,
# each stopping after $frames frames, written independently of bench's own edit.
write_pipeline() {
  python3 - "$pipeline" "$1" "$frames" "$2" <<'PY'
import os, re, sys, tomllib
src, k, frames, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
doc = tomllib.load(open(src, "rb"))
base = os.path.dirname(os.path.abspath(src))
(name, source), = doc["sources"].items()
def val(v):
    if isinstance(v, bool): return "true" if v else "false"
    if isinstance(v, str): return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list): return "[" + ", ".join(val(x) for x in v) + "]"
    if isinstance(v, dict): return "{ " + ", ".join(f"{a} = {val(b)}" for a, b in v.items()) + " }"
    return repr(v)
def path_val(key, v):
    # Paths (uri, model, path, folder) resolve against the original file's folder.
    if key in ("uri", "model", "path", "folder", "labels") and isinstance(v, str) and not re.match(r"^[a-z]+://|^/|^-$", v):
        return '"' + os.path.normpath(os.path.join(base, v)) + '"'
    return val(v)
lines = []
if "pipeline" in doc:
    lines.append("[pipeline]")
    lines += [f"{a} = {val(b)}" for a, b in doc["pipeline"].items()]
names = [f"{name}-{i}" for i in range(1, k + 1)]
for s in names:
    lines.append(f"\n[sources.\"{s}\"]")
    for a, b in source.items():
        lines.append(f"{a} = {path_val(a, b)}")
    lines += ["realtime = true", f"max_frames = {frames}"]
for section in ("stages", "sinks"):
    for node, t in doc.get(section, {}).items():
        lines.append(f"\n[{section}.{node}]")
        for a, b in t.items():
            if a == "inputs":
                b = [x for i in b for x in (names if i == name else [i])]
            lines.append(f"{a} = {path_val(a, b)}")
open(out, "w").write("\n".join(lines) + "\n")
PY
}

# check K: run K streams, print the verdict; exit status 0 when it kept up.
check() {
  local k=$1 file="$work/streams-$1.toml"
  write_pipeline "$k" "$file"
  "$bin" -q run "$file" --report "$work/report-$k.json" || die "run with $k streams failed"
  python3 - "$work/report-$k.json" "$k" "$budget" "$drops" <<'PY'
import json, sys
r, k, budget, drops = json.load(open(sys.argv[1])), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
f = r["frames"]
p99 = max((n["end_to_end_ms"]["p99"] for n in r["nodes"] if n.get("end_to_end_ms")), default=0.0)
share = f["dropped"] / max(f["decoded"], 1)
ok = share <= drops and p99 <= budget
print(f"run with {k} stream{'s' if k != 1 else ''}: {f['processed']}/{f['decoded']} frames processed, {f['dropped']} dropped ({share:.1%}), "
      f"p99 {p99:.0f} ms, {r['wall_seconds']:.1f} s: {'keeps real time within the budget' if ok else 'does NOT keep up'}")
sys.exit(0 if ok else 1)
PY
}

log "run N = $n and N+1 = $((n + 1)) paced streams directly ($frames frames each)"
status=0
check "$n" || { echo "MISMATCH: $n streams should keep up"; status=1; }
if check "$((n + 1))"; then echo "MISMATCH: $((n + 1)) streams should not keep up"; status=1; fi
if [[ $status -eq 0 ]]; then echo "capacity confirmed: $n stream(s) keep real time at p99 < $budget ms, $((n + 1)) do not"; fi
exit $status
