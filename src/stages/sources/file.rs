//! `kind = "file"`: a media file or URL decoded by FFmpeg.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::ffmpeg::{FfmpegError, InputOptions, VideoDecoder, copy_to_image, shown_name, turn_picture};
use crate::config::{Diagnostic, FileSourceConfig, HwAccel, NodeConfig, PipelineConfig, Rotate, is_url};
use crate::frame::Pool;
use crate::runtime::{Shutdown, SourceCtx};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Source};

use super::{Built, StoppedAtOpen};

pub struct FileSource {
    path: PathBuf,
    decoder: VideoDecoder,
    pool: Pool<u8>,
    max_frames: Option<u64>,
    live: bool,
    realtime: bool,
    decode: Decode,
    /// How to open the input again (`restart`).
    opts: InputOptions,
    threads: usize,
    /// Frames emitted so far, over every run.
    next_seq: u64,
    /// Added to timestamps after a restart, so they keep increasing.
    pts_offset: i64,
    /// The last timestamp emitted (with the offset).
    last_pts: Option<i64>,
    /// Largest frame (width × height) accepted; larger ones are skipped and counted.
    max_pixels: u64,
    /// Lets a stop abort a read from a stalled network stream or a silent pipe.
    stop: super::StopCell,
    /// `rotate = "auto"`: frames are turned as the container's display matrix asks.
    rotate: bool,
    /// The quarter turn (degrees clockwise) applied to each frame, when one is.
    turn: Option<u32>,
    /// Event clips: where this stream's compressed packets are kept (a `clips` sink is in the pipeline).
    ring: Option<Arc<crate::runtime::clips::PacketRing>>,
}

/// How this source decodes, as resolved at build time.
enum Decode {
    /// FFmpeg software decode; the reason when `hwaccel = "auto"` did not pick NVDEC.
    Software(Option<String>),
    /// NVDEC into device frames on this GPU.
    #[cfg(feature = "cuda")]
    /// (The FFmpeg device is kept for reopening; the surfaces are held until their copies have run.)
    Nvdec(std::sync::Arc<crate::backend::cuda::Gpu>, crate::backend::ffmpeg::HwDevice, crate::backend::nvdec::Surfaces),
}

/// Why the input could not be opened for decoding.
enum OpenError {
    /// FFmpeg's error opening the input (a stop among them: [`FfmpegError::Stopped`]).
    Ffmpeg(FfmpegError),
    /// NVDEC could not be had (no GPU, no CUDA hwaccel for the codec, ...).
    Nvdec(String),
}

impl OpenError {
    fn is_stop(&self) -> bool {
        matches!(self, OpenError::Ffmpeg(FfmpegError::Stopped { .. }))
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Ffmpeg(e) => e.fmt(f),
            OpenError::Nvdec(e) => f.write_str(e),
        }
    }
}

/// Try NVDEC for `path`: the shared GPU, FFmpeg's device on its context and
/// stream, and a decoder with the CUDA hwaccel.
#[cfg(feature = "cuda")]
fn open_nvdec(path: &std::path::Path, device: usize, opts: &InputOptions) -> Result<(VideoDecoder, Decode), OpenError> {
    let gpu = crate::backend::cuda::Gpu::shared(device).map_err(|e| OpenError::Nvdec(e.to_string()))?;
    let hw = crate::backend::nvdec::hw_device(&gpu).map_err(OpenError::Nvdec)?;
    let dec = VideoDecoder::open_cuda(path, &hw, opts).map_err(|e| match e {
        e @ FfmpegError::Stopped { .. } => OpenError::Ffmpeg(e),
        e => OpenError::Nvdec(e.to_string()),
    })?;
    let surfaces = crate::backend::nvdec::Surfaces::new(&gpu);
    Ok((dec, Decode::Nvdec(gpu, hw, surfaces)))
}

#[cfg(not(feature = "cuda"))]
fn open_nvdec(_: &std::path::Path, _: usize, _: &InputOptions) -> Result<(VideoDecoder, Decode), OpenError> {
    Err(OpenError::Nvdec("this build has no GPU support (built without the `cuda` feature)".into()))
}

