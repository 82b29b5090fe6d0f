//! `kind = "video"`: the frames encoded as video (H.264 by default) in mp4,
//! Matroska or MPEG-TS, to a file or stdout, plain or with the results drawn.
//!
//! Timestamps follow the source: each frame keeps its pts and time base, so a
//! variable frame rate stays as it was. The encoder opens on a stream's first
//! frame at that frame's size; later frames of another size (a mid-stream
//! change) are scaled to it. `finish` flushes the encoder and writes the
//! trailer, so a run stopped with Ctrl-C leaves a complete file.
//!
//! With NVENC and NV12 device (NVDEC) frames, a stream is encoded where its
//! frames are: each is copied device to device into the encoder's own
//! surface, the results are drawn there by the `overlay_nv12` kernel, and
//! NVENC reads it; nothing is downloaded. Elsewhere (no NVENC, 10-bit
//! frames, host frames) frames are drawn and converted on the CPU from one
//! host copy.

use std::collections::HashMap;
use std::sync::Arc;

use ffmpeg_next::format::Pixel;

use super::draw::{self, Canvas};
use crate::backend::ffmpeg::{ChosenEncoder, EncoderSettings, Scaler, VideoEncoder, choose_encoder, sws_flags};
use crate::config::{Diagnostic, Interpolation, PipelineConfig, VideoContainer, VideoSinkConfig};
#[cfg(feature = "cuda")]
use crate::frame::Storage;
use crate::frame::{ColorInfo, Frame, Image, Pool};
use crate::stages::{Sink, StageError};

/// One output file (or stdout) for one stream.
struct Output {
    target: String,
    enc: VideoEncoder,
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

pub struct VideoSink {
    name: String,
    /// The path (with `{stream}` still in it), or `pipe:1` for stdout.
    target: String,
    templated: bool,
    container: VideoContainer,
    muxer_options: Vec<(String, String)>,
    encoder: ChosenEncoder,
    annotate: bool,
    only: Option<String>,
    outputs: HashMap<Arc<str>, Output>,
    pool: Pool<u8>,
}

/// The file for `stream`: `{stream}` replaced by its file-name-safe name, the
/// same name every other per-stream output (and the `dir` source's check that
/// no two files collide) uses.
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
        let target = if stdout {
            "pipe:1".to_string()
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
        let muxer_options = if c.fragmented && container == VideoContainer::Mp4 {
            vec![("movflags".to_string(), "frag_keyframe+empty_moov+default_base_moof".to_string())]
        } else {
            Vec::new()
        };
        Ok(VideoSink {
            name: name.to_string(),
            templated: target.contains("{stream}"),
            target,
            container,
            muxer_options,
            encoder,
            annotate: c.annotate,
            only: c.stream.as_ref().map(|s| s.get_ref().clone()),
            outputs: HashMap::new(),
            pool: Pool::new(4),
        })
    }

    /// The output for `frame`'s stream, created at this frame's size on its first frame.
    fn output(&mut self, frame: &Frame, img: &Image) -> Result<&mut Output, StageError> {
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
            let create = |input| {
                VideoEncoder::create(&target, self.container.muxer(), &self.muxer_options, &self.encoder, (w, h), frame.time_base, input)
            };
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
                        (enc, Some(d))
                    }
                    Err(e) => {
                        tracing::warn!(
                            "video sink `{}`: stream `{}`: {} does not take device frames here ({e}): each frame is downloaded and encoded from the host",
                            self.name,
                            frame.stream,
                            self.encoder.name
                        );
                        (create(None).map_err(StageError::Fatal)?, None)
                    }
                },
                None => (create(None).map_err(StageError::Fatal)?, None),
            };
            #[cfg(not(feature = "cuda"))]
            let enc = create(None).map_err(StageError::Fatal)?;
            tracing::debug!("video sink `{}`: {target}: {w}x{h} {} in {}", self.name, self.encoder.name, self.container.muxer());
            self.outputs.insert(
                frame.stream.clone(),
                Output {
                    target,
                    enc,
                    to_rgb: None,
                    to_yuv: None,
                    #[cfg(feature = "cuda")]
                    device,
                },
            );
        }
        Ok(self.outputs.get_mut(&frame.stream).expect("inserted above"))
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
    enc: &mut VideoEncoder,
    img: &Arc<Image>,
    marks: &[draw::Mark],
    pts: Option<i64>,
    pool: &Pool<u8>,
) -> Result<(), StageError> {
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
    enc.push(pic, pts).map_err(StageError::Fatal)
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

impl Sink for VideoSink {
    fn describe(&self) -> String {
        let opts: Vec<String> = self.encoder.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "{} {} ({}){}{} to {}",
            self.container.muxer(),
            self.encoder.name,
            opts.join(" "),
            if self.annotate { ", annotated" } else { "" },
            self.only.as_ref().map(|s| format!(", stream `{s}` only")).unwrap_or_default(),
            if self.target == "pipe:1" { "stdout" } else { &self.target }
        )
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let Some(img) = frame.image.clone() else { return Ok(()) };
        if self.only.as_deref().is_some_and(|s| s != &*frame.stream) {
            return Ok(());
        }
        let marks = if self.annotate { draw::marks(frame) } else { Vec::new() };
        let pool = self.pool.clone();
        let out = self.output(frame, &img)?;
        #[cfg(feature = "cuda")]
        if let Some(dev) = out.device.as_mut() {
            return write_on_device(dev, &mut out.enc, &img, &marks, frame.pts, &pool);
        }
        // Without NVENC on the device: one host copy of a device frame, shared with other CPU consumers.
        let img = crate::stages::on_host(&img, &pool).map_err(StageError::Frame)?;
        let (w, h) = (out.enc.width, out.enc.height);
        let mut picture = out.enc.picture();
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
        // A file that cannot be written stays broken: stop rather than skip.
        out.enc.push(picture, frame.pts).map_err(StageError::Fatal)
    }

    fn finish(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        for out in self.outputs.values_mut() {
            match out.enc.finish() {
                Ok(()) => tracing::info!("video sink `{}`: {} frame(s) to {}", self.name, out.enc.frames, out.target),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
