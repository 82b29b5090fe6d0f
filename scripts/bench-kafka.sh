#!/usr/bin/env bash
# What the Kafka sink costs: one pipeline (text detection on the 720p
# evaluation clip, pipelines/text-detection-bench.toml with a `kafka` sink to a
# Tansu broker started here), measured by `infer-stream bench` with its Kafka
# sink and with --null-sinks, in interleaved rounds (the order alternates), and
# the ratio of the median wall times. A ratio from one run on one machine,
# never an absolute claim.
#   ROUNDS=5 FRAMES=300 scripts/bench-kafka.sh
#   BIN=target/debug/infer-stream scripts/bench-kafka.sh   (skip the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ROUNDS=${ROUNDS:-5}
FRAMES=${FRAMES:-300}
BIN=${BIN:-target/release/infer-stream}
if [[ $BIN == target/release/infer-stream ]]; then
  cargo build --release --locked --quiet --features bus
fi
[[ -x .deps/tansu/tansu ]] || die ".deps/tansu/tansu is missing: run scripts/fetch-brokers.sh"
command -v jq >/dev/null || die "jq is missing: run scripts/install-deps.sh"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p out
work=$(mktemp -d)
.deps/tansu/tansu broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
  --storage-engine memory://tansu/ >"$work/tansu.log" 2>&1 &
tansu=$!
trap 'kill "$tansu" 2>/dev/null || true; wait "$tansu" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.1
done

# The bench pipeline with its null sink replaced by a Kafka sink (in out/, so its relative paths still hold).
pipeline=out/bench-kafka.toml
sed '/^\[sinks.discard\]/,$d' pipelines/text-detection-bench.toml >"$pipeline"
cat >>"$pipeline" <<TOML
[sinks.bus]
kind = "kafka"
inputs = ["boxes"]
brokers = "127.0.0.1:$port"
topic = "bench"
spool_dir = "spool-bench"
TOML
"$BIN" -q validate "$pipeline"

wall() { "$BIN" -q bench "$pipeline" --frames "$FRAMES" --json "$@" | jq .wall_seconds; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
: >"$work/null"
: >"$work/kafka"
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then
    wall --null-sinks >>"$work/null"
    wall >>"$work/kafka"
  else
    wall >>"$work/kafka"
    wall --null-sinks >>"$work/null"
  fi
  log "round $r: null $(tail -1 "$work/null") s, kafka $(tail -1 "$work/kafka") s"
done
null=$(median <"$work/null")
kafka=$(median <"$work/kafka")
ratio=$(echo "$kafka / $null" | bc -l)
# Each round's own ratio (its two runs back to back), and their median: what a
# burst of load on a shared machine does to one round stays in that round.
paired=$(paste "$work/kafka" "$work/null" | awk '{ printf "%.3f\n", $1 / $2 }')
pmedian=$(median <<<"$paired")
printf 'kafka sink: median wall %.3f s, null sink: %.3f s (%d rounds of %d frames)\n' "$kafka" "$null" "$ROUNDS" "$FRAMES"
printf 'ratio kafka / null = %.3f of the medians; per round: %s; median of those %.3f (at most 1.05 expected)\n' \
  "$ratio" "$(tr '\n' ' ' <<<"$paired" | sed 's/ $//')" "$pmedian"