impl FileSource {
    /// Open the input now, so a missing or broken file is reported before anything runs.
    /// `shutdown`: the run's stop, which aborts a wait for stdin's first data.
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &FileSourceConfig,
        _index: u32,
        pool_size: usize,
        max_frames: Option<u64>,
        shutdown: Option<&Arc<Shutdown>>,
    ) -> Result<Built<Self>, Diagnostic> {
        let path = cfg.resolve_path(&c.uri)?;
        // `-`: a stream piped in on stdin (its format probed unless `format` names it).
        let stdin = path.as_os_str() == "-";
        let stop = super::StopCell::armed(shutdown);
        let mut opts = input_options(cfg, c)?;
        if stdin || is_url(&path.to_string_lossy()) {
            opts.interrupt = Some(stop.interrupt());
        }
        let open_path = path.clone();
        let max_pixels = c.max_pixels.or(cfg.settings.max_pixels).unwrap_or(crate::backend::ffmpeg::DEFAULT_MAX_PIXELS);
        opts.max_pixels = Some(max_pixels);
        let open = |p: &std::path::Path| VideoDecoder::open_with(p, c.decoder_threads, &opts).map_err(OpenError::Ffmpeg);
        let hw = c.hwaccel.as_ref().map(|h| *h.get_ref()).unwrap_or_default();
        let opened = match hw {
            HwAccel::None => open(&open_path).map(|d| (d, Decode::Software(None))),
            HwAccel::Cuda => open_nvdec(&open_path, c.device_id, &opts),
            // A pipe cannot be reopened after a failed try: stdin decodes in software unless asked;
            // so do raw and named input formats (NVDEC decodes compressed video).
            HwAccel::Auto if stdin || opts.format.is_some() => {
                open(&open_path).map(|d| (d, Decode::Software(Some(if stdin { "stdin" } else { "named input format" }.into()))))
            }
            HwAccel::Auto => match open_nvdec(&open_path, c.device_id, &opts) {
                Err(why) if !why.is_stop() => open(&open_path).map(|d| (d, Decode::Software(Some(why.to_string())))),
                r => r,
            },
        };
        let rotate = c.rotate.as_ref().is_some_and(|r| *r.get_ref() == Rotate::Auto);
        // Frames are turned in host memory: a picture NVDEC decodes into GPU memory is not.
        #[cfg(feature = "cuda")]
        let opened = match opened {
            Ok((d, Decode::Nvdec(..))) if rotate && d.info.quarter_turn().is_some() => {
                if hw == HwAccel::Cuda {
                    let span = c.rotate.as_ref().map(|r| r.span()).unwrap_or(c.uri.span());
                    return Err(cfg
                        .diag(span, format!("source `{}`: rotate = \"auto\" turns frames in host memory, not NVDEC's", node.name))
                        .with_help("use hwaccel = \"auto\" or \"none\" with rotate = \"auto\""));
                }
                drop(d);
                open(&open_path).map(|d| (d, Decode::Software(Some("rotate = \"auto\" turns frames in host memory".into()))))
            }
            r => r,
        };
        let (decoder, decode) = match opened {
            Ok(d) => d,
            // Stopped while the input was being opened: not an error, the run stops.
            Err(e) if e.is_stop() => return Ok(Built::StoppedAtOpen(StoppedAtOpen::new(shown_name(&path)))),
            Err(OpenError::Nvdec(e)) => {
                let span = c.hwaccel.as_ref().map(|h| h.span()).unwrap_or(c.uri.span());
                return Err(cfg
                    .diag(span, format!("source `{}`: hwaccel = \"cuda\": {e}", node.name))
                    .with_help("use hwaccel = \"auto\" to fall back to software decoding, or run `infer-stream doctor`"));
            }
            Err(OpenError::Ffmpeg(e)) => {
                let help = match e {
                    FfmpegError::TooLarge { .. } => {
                        "a corrupt or hostile header, or a really huge video: raise `max_pixels` on this source or under [pipeline] to accept it"
                    }
                    _ => "check the path and that FFmpeg can play it (ffprobe FILE)",
                };
                // The error names the input (`stdin` for `-`).
                return Err(cfg.diag(c.uri.span(), format!("source `{}`: {e}", node.name)).with_help(help));
            }
        };
        let turn = decoder.info.quarter_turn().filter(|_| rotate);
        match (turn, decoder.info.turn_note()) {
            (Some(d), _) => tracing::info!("source `{}`: frames turned {d}° clockwise, as the container's display matrix asks", node.name),
            (None, Some(note)) => tracing::warn!("source `{}`: {note}", node.name),
            _ => {}
        }
        let uri = c.uri.get_ref();
        let live = c.realtime
            || (is_url(uri) && ["rtsp", "rtsps", "rtmp", "udp", "srt", "rtp"].iter().any(|s| uri.starts_with(&format!("{s}://"))));
        let max_frames = match (c.max_frames, max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Built::Ready(FileSource {
            path,
            decoder,
            pool: Pool::new(pool_size),
            max_frames,
            live,
            realtime: c.realtime,
            decode,
            opts,
            threads: c.decoder_threads,
            next_seq: 0,
            pts_offset: 0,
            last_pts: None,
            max_pixels,
            stop,
            rotate,
            turn,
            ring: None,
        }))
    }
}

