#!/usr/bin/env bash
# Dynamic batching against no batching, in one run on the same input:
# pipelines/batching.toml (4 streams → one detector, batch max 4) and the same
# pipeline with the `batch` line removed. Prints both figures and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
cargo build --release --locked --quiet
unbatched=$(mktemp -p pipelines .unbatched-XXXX.toml)
trap 'rm -f "$unbatched"' EXIT
grep -v '^batch = ' pipelines/batching.toml >"$unbatched"
run() { target/release/infer-stream -q bench "$1" --null-sinks --json | jq -r '[.fps, ([.nodes[] | select(.name == "det") | .batch_sizes[] | "\(.[1])x\(.[0])"] | join(" "))] | @tsv'; }
IFS=$'\t' read -r fps_b sizes_b < <(run pipelines/batching.toml)
IFS=$'\t' read -r fps_u _ < <(run "$unbatched")
printf '%-36s %8.2f fps  (batches: %s)\n' "4 streams, batch max 4" "$fps_b" "$sizes_b"
printf '%-36s %8.2f fps\n' "4 streams, no batching" "$fps_u"
printf 'batched / unbatched = %.3f\n' "$(echo "$fps_b / $fps_u" | bc -l)"
