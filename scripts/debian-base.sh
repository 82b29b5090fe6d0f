#!/usr/bin/env bash
# A local Debian bookworm base image for building deploy/Dockerfile without a
# container registry: `debootstrap --variant=minbase bookworm` from the mirror
# apt already uses, imported into podman as localhost/debian:bookworm-slim.
# The root filesystem is cached as .deps/debian-base/bookworm-<mirror>-<date>.tar
# (one a day per mirror), so reruns on the same day only re-import it.
# Safe to rerun; prints the image name.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

IMAGE=${DEBIAN_BASE_IMAGE:-localhost/debian:bookworm-slim}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/containers.conf}
PODMAN=(podman --runtime runc)

mirror=${DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(grep -hm1 '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' || true)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [[ -n $mirror ]] || mirror=http://deb.debian.org/debian
fi
key=$(printf '%s' "$mirror" | tr -c 'A-Za-z0-9.\n' '_')
DIR=.deps/debian-base
TAR=$DIR/bookworm-$key-$(date -u +%Y%m%d).tar

if "${PODMAN[@]}" image exists "$IMAGE" && [[ -f $TAR && -f $TAR.imported ]]; then
  log "debian base: up to date ($IMAGE from $TAR)" >&2
  echo "$IMAGE"
  exit 0
fi

mkdir -p "$DIR"
if [[ ! -f $TAR ]]; then
  command -v debootstrap >/dev/null || die "debootstrap is not installed (scripts/install-deps.sh)"
  root=$(mktemp -d "$DIR/rootfs.XXXXXX")
  trap 'as_root rm -rf "$root"' EXIT
  log "debootstrap --variant=minbase bookworm from $mirror (about a minute)" >&2
  as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >"$DIR/debootstrap.log" 2>&1 \
    || die "debootstrap failed: see $DIR/debootstrap.log"
  # Like the official slim image: no apt caches or lists in the base.
  as_root rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  as_root tar -C "$root" -cf "$TAR.tmp" .
  mv "$TAR.tmp" "$TAR"
  # Older days' root filesystems are not needed any more.
  find "$DIR" -maxdepth 1 -name 'bookworm-*.tar' ! -name "$(basename "$TAR")" -delete
fi
log "podman import $TAR as $IMAGE" >&2
"${PODMAN[@]}" import --quiet "$TAR" "$IMAGE" >/dev/null
touch "$TAR.imported"
echo "$IMAGE"
