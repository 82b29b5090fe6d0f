//! `kind = "video"`: the frames encoded as video (H.264 by default) in mp4,
//! Matroska or MPEG-TS, to a file or stdout, plain or with the results drawn.
//!
//! Timestamps follow the source: each frame keeps its pts and time base, so a
//! variable frame rate stays as it was. The encoder opens on a stream's first
//! frame at that frame's size; later frames of another size (a mid-stream
//! change) are scaled to it. `finish` flushes the encoder and writes the
//! trailer, so a run stopped with Ctrl-C leaves a complete file.
//!
//! A URL (`rtmp://`, `rtsp://`, `srt://`, `udp://`) is pushed to a server.
//! When the server goes away the pipeline keeps running: the frames meanwhile
//! are dropped (counted, and said at the end), the connection is retried with
//! a growing wait (0.25 s doubling to 4 s), and the stream resumes, from a
//! keyframe, once the server is back.
//!
//! With NVENC and NV12 device (NVDEC) frames, a stream is encoded where its
//! frames are: each is copied device to device into the encoder's own
//! surface, the results are drawn there by the `overlay_nv12` kernel, and
//! NVENC reads it; nothing is downloaded. Elsewhere (no NVENC, 10-bit
//! frames, host frames) frames are drawn and converted on the CPU from one
//! host copy.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ffmpeg_next::format::Pixel;

use super::draw::{self, Canvas};
use crate::backend::ffmpeg::{ChosenEncoder, EncoderSettings, OutputSpec, Scaler, VideoEncoder, choose_encoder, sws_flags};
use crate::config::{Diagnostic, Interpolation, PipelineConfig, VideoContainer, VideoSinkConfig};
#[cfg(feature = "cuda")]
use crate::frame::Storage;
use crate::frame::{ColorInfo, Frame, Image, Pool};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, OutputLosses, Sink, StageError};

/// One output file (or stdout, or server) for one stream.
struct Output {
    target: String,
    /// `None` while a server is unreachable (frames are dropped until it is back).
    enc: Option<VideoEncoder>,
    /// The encoded size (the stream's first frame's, made even).
    size: (u32, u32),
    /// Servers only: the connection's ups and downs.
    link: Option<Link>,
    /// Frames earlier connections took (before they were lost).
    sent_before: u64,
    /// Source → RGB at the source size, for drawing.
    to_rgb: Option<Scaler>,
    /// Source (or the drawn RGB picture) → YUV 4:2:0 at the output size.
    to_yuv: Option<Scaler>,
    /// Set when NVENC reads this stream's pictures from device memory.
    #[cfg(feature = "cuda")]
    device: Option<DeviceOut>,
}

/// NVENC fed from device memory: the encoder's surfaces and the GPU they are on.
#[cfg(feature = "cuda")]
struct DeviceOut {
    frames: crate::backend::ffmpeg::DeviceFrames,
    gpu: Arc<crate::backend::cuda::Gpu>,
    /// Frames that cannot be copied as they are (host, another size): → NV12 on the host.
    to_nv12: Option<Scaler>,
    /// The stream's colour (its first frame's), which the encoder is tagged with.
    color: ColorInfo,
}

/// A server output's connection: down since when, when to try again, what was dropped.
#[derive(Default)]
struct Link {
    down_since: Option<Instant>,
    retry_at: Option<Instant>,
    wait: Duration,
    /// Frames not sent because the server was unreachable.
    dropped: u64,
    /// Times it went down, and came back.
    losses: u64,
    reconnects: u64,
}

const FIRST_RETRY: Duration = Duration::from_millis(250);
const LONGEST_RETRY: Duration = Duration::from_secs(4);

impl Link {
    /// The connection failed (or could not be made): try again after a longer wait.
    fn failed(&mut self, now: Instant) {
        if self.down_since.is_none() {
            self.down_since = Some(now);
            self.losses += 1;
        }
        self.wait = if self.wait.is_zero() { FIRST_RETRY } else { (self.wait * 2).min(LONGEST_RETRY) };
        self.retry_at = Some(now + self.wait);
    }

    fn due(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|t| now >= t)
    }
}

pub struct VideoSink {
    name: String,
    /// The path (with `{stream}` still in it), `pipe:1` for stdout, or a URL.
    target: String,
    templated: bool,
    /// `target` is a server (a URL), not a file.
    network: bool,
    spec: OutputSpec,
    encoder: ChosenEncoder,
    annotate: bool,
    only: Option<String>,
    outputs: HashMap<Arc<str>, Output>,
    pool: Pool<u8>,
    trails: draw::Trails,
}

