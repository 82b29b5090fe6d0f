#!/usr/bin/env bash
# Install the system packages infer-stream needs (Debian 12): with --run only
# what building and running the default build needs, else also what the tests
# need. Safe to rerun: apt is only touched when a package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

# What building and running the default build needs (`scripts/install-deps.sh
# --run`, from scripts/setup-run.sh: the demo's set-up).
RUN_PKGS=(
  # build: bindgen for ffmpeg-sys-next / gstreamer-sys
  pkg-config clang libclang-dev
  # FFmpeg (decode backend) and its dev headers
  ffmpeg libavcodec-dev libavformat-dev libavutil-dev libswscale-dev
  libswresample-dev libavfilter-dev libavdevice-dev
  # GStreamer (the default build's second decode backend)
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-libav
  # ONNX Runtime and the models come from PyPI wheels (scripts/fetch-models.sh);
  # the demo's clip is drawn with DejaVu (scripts/make-samples.sh --demo)
  python3 python3-pip ca-certificates fonts-dejavu-core
  # `kind = "python"` stages (the `python` feature, in the default build):
  # libpython to embed and link, numpy for tensors and pictures (docs/python.md)
  python3-dev python3-numpy
)

# What the tests need besides (scripts/setup.sh, scripts/test.sh, CI): the
# optional features' builds, real servers and clients, sample tools.
TEST_PKGS=(
  # objcopy: the test of scripts/prune-fatbin.py (GPU bundle)
  binutils
  # a real RTSP camera for the RTSP tests (tests/support/rtsp_server.py, Debian's python3)
  gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-ugly gstreamer1.0-rtsp gstreamer1.0-tools
  # sample generation (speech/audio tools), scripting
  espeak-ng sox jq bc curl
  # a real Prometheus server for the metrics integration test
  prometheus
  # a real RTMP server for the video sink's push tests (tests/push_outputs.rs)
  nginx libnginx-mod-rtmp
  # the tracker evaluation's venv (scripts/fetch-eval-deps.sh: motmetrics, supervision)
  python3-venv
  # the `bus` feature: librdkafka built from source by rdkafka's cmake-build (Kafka sink and job source)
  cmake libcurl4-openssl-dev libssl-dev libzstd-dev
  # a real MQTT broker for the MQTT sink's tests
  mosquitto
  # TLS in front of the Kafka-protocol broker for the bus sinks' TLS tests (tests/bus_security.rs)
  stunnel4
  # the container image test: podman with runc, a Debian base made by debootstrap
  podman runc debootstrap uidmap slirp4netns fuse-overlayfs
  # the service API's tests: certificates made at test time, a real HTTP client
  openssl curl
  # the live view's browser tests (tests/serve_ui.rs): a real headless Chromium, driven by Playwright
  chromium
)

PKGS=("${RUN_PKGS[@]}" "${TEST_PKGS[@]}") what="to build, run and test" list=0
for arg in "$@"; do
  case $arg in
    --run) PKGS=("${RUN_PKGS[@]}") what="to build and run" ;;
    --list) list=1 ;;
    *) die "usage: scripts/install-deps.sh [--run] [--list]  (--run: only what building and running the default build needs; --list: print the packages, install nothing)" ;;
  esac
done
if ((list)); then
  printf '%s\n' "${PKGS[@]}" | awk '!seen[$0]++'
  exit 0
fi

# dpkg-query prints "name status" for known packages; anything not
# "installed" (or unknown to dpkg) counts as missing.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PKGS[@]}" 2>/dev/null \
  | awk '$2 == "installed" { print $1 }' || true)
missing=()
for p in "${PKGS[@]}"; do
  grep -qxF "$p" <<<"$installed" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  log "system packages $what: all ${#PKGS[@]} already installed"
  exit 0
fi

log "installing ${#missing[@]} package(s): ${missing[*]}"
as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
log "system packages: done"