/// The demuxer and its options: rawvideo's frame size, pixel format and rate.
pub fn input_options(cfg: &PipelineConfig, c: &FileSourceConfig) -> Result<InputOptions, Diagnostic> {
    let format = c.format.as_ref().map(|f| cfg.expand(f)).transpose()?;
    let mut options = Vec::new();
    if format.as_deref() == Some("rawvideo") {
        if let (Some(w), Some(h)) = (&c.width, &c.height) {
            options.push(("video_size".to_string(), format!("{}x{}", w.get_ref(), h.get_ref())));
        }
        options.push(("pixel_format".into(), c.pixel_format.as_ref().map(|p| cfg.expand(p)).transpose()?.unwrap_or("yuv420p".into())));
        options.push(("framerate".into(), c.rate.as_ref().map_or("25".into(), |r| r.get_ref().to_string())));
    }
    Ok(InputOptions { format, options, ..Default::default() })
}

impl FileSource {
    /// Event clips: keep this stream's packets in `ring`.
    pub fn with_ring(mut self, ring: Arc<crate::runtime::clips::PacketRing>) -> Self {
        self.ring = Some(ring);
        self.tap_packets();
        self
    }

    /// Hand the decoder's packets to the ring, on the frames' timeline (the
    /// stream's time base, shifted as the frames are after a restart).
    fn tap_packets(&mut self) {
        let Some(ring) = self.ring.clone() else { return };
        ring.start(self.decoder.stream_params(), self.decoder.info.time_base);
        let (offset, epoch) = (self.pts_offset, ring.epoch());
        self.decoder.set_packet_tap(Box::new(move |p| {
            let Some(dts) = p.dts().or(p.pts()) else { return };
            let (pts, no_pts) = (p.pts().unwrap_or(dts), p.pts().is_none());
            let (duration, key) = (p.duration(), p.is_key());
            ring.push(crate::runtime::clips::RingPacket { packet: p, pts: pts + offset, dts: dts + offset, duration, key, epoch, no_pts });
        }));
    }

    /// The input as messages name it: its path (password masked), or `stdin`.
    fn display_name(&self) -> String {
        shown_name(&self.path)
    }
}

