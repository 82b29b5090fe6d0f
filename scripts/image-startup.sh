#!/usr/bin/env bash
# Image size and start-up of the CPU image, measured with podman:
#   container start → /healthz answers → /readyz 200 (ready) → first result
#   (the first NDJSON line of the bundled sample, models loaded inside).
#
#   scripts/image-startup.sh [IMAGE] [RUNS]     default localhost/infer-stream:test, 3 runs
#
# Build the image first (scripts/build-image.sh, or the container test).
# Prints one line per run and the medians; these are the cold-start figures
# for scaling to zero (docs/deploy.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

IMAGE=${1:-localhost/infer-stream:test}
RUNS=${2:-3}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/containers.conf}
PODMAN=(podman --runtime runc)
"${PODMAN[@]}" image exists "$IMAGE" || die "no image $IMAGE: build it with scripts/build-image.sh"
command -v python3 >/dev/null || die "python3 is needed for the clock"

now() { python3 -c 'import time; print(f"{time.monotonic():.3f}")'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")
printf 'image %s: %d MB\n' "$IMAGE" $((size / 1000000))

data=$(mktemp -d)
name=infer-stream-startup-$$
cleanup() { "${PODMAN[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true; rm -rf "$data"; }
trap cleanup EXIT
chmod 777 "$data"

healthy=() ready=() first=()
for run in $(seq 1 "$RUNS"); do
  rm -f "$data"/*
  port=$(free_port)
  t0=$(now)
  "${PODMAN[@]}" run -d --name "$name" --read-only --cap-drop ALL -v "$data:/data" -p "127.0.0.1:$port:9464" \
    "$IMAGE" run /opt/infer-stream/pipelines/container-live.toml --metrics-addr 0.0.0.0:9464 --progress never \
    >/dev/null 2> >(grep -v 'systemd connection' >&2)
  th="" tr="" tf=""
  for _ in $(seq 1 1200); do
    t=$(now)
    [[ -z $th ]] && curl -fs -m 1 -o /dev/null "http://127.0.0.1:$port/healthz" && th=$t
    [[ -z $tr ]] && curl -fs -m 1 -o /dev/null "http://127.0.0.1:$port/readyz" && tr=$t
    [[ -z $tf && -s $data/results.ndjson ]] && tf=$t
    [[ -n $th && -n $tr && -n $tf ]] && break
    sleep 0.05
  done
  "${PODMAN[@]}" rm -f -t 10 "$name" >/dev/null 2>&1 || true
  [[ -n $th && -n $tr && -n $tf ]] || die "run $run: not ready within 60 s"
  h=$(python3 -c "print(f'{$th-$t0:.2f}')") r=$(python3 -c "print(f'{$tr-$t0:.2f}')") f=$(python3 -c "print(f'{$tf-$t0:.2f}')")
  printf 'run %d: start → healthy %s s, ready %s s, first result %s s\n' "$run" "$h" "$r" "$f"
  healthy+=("$h") ready+=("$r") first+=("$f")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'median of %d: start → healthy %s s, ready %s s, first result %s s\n' \
  "$RUNS" "$(median "${healthy[@]}")" "$(median "${ready[@]}")" "$(median "${first[@]}")"