/// The file for `stream`: `{stream}` replaced by its file-name-safe name, the
/// same name every other per-stream output (and the `dir` source's check that
/// no two files collide) uses.
/// SRT in live mode closes at once (`linger` 0), dropping what is still in
/// flight: the last half second of a stream never reaches the server. An
/// `srt://` URL without its own `linger` waits up to this many seconds at the
/// end for the receiver to have everything.
const SRT_LINGER_S: u32 = 3;

fn with_srt_linger(url: &str) -> String {
    if !url.to_ascii_lowercase().starts_with("srt://") || url.split(['?', '&']).any(|kv| kv.starts_with("linger=")) {
        return url.to_string();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}linger={SRT_LINGER_S}")
}

fn target_for(template: &str, stream: &str) -> String {
    template.replace("{stream}", &super::stream_file_name(stream))
}

impl VideoSink {
    /// Choose the encoder (said loudly when `auto` falls back) and create the
    /// output files now, so a bad codec or path fails before the run.
    /// `streams`: the sources feeding this sink.
    pub fn build(cfg: &PipelineConfig, name: &str, c: &VideoSinkConfig, streams: &[&str]) -> Result<Self, Diagnostic> {
        let path = cfg.expand(&c.path)?;
        let stdout = path == "-";
        let container = match (&c.format, VideoContainer::from_path(&path)) {
            (Some(f), _) => *f.get_ref(),
            (None, Some(f)) => f,
            (None, None) => return Err(cfg.diag(c.path.span(), format!("video sink `{name}`: no container for this path"))),
        };
        let settings = EncoderSettings {
            codec: c.codec.get_ref().clone(),
            preset: c.preset.as_ref().map(|p| p.get_ref().clone()),
            crf: c.crf.as_ref().map(|v| *v.get_ref()),
        };
        let encoder = choose_encoder(&settings).map_err(|e| {
            let span = c.preset.as_ref().map_or(c.codec.span(), |p| p.span());
            cfg.diag(span, format!("video sink `{name}`: {e}"))
                .with_help("check `codec` and `preset` (libx264 presets: ultrafast … veryslow; NVENC: p1 … p7)")
        })?;
        match &encoder.note {
            Some(note) if encoder.name == "h264_nvenc" => tracing::info!("video sink `{name}`: codec = \"auto\": {note}"),
            Some(note) => tracing::warn!("video sink `{name}`: codec = \"auto\": {note}"),
            None => {}
        }
        let network = crate::config::is_url(&path) && !path.to_ascii_lowercase().starts_with("file:");
        let target = if stdout {
            "pipe:1".to_string()
        } else if network {
            // A server, connected to on the stream's first frame: no local file or folder.
            with_srt_linger(&path)
        } else {
            let path = cfg.resolve_path(&c.path)?;
            let template = path.to_string_lossy().into_owned();
            let files: Vec<String> = if template.contains("{stream}") {
                streams.iter().map(|s| target_for(&template, s)).collect()
            } else {
                vec![template.clone()]
            };
            for f in &files {
                let f = std::path::Path::new(f);
                if let Some(dir) = f.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        cfg.diag(c.path.span(), format!("video sink `{name}`: cannot create folder {}: {e}", dir.display()))
                    })?;
                }
                std::fs::File::create(f)
                    .map_err(|e| cfg.diag(c.path.span(), format!("video sink `{name}`: cannot open {} for writing: {e}", f.display())))?;
            }
            template
        };
        let fragmented = c.fragmented && container == VideoContainer::Mp4;
        let mut muxer_options = Vec::new();
        if fragmented {
            let ms = c.fragment_duration_ms.as_ref().map_or(1000, |v| *v.get_ref());
            muxer_options.push(("movflags".to_string(), "frag_keyframe+empty_moov+default_base_moof".to_string()));
            // A fragment at least this often, even between keyframes; each is on disk once written.
            muxer_options.push(("frag_duration".to_string(), (u64::from(ms) * 1000).to_string()));
            muxer_options.push(("flush_packets".to_string(), "1".to_string()));
        }
        if container == VideoContainer::Rtsp {
            // Over the RTSP connection itself: nothing lost to UDP, no ports to open.
            muxer_options.push(("rtsp_transport".to_string(), "tcp".to_string()));
        }
        let keyframe_interval_s = match &c.keyframe_interval_s {
            Some(v) => Some(*v.get_ref()),
            None if fragmented || network => Some(1.0),
            None => None,
        };
        let spec = OutputSpec { muxer: container.muxer().to_string(), muxer_options, keyframe_interval_s, network };
        Ok(VideoSink {
            name: name.to_string(),
            templated: target.contains("{stream}"),
            target,
            network,
            spec,
            encoder,
            annotate: c.annotate,
            only: c.stream.as_ref().map(|s| s.get_ref().clone()),
            outputs: HashMap::new(),
            pool: Pool::new(4),
            trails: draw::Trails::default(),
        })
    }

    /// The output for `frame`'s stream, created at this frame's size on its first frame.
    fn output(&mut self, frame: &Frame, img: &Image) -> Result<(), StageError> {
        if !self.outputs.contains_key(&frame.stream) {
            let target = if self.templated { target_for(&self.target, &frame.stream) } else { self.target.clone() };
            // 4:2:0 needs even sizes.
            let (w, h) = ((img.width & !1).max(2), (img.height & !1).max(2));
            if (w, h) != (img.width, img.height) {
                tracing::info!(
                    "video sink `{}`: stream `{}`: {}x{} is encoded as {w}x{h} (4:2:0 video needs even sizes)",
                    self.name,
                    frame.stream,
                    img.width,
                    img.height
                );
            }
            let create = |input| VideoEncoder::create(&target, &self.spec, &self.encoder, (w, h), frame.time_base, input);
            #[cfg(feature = "cuda")]
            let (enc, device) = match self.device_output(frame, img, w, h) {
                Some(d) => match create(Some((&d.frames, img.color))) {
                    Ok(enc) => {
                        tracing::info!(
                            "video sink `{}`: stream `{}`: {} encodes the device frames in place{}",
                            self.name,
                            frame.stream,
                            self.encoder.name,
                            if self.annotate { ", results drawn on the GPU" } else { "" }
                        );
                        (Ok(enc), Some(d))
                    }
                    Err(e) => {
                        tracing::warn!(
                            "video sink `{}`: stream `{}`: {} does not take device frames here ({e}): each frame is downloaded and encoded from the host",
                            self.name,
                            frame.stream,
                            self.encoder.name
                        );
                        (create(None), None)
                    }
                },
                None => (create(None), None),
            };
            #[cfg(not(feature = "cuda"))]
            let enc = create(None);
            let shown = crate::config::mask_credentials(&target).into_owned();
            let mut link = self.network.then(Link::default);
            let enc = match (enc, &mut link) {
                (Ok(enc), _) => Some(enc),
                (Err(e), Some(link)) => {
                    link.failed(Instant::now());
                    tracing::error!(
                        "video sink `{}`: stream `{}`: cannot reach {shown} ({e}); its frames are dropped until it answers (retrying)",
                        self.name,
                        frame.stream
                    );
                    None
                }
                // A file that cannot be made stays broken: stop.
                (Err(e), None) => return Err(StageError::Fatal(e)),
            };
            tracing::debug!("video sink `{}`: {shown}: {w}x{h} {} in {}", self.name, self.encoder.name, self.spec.muxer);
            self.outputs.insert(
                frame.stream.clone(),
                Output {
                    target,
                    enc,
                    size: (w, h),
                    link,
                    sent_before: 0,
                    to_rgb: None,
                    to_yuv: None,
                    #[cfg(feature = "cuda")]
                    device,
                },
            );
        }
        Ok(())
    }
}

