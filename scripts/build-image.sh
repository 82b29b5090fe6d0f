#!/usr/bin/env bash
# Build the infer-stream container image with podman (or docker).
#
#   scripts/build-image.sh [--gpu] [--host [BINARY]] [--tag TAG] [--base IMAGE]
#
# --host       take a binary built on this machine instead of compiling in the
#              Rust image: BINARY, or a fresh `cargo build --release` (minutes
#              on 2 cores). It is stripped into target/image/ (the only part of
#              target/ in the build context, see .dockerignore).
# --gpu        the runtime-gpu target (NVIDIA CUDA 13 base, onnxruntime-gpu);
#              needs NVIDIA's base images from a registry.
# --base IMG   the Debian base (default debian:bookworm-slim; without a registry
#              use scripts/debian-base.sh, which makes localhost/debian:bookworm-slim).
# --tag TAG    default localhost/infer-stream:<version> (…-gpu for --gpu).
#
# Uses podman with runc and deploy/containers.conf (set CONTAINER_CLI=docker
# for Docker). Prints the image tag on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

gpu=0 host=0 binary="" tag="" base=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --gpu) gpu=1 ;;
    --host) host=1; if [[ ${2:-} && ${2:0:1} != - ]]; then binary=$2; shift; fi ;;
    --tag) tag=$2; shift ;;
    --base) base=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

suffix=""
[[ $gpu == 1 ]] && suffix=-gpu
version=$(awk -F'"' '/^version *=/ {print $2; exit}' Cargo.toml)
[[ -n $tag ]] || tag=localhost/infer-stream:$version$suffix

ort_whl=.deps/wheels/onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl
[[ -f $ort_whl ]] || die "$ort_whl is missing: run scripts/fetch-models.sh"
[[ -f models/ppocr/ch_PP-OCRv4_det_infer.onnx && -f models/silero/silero_vad.onnx ]] || die "models are missing: run scripts/fetch-models.sh"
[[ -f samples/text-720p.mp4 ]] || die "samples/text-720p.mp4 is missing: run scripts/make-samples.sh"
if [[ $gpu == 1 ]]; then
  gpu_whl=.deps/wheels/onnxruntime_gpu-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl
  if [[ ! -f $gpu_whl ]]; then
    log "downloading onnxruntime-gpu==1.31.1 (256 MB)" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 -d .deps/wheels onnxruntime-gpu==1.31.1
  fi
  # The same pin as scripts/gpu-bundle.sh.
  [[ $(sha256 "$gpu_whl") == e26c475fe361b2015f45b4b824bd13f0bb20204e59b62814e6f0acd5f3d491a6 ]] \
    || die "sha256 mismatch for $gpu_whl (delete it to download again)"
fi

args=()
if [[ $host == 1 ]]; then
  if [[ -z $binary ]]; then
    log "cargo build --release --locked --all-features" >&2
    cargo build --release --locked --all-features >&2
    binary=target/release/infer-stream
  fi
  [[ -x $binary ]] || die "$binary is not an executable"
  mkdir -p target/image
  dest=target/image/infer-stream$suffix
  objcopy --strip-debug "$binary" "$dest.tmp" && mv "$dest.tmp" "$dest"
  args+=(--build-arg BINARY_FROM=host --build-arg GPU_BINARY_FROM=host-gpu)
fi
if [[ -n $base ]]; then args+=(--build-arg "BASE=$base"); fi

cli=${CONTAINER_CLI:-podman}
if [[ $cli == podman ]]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/containers.conf}
  # --format docker keeps HEALTHCHECK and STOPSIGNAL (the OCI format drops HEALTHCHECK).
  cmd=(podman --runtime runc build --format docker)
else
  cmd=("$cli" build)
fi
target=runtime
[[ $gpu == 1 ]] && target=runtime-gpu
log "$cli build --target $target -t $tag" >&2
"${cmd[@]}" -f deploy/Dockerfile --target "$target" "${args[@]}" -t "$tag" . >&2
echo "$tag"