impl Source for FileSource {
    fn expected_frames(&self) -> Option<u64> {
        match (self.decoder.info.frames, self.max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn is_live(&self) -> bool {
        self.live
    }

    fn decode(&self) -> Option<String> {
        Some(match &self.decode {
            Decode::Software(None) => "software (hwaccel = \"none\")".to_string(),
            Decode::Software(Some(why)) => format!("software ({why})"),
            #[cfg(feature = "cuda")]
            Decode::Nvdec(gpu, ..) => format!("NVDEC on {}", gpu.name),
        })
    }

    fn describe(&self) -> String {
        // The decode choice is said once, in the summary (`decode()`).
        let i = &self.decoder.info;
        let (w, h) = if self.turn.is_some_and(|d| d != 180) { (i.height, i.width) } else { (i.width, i.height) };
        format!(
            "{} ({} {w}x{h}{}{}{})",
            self.display_name(),
            i.codec,
            i.fps.map(|f| format!(" @ {f:.2} fps")).unwrap_or_default(),
            self.turn.map(|d| format!(", turned {d}°")).unwrap_or_default(),
            if self.realtime { ", paced in real time" } else { "" }
        )
    }

    fn exhausted(&self) -> bool {
        self.max_frames.is_some_and(|m| self.next_seq >= m)
    }

    fn reopen(&mut self) -> Result<(), String> {
        if self.path.as_os_str() == "-" {
            return Err("stdin cannot be read again".into());
        }
        self.decoder = match &self.decode {
            Decode::Software(_) => VideoDecoder::open_with(&self.path, self.threads, &self.opts),
            #[cfg(feature = "cuda")]
            Decode::Nvdec(_, hw, _) => VideoDecoder::open_cuda(&self.path, hw, &self.opts),
        }
        .map_err(|e| e.to_string())?;
        self.turn = self.decoder.info.quarter_turn().filter(|_| self.rotate);
        // Timestamps go on one frame after the last one.
        let (num, den) = self.decoder.info.time_base;
        let step = self.decoder.info.fps.map_or(1, |f| ((den as f64 / num.max(1) as f64) / f).round().max(1.0) as i64);
        self.pts_offset = self.last_pts.map_or(self.pts_offset, |p| p + step);
        self.tap_packets();
        Ok(())
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        self.stop.arm(ctx.shutdown());
        let tb = self.decoder.info.time_base;
        let name = self.display_name();
        let mut seq = self.next_seq;
        let first_seq = seq;
        let mut bad_frames = 0u64;
        // Realtime pacing: the first frame's pts and when it went out.
        let mut clock: Option<(i64, std::time::Instant)> = None;
        // Downstream closed (every sink gone): not the input's doing.
        let mut stopped = false;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) {
            // Live totals for metrics (the frame about to be decoded is counted next time round).
            ctx.set_decode_errors(self.decoder.skipped_frames + bad_frames, self.decoder.corrupt_bursts);
            let decoded = match self.decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            };
            let pts = decoded.timestamp().or(decoded.pts());
            // A size change mid-stream past the limit (decoders that ignore FFmpeg's own check).
            if decoded.width() as u64 * decoded.height() as u64 > self.max_pixels {
                bad_frames += 1;
                tracing::warn!(
                    "{}: frame {seq}: size {}x{} exceeds the limit of {} pixels (max_pixels); skipped",
                    name,
                    decoded.width(),
                    decoded.height(),
                    self.max_pixels
                );
                continue;
            }
            let image = match &mut self.decode {
                Decode::Software(_) => copy_to_image(decoded, &self.pool),
                #[cfg(feature = "cuda")]
                Decode::Nvdec(gpu, _, held) => crate::backend::nvdec::device_image(decoded, gpu, Some(held)),
            };
            let image = match (image, self.turn) {
                (Ok(i), Some(d)) => turn_picture(&i, d, &self.pool),
                (image, _) => image,
            };
            let image = match image {
                Ok(i) => i,
                Err(e) => {
                    bad_frames += 1;
                    tracing::warn!("{name}: frame {seq}: {e}; skipped");
                    continue;
                }
            };
            if let (true, Some(p)) = (self.realtime, pts) {
                let (p0, t0) = *clock.get_or_insert((p, std::time::Instant::now()));
                let due = t0 + std::time::Duration::from_secs_f64(((p - p0) as f64 * tb.0 as f64 / tb.1.max(1) as f64).max(0.0));
                // Sleep in short steps so a stop request is honoured promptly.
                while !ctx.stopping() && std::time::Instant::now() < due {
                    std::thread::sleep((due - std::time::Instant::now()).min(std::time::Duration::from_millis(50)));
                }
            }
            let pts = pts.map(|p| p + self.pts_offset);
            self.last_pts = pts.or(self.last_pts);
            let frame = ctx.new_frame(seq, pts, tb, Some(Arc::new(image)));
            seq += 1;
            self.next_seq = seq;
            if !ctx.emit(frame) {
                stopped = true;
                break;
            }
        }
        // A read the stop aborted is no read error.
        if let Some(e) = self.decoder.read_error().filter(|_| !(self.decoder.interrupted() && ctx.stopping())) {
            tracing::warn!("{name}: read error: {e}; treated as the end of the input");
        }
        // Bursts were logged as they ended; the totals go to the summary.
        let skipped = self.decoder.skipped_frames + bad_frames;
        ctx.set_decode_errors(skipped, self.decoder.corrupt_bursts);
        // The input ended by itself (not stopped, not at max_frames): say so when it
        // gave nothing, or less than its container declares, rather than succeed quietly.
        let ended = !stopped && !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m);
        let why = match self.decoder.read_error() {
            Some(e) => format!("read error: {e}"),
            None => format!("{skipped} frame(s) skipped as corrupt"),
        };
        if ended && seq == 0 {
            let why = self.decoder.truncated.map_or(why, |t| t.describe(0));
            return Err(format!("{name}: no frame could be decoded ({why})"));
        }
        // Cut short (a copy or a download that stopped, a recording whose writer died): a source error.
        if let Some(t) = self.decoder.truncated.filter(|_| ended) {
            return Err(format!("{name}: {}", t.describe(seq - first_seq)));
        }
        Ok(())
    }
}

impl Build for FileSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        if *self.backend.get_ref() == crate::config::DecodeBackend::Gstreamer {
            #[cfg(feature = "gstreamer")]
            return super::gst::GstSource::build(cx.cfg, cx.node, self, cx.pool_size, cx.max_frames()).map(|s| Body::Source(Box::new(s)));
            #[cfg(not(feature = "gstreamer"))]
            return Err(cx
                .cfg
                .diag(self.backend.span(), format!("source `{}`: this build has no GStreamer backend", cx.node.name))
                .with_help("build with the `gstreamer` feature (on by default), or use backend = \"ffmpeg\""));
        }
        let built = FileSource::build(cx.cfg, cx.node, self, cx.index as u32, cx.pool_size, cx.max_frames(), cx.opts.shutdown.as_ref())?;
        let built = match (built, &cx.clips) {
            (super::Built::Ready(s), Some(hub)) => super::Built::Ready(s.with_ring(hub.ring(&cx.name))),
            (b, _) => b,
        };
        Ok(Body::Source(built.boxed()))
    }
}
