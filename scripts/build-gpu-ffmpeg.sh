#!/usr/bin/env bash
# Build a small shared FFmpeg for GPU hosts that have no FFmpeg of their own.
#
# Same source and major versions as Debian 12's libav* (5.1: libavcodec.so.59,
# libavformat.so.59, libavutil.so.57, libswscale.so.6, libswresample.so.4), so
# the binary built here against Debian's FFmpeg loads these instead through
# LD_LIBRARY_PATH. Only what the GPU check needs: the common demuxers,
# parsers and decoders, NVDEC (CUDA) hwaccels, the NVENC encoders and FFmpeg's
# own MPEG-4 encoder (the CPU encode after a download; libx264 is an external
# library), the mp4/Matroska/MPEG-TS muxers, swscale and swresample; no
# external libraries, so the five libraries travel alone (a few MiB).
#
# Output: .deps/ffmpeg-gpu/lib/*.so.* ; the source comes from Debian's source
# package through apt (deb.debian.org), nothing else is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

PREFIX="$PWD/.deps/ffmpeg-gpu"
CONFIG=(
  --enable-shared --disable-static --disable-programs --disable-doc
  --disable-autodetect --disable-everything
  --disable-avdevice --disable-avfilter --disable-postproc
  --enable-avcodec --enable-avformat --enable-swscale --enable-swresample
  --enable-ffnvcodec --enable-nvdec --enable-nvenc
  --enable-protocol=file,pipe
  --enable-demuxer=mov,matroska,mpegts,nut,h264,hevc,rawvideo,wav,mp3,flac,ogg,aac
  --enable-parser=h264,hevc,mpeg4video,vp9,aac,mpegaudio,flac,opus,vorbis
  --enable-decoder=h264,hevc,mpeg4,vp9,rawvideo,aac,mp3,flac,opus,vorbis,pcm_s16le,pcm_f32le
  --enable-hwaccel=h264_nvdec,hevc_nvdec,mpeg4_nvdec,vp9_nvdec
  --enable-encoder=h264_nvenc,hevc_nvenc,mpeg4
  --enable-muxer=mp4,matroska,mpegts
  --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb,vp9_superframe_split
)
if [[ -f "$PREFIX/lib/libavcodec.so.59" && "$(cat "$PREFIX/CONFIG" 2>/dev/null)" == "${CONFIG[*]}" ]]; then
  log "GPU FFmpeg: already built in $PREFIX"
  exit 0
fi

# nv-codec-headers (the NVDEC/NVENC API, loaded from the driver at run time), nasm.
need=()
for p in libffmpeg-nvenc-dev nasm dpkg-dev; do
  dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

WORK="$PWD/.deps/ffmpeg-src"
mkdir -p "$WORK"
if ! ls -d "$WORK"/ffmpeg-5.1*/ >/dev/null 2>&1; then
  # Debian's source package, through apt, with a private deb-src list.
  lists="$WORK/apt-lists"
  mkdir -p "$lists/partial"
  cat >"$WORK/sources.list" <<SRC
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian-security bookworm-security main
SRC
  opts=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$lists")
  apt-get "${opts[@]}" update -qq
  (cd "$WORK" && apt-get "${opts[@]}" source -qq ffmpeg)
fi
SRCDIR=$(ls -d "$WORK"/ffmpeg-5.1*/ | head -1)
log "GPU FFmpeg: configuring $SRCDIR"

BUILD="$WORK/build"
rm -rf "$BUILD" && mkdir -p "$BUILD"
cd "$BUILD"
"$SRCDIR/configure" --prefix="$PREFIX" "${CONFIG[@]}" >configure.log
make -j"$(nproc)" >make.log 2>&1 || { tail -30 make.log; exit 1; }
rm -rf "$PREFIX/lib"
make install >/dev/null
echo "${CONFIG[*]}" >"$PREFIX/CONFIG"
du -sh "$PREFIX/lib"
log "GPU FFmpeg: built into $PREFIX/lib"
