#!/usr/bin/env bash
# Doing less work against doing it all, in one session on the same inputs:
# - pipelines/interval.toml's detector (interval = 2) on samples/plates.mp4
#   against the same pipeline with every frame inferred;
# - pipelines/motion.toml (motion gating) on samples/still-plates.mp4 against
#   the same pipeline ungated.
# Each pipeline is cut down to preprocess → detector → boxes (→ track), sinks
# replaced by `null`. Each pair runs ROUNDS times (default 3), alternating, so
# that load from elsewhere falls on both alike; prints each pair's median fps
# and the median of the rounds' ratios.
# BIN=target/debug/infer-stream uses that binary instead of a release build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${BIN:-} ]]; then
  scripts/setup.sh >/dev/null
  cargo build --release --locked --quiet
  BIN=target/release/infer-stream
fi
tmp=$(mktemp -d -p pipelines .lesswork-XXXX)
trap 'rm -rf "$tmp"' EXIT

# Keep the sections up to the detector's boxes (and the tracker); drop OCR on crops and the sinks.
upto() { awk -v stop="$2" '/^\[/{keep = ($0 !~ stop)} keep' "$1"; }
sink() { printf '\n[sinks.out]\nkind = "null"\ninputs = ["%s"]\n' "$1"; }
fix() { sed 's#"\.\./#"../../#'; }

{ upto pipelines/interval.toml '^\[(stages\.(crops|rec|text)|sinks\.)' | fix; sink tracks; } >"$tmp/interval.toml"
grep -v '^interval = ' "$tmp/interval.toml" >"$tmp/every.toml"
{ upto pipelines/motion.toml '^\[sinks\.' | fix; sink boxes; } >"$tmp/motion.toml"
grep -v '^motion = ' "$tmp/motion.toml" >"$tmp/ungated.toml"

fps() { "$BIN" -q bench "$1" --null-sinks --json | jq -r '.fps'; }
work() {
  "$BIN" -q run "$1" --report "$tmp/r.json" >/dev/null 2>&1
  jq -r '[.nodes[] | select(.name == "det") | .work[0] | "inferred \(.inferred), predicted \(.predicted), carried \(.carried) (\(.carried_moved) while the boxes moved)"] | .[0]' "$tmp/r.json"
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# pair A B: the median fps of A and of B, and the median of the rounds' A / B.
pair() {
  local a b as=() bs=() rs=()
  for _ in $(seq "${ROUNDS:-3}"); do
    a=$(fps "$1")
    b=$(fps "$2")
    as+=("$a") bs+=("$b") rs+=("$(echo "$a / $b" | bc -l)")
  done
  echo "$(printf '%s\n' "${as[@]}" | median) $(printf '%s\n' "${bs[@]}" | median) $(printf '%s\n' "${rs[@]}" | median)"
}

read -r fps_i fps_e ratio_i < <(pair "$tmp/interval.toml" "$tmp/every.toml")
read -r fps_m fps_u ratio_m < <(pair "$tmp/motion.toml" "$tmp/ungated.toml")
printf '%-36s %8.2f fps  (%s)\n' "plates.mp4, interval = 2" "$fps_i" "$(work "$tmp/interval.toml")"
printf '%-36s %8.2f fps\n' "plates.mp4, every frame" "$fps_e"
printf 'interval 2 / every frame = %.2f\n' "$ratio_i"
printf '%-36s %8.2f fps  (%s)\n' "still-plates.mp4, motion gating" "$fps_m" "$(work "$tmp/motion.toml")"
printf '%-36s %8.2f fps\n' "still-plates.mp4, ungated" "$fps_u"
printf 'motion gated / ungated = %.2f\n' "$ratio_m"