#[cfg(feature = "cuda")]
impl VideoSink {
    /// NVENC surfaces for a stream whose first frame `img` is on the device,
    /// when the encoder can read them; said loudly when it cannot.
    fn device_output(&self, frame: &Frame, img: &Image, w: u32, h: u32) -> Option<DeviceOut> {
        let Storage::Device(d) = &img.storage else { return None };
        if !self.encoder.name.ends_with("_nvenc") {
            return None;
        }
        let why = if img.format != Pixel::NV12 {
            format!("{:?} frames are not 8-bit NV12, which is what NVENC reads here", img.format)
        } else {
            // The frames context keeps its own reference to the device.
            match crate::backend::nvdec::hw_device(&d.gpu)
                .and_then(|hw| crate::backend::ffmpeg::DeviceFrames::nv12(&hw, w, h))
                .and_then(|frames| frames.try_encoder(&self.encoder, img.color).map(|_| frames))
            {
                Ok(frames) => return Some(DeviceOut { frames, gpu: d.gpu.clone(), to_nv12: None, color: img.color }),
                Err(e) => e,
            }
        };
        tracing::warn!("video sink `{}`: stream `{}`: {why}: each frame is downloaded and encoded from the host", self.name, frame.stream);
        None
    }
}

/// Encode `img` on the device: copied into a surface of the encoder (or
/// uploaded, when it is not an NV12 device frame of this size), `marks`
/// drawn there by the overlay kernel, then handed to NVENC.
#[cfg(feature = "cuda")]
fn write_on_device(
    dev: &mut DeviceOut,
    enc: &VideoEncoder,
    img: &Arc<Image>,
    marks: &[draw::Mark],
    pool: &Pool<u8>,
) -> Result<ffmpeg_next::frame::Video, StageError> {
    use crate::backend::ffmpeg::DeviceFrames;
    let gpu_err = |e: crate::backend::cuda::GpuError| StageError::Fatal(format!("GPU: {e}"));
    let (w, h) = (enc.width, enc.height);
    let mut pic = dev.frames.picture().map_err(StageError::Fatal)?;
    let [(py, y_pitch), (puv, uv_pitch)] = DeviceFrames::planes(&pic);
    let gpu = dev.gpu.clone();
    let as_is = match &img.storage {
        // The same size as the output (an odd last row or column is left out, as 4:2:0 needs).
        Storage::Device(d) if img.format == Pixel::NV12 && (img.width & !1, img.height & !1) == (w, h) && Arc::ptr_eq(&d.gpu, &gpu) => {
            Some(d)
        }
        _ => None,
    };
    // Kept until the GPU is done with it.
    let mut staged = None;
    match as_is {
        Some(d) => {
            gpu.copy_2d(d.planes[0], d.pitches[0], py, y_pitch, w as usize, h as usize).map_err(gpu_err)?;
            gpu.copy_2d(d.planes[1], d.pitches[1], puv, uv_pitch, w as usize, h as usize / 2).map_err(gpu_err)?;
        }
        None => {
            let host = crate::stages::on_host(img, pool).map_err(StageError::Frame)?;
            let mut nv12 = ffmpeg_next::frame::Video::new(Pixel::NV12, w, h);
            // In the stream's own matrix and range, which the encoder is tagged with.
            scaler(&mut dev.to_nv12, &host, (w, h, Pixel::NV12), Some(dev.color))?.run_into(&host, &mut nv12).map_err(StageError::Frame)?;
            DeviceFrames::upload(&mut pic, &nv12).map_err(StageError::Fatal)?;
            staged = Some(nv12);
        }
    }
    if !marks.is_empty() {
        // Results are in source pixels; a frame scaled to the output moves them too.
        let (sx, sy) = if as_is.is_some() { (1.0, 1.0) } else { (w as f32 / img.width as f32, h as f32 / img.height as f32) };
        let scaled: Vec<draw::Mark>;
        let marks = if (sx, sy) == (1.0, 1.0) {
            marks
        } else {
            scaled = marks
                .iter()
                .map(|m| draw::Mark { bbox: m.bbox.map(|b| [b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy]), ..m.clone() })
                .collect();
            &scaled
        };
        let o = super::overlay::layout(marks, h, (h / 180).max(2), draw::font(), dev.color);
        gpu.overlay_nv12(py, y_pitch, puv, uv_pitch, w as usize, h as usize, &o.prims, &o.alpha).map_err(gpu_err)?;
    }
    // The picture is complete before NVENC reads it.
    gpu.sync().map_err(gpu_err)?;
    drop(staged);
    Ok(pic)
}

/// Reuse `slot` if it converts `src` to `w`x`h` `fmt` (in colour `to`, see
/// `Scaler::new_to`), else build a new scaler.
fn scaler<'a>(
    slot: &'a mut Option<Scaler>,
    src: &Image,
    (w, h, fmt): (u32, u32, Pixel),
    to: Option<ColorInfo>,
) -> Result<&'a mut Scaler, StageError> {
    if !slot.as_ref().is_some_and(|s| s.fits_to(src, w, h, fmt, to)) {
        *slot = Some(Scaler::new_to(src, w, h, fmt, sws_flags(Interpolation::Bilinear), to).map_err(|e| StageError::Frame(e.to_string()))?);
    }
    Ok(slot.as_mut().expect("set above"))
}

/// Try again to reach `out`'s server when its wait is over; true when it is
/// connected now. A frame that finds it unreachable is counted as dropped.
fn reconnect(out: &mut Output, name: &str, stream: &str, spec: &OutputSpec, encoder: &ChosenEncoder, tb: (i32, i32)) -> bool {
    let link = out.link.as_mut().expect("only a server output is ever without an encoder");
    let now = Instant::now();
    if !link.due(now) {
        link.dropped += 1;
        return false;
    }
    #[cfg(feature = "cuda")]
    let input = out.device.as_ref().map(|d| (&d.frames, d.color));
    #[cfg(not(feature = "cuda"))]
    let input = None;
    let shown = crate::config::mask_credentials(&out.target).into_owned();
    match VideoEncoder::create(&out.target, spec, encoder, out.size, tb, input) {
        Ok(enc) => {
            let away = link.down_since.take().map_or(0.0, |t| now.duration_since(t).as_secs_f64());
            link.wait = Duration::ZERO;
            link.retry_at = None;
            if out.sent_before > 0 || link.dropped > 0 {
                link.reconnects += 1;
                tracing::warn!(
                    "video sink `{name}`: stream `{stream}`: {shown} is back after {away:.1} s; {} frame(s) dropped so far",
                    link.dropped
                );
            }
            out.enc = Some(enc);
            true
        }
        Err(e) => {
            link.failed(now);
            link.dropped += 1;
            tracing::warn!(
                "video sink `{name}`: stream `{stream}`: {shown} still unreachable ({e}); next try in {:.2} s",
                link.wait.as_secs_f64()
            );
            false
        }
    }
}

impl Sink for VideoSink {
    fn describe(&self) -> String {
        let opts: Vec<String> = self.encoder.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "{} {} ({}){}{} to {}",
            self.spec.muxer,
            self.encoder.name,
            opts.join(" "),
            if self.annotate { ", annotated" } else { "" },
            self.only.as_ref().map(|s| format!(", stream `{s}` only")).unwrap_or_default(),
            if self.target == "pipe:1" {
                "stdout".to_string()
            } else if self.network {
                crate::config::mask_credentials(&self.target).into_owned()
            } else {
                crate::config::tidy_path(std::path::Path::new(&self.target)).display().to_string()
            }
        )
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let Some(img) = frame.image.clone() else { return Ok(()) };
        if self.only.as_deref().is_some_and(|s| s != &*frame.stream) {
            return Ok(());
        }
        let marks = if self.annotate {
            let mut m = self.trails.update(frame);
            m.extend(draw::marks(frame));
            m
        } else {
            Vec::new()
        };
        let pool = self.pool.clone();
        self.output(frame, &img)?;
        let out = self.outputs.get_mut(&frame.stream).expect("made above");
        if out.enc.is_none() && !reconnect(out, &self.name, &frame.stream, &self.spec, &self.encoder, frame.time_base) {
            return Ok(());
        }
        let enc = out.enc.as_mut().expect("connected above");
        #[cfg(feature = "cuda")]
        let on_device = match out.device.as_mut() {
            Some(dev) => Some(write_on_device(dev, enc, &img, &marks, &pool)?),
            None => None,
        };
        #[cfg(not(feature = "cuda"))]
        let on_device = None;
        let picture = match on_device {
            Some(p) => p,
            None => {
                // Without NVENC on the device: one host copy of a device frame, shared with other CPU consumers.
                let img = crate::stages::on_host(&img, &pool).map_err(StageError::Frame)?;
                let (w, h) = out.size;
                let mut picture = enc.picture();
                if marks.is_empty() {
                    scaler(&mut out.to_yuv, &img, (w, h, Pixel::YUV420P), None)?.run_into(&img, &mut picture).map_err(StageError::Frame)?;
                } else {
                    // Draw at the source size (results are in source pixels), then scale to the output.
                    let (sw, sh) = (img.width, img.height);
                    let mut buf = pool.get(sw as usize * sh as usize * 3);
                    scaler(&mut out.to_rgb, &img, (sw, sh, Pixel::RGB24), None)?.run(&img, &mut buf).map_err(StageError::Frame)?;
                    let mut canvas = Canvas::from_raw(sw, sh, buf).ok_or_else(|| StageError::Frame("picture size mismatch".into()))?;
                    draw::draw(&mut canvas, &marks, (sh / 180).max(2), draw::font());
                    let rgb = Image::rgb24(sw, sh, canvas.into_raw());
                    scaler(&mut out.to_yuv, &rgb, (w, h, Pixel::YUV420P), None)?.run_into(&rgb, &mut picture).map_err(StageError::Frame)?;
                }
                picture
            }
        };
        match (enc.push(picture, frame.pts), out.link.as_mut()) {
            (Ok(()), _) => Ok(()),
            // A server that went away: the run goes on without it until it is back.
            (Err(e), Some(link)) => {
                let lost = out.enc.take().expect("written above");
                out.sent_before += lost.frames;
                lost.abandon();
                link.failed(Instant::now());
                link.dropped += 1;
                tracing::error!(
                    "video sink `{}`: stream `{}`: lost {} ({e}); the pipeline goes on, this output's frames are dropped until it is back (next try in {:.2} s)",
                    self.name,
                    frame.stream,
                    crate::config::mask_credentials(&out.target),
                    link.wait.as_secs_f64()
                );
                Ok(())
            }
            // A file that cannot be written stays broken: stop rather than skip.
            (Err(e), None) => Err(StageError::Fatal(e)),
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        for out in self.outputs.values_mut() {
            let shown = crate::config::mask_credentials(&out.target).into_owned();
            let finished = out.enc.as_mut().map(|e| e.finish());
            let sent = out.sent_before + out.enc.as_ref().map_or(0, |e| e.frames);
            match (finished, &mut out.link) {
                (Some(Err(e)), None) => errors.push(e),
                (Some(Err(e)), Some(link)) => {
                    tracing::error!("video sink `{}`: {shown}: the end of the stream was not delivered: {e}", self.name);
                    link.dropped += 1;
                }
                _ => {}
            }
            match &out.link {
                Some(link) if link.dropped > 0 => tracing::warn!(
                    "video sink `{}`: {sent} frame(s) to {shown}; {} frame(s) dropped while it was unreachable ({} reconnect(s))",
                    self.name,
                    link.dropped,
                    link.reconnects
                ),
                _ => tracing::info!("video sink `{}`: {sent} frame(s) to {shown}", self.name),
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }

    fn output_losses(&self) -> OutputLosses {
        let mut all = OutputLosses::default();
        for link in self.outputs.values().filter_map(|o| o.link.as_ref()) {
            all.lost += link.losses;
            all.reconnects += link.reconnects;
            all.undelivered += link.dropped;
        }
        all
    }
}

impl Build for VideoSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let streams: Vec<&str> = crate::graph::upstream_sources(cx.cfg, &cx.graph.producers, cx.index)
            .into_iter()
            .map(|j| cx.cfg.nodes[j].name.as_str())
            .collect();
        VideoSink::build(cx.cfg, &cx.node.name, self, &streams).map(|s| Body::Sink(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_srt_url_waits_for_its_end_to_be_delivered_unless_it_says_otherwise() {
        assert_eq!(super::with_srt_linger("srt://h:9000"), "srt://h:9000?linger=3");
        assert_eq!(super::with_srt_linger("srt://h:9000?latency=200000"), "srt://h:9000?latency=200000&linger=3");
        assert_eq!(super::with_srt_linger("srt://h:9000?linger=0"), "srt://h:9000?linger=0");
        assert_eq!(super::with_srt_linger("udp://h:9000"), "udp://h:9000");
    }

    #[test]
    fn stream_names_fill_the_template_safely() {
        assert_eq!(target_for("out/{stream}.mp4", "cam-1"), "out/cam-1.mp4");
        assert_eq!(target_for("out/{stream}.mp4", "../x"), "out/_._x.mp4");
        assert_eq!(target_for("out/{stream}.mp4", ".."), "out/_..mp4");
        assert_eq!(target_for("out/all.mp4", "cam"), "out/all.mp4");
    }

    /// Regression: `a.mp4` and `a_mp4` pass the `dir` source's collision
    /// check, so they must not share a video file either.
    #[test]
    fn streams_the_dir_source_accepts_get_distinct_files() {
        assert_ne!(target_for("out/{stream}.mkv", "a.mp4"), target_for("out/{stream}.mkv", "a_mp4"));
        assert_eq!(target_for("out/{stream}.mkv", "a.mp4"), "out/a.mp4.mkv");
    }
}
