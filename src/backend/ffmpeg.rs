//! FFmpeg through ffmpeg-next: demux + decode into pooled host images, and
//! swscale on pooled buffers for the CPU preprocess.

use std::path::Path;
use std::sync::Once;

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use crate::frame::{ColorInfo, Image, Matrix, Pool, Storage};

#[derive(Debug, thiserror::Error)]
pub enum FfmpegError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: ff::Error },
    #[error("{path}: no video stream")]
    NoVideo { path: String },
    #[error("{path}: cannot create a decoder for codec `{codec}`: {source}")]
    Decoder { path: String, codec: String, source: ff::Error },
    #[error("{path}: frame {frame}: {what}")]
    Frame { path: String, frame: u64, what: String },
    #[error("swscale: cannot convert {from:?} {src_w}x{src_h} to {to:?} {dst_w}x{dst_h}")]
    Scaler { from: Pixel, to: Pixel, src_w: u32, src_h: u32, dst_w: u32, dst_h: u32 },
}

/// Initialise FFmpeg once and keep its own logging quiet (we report errors ourselves).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = ff::init();
        ff::util::log::set_level(ff::util::log::Level::Error);
    });
}

/// `major.minor.micro` of libavcodec, libavformat, libavutil.
pub fn versions() -> String {
    let v = |n: u32| format!("{}.{}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff);
    format!("libavcodec {}, libavformat {}, libavutil {}", v(ff::codec::version()), v(ff::format::version()), v(ff::util::version()))
}

/// How to open an input: a demuxer by name (else the format is probed) and
/// its options (e.g. rawvideo's `pixel_format`, `video_size`, `framerate`).
#[derive(Debug, Clone, Default)]
pub struct InputOptions {
    pub format: Option<String>,
    pub options: Vec<(String, String)>,
}

/// The demuxer named `name`, if this FFmpeg has it.
fn find_input_format(name: &str) -> Option<ff::format::Input> {
    init();
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a lookup in FFmpeg's static demuxer table with a NUL-terminated name.
    let ptr = unsafe { ffi::av_find_input_format(c.as_ptr()) };
    // SAFETY: non-null demuxers are static and live for the whole process.
    (!ptr.is_null()).then(|| unsafe { ff::format::Input::wrap(ptr as *mut _) })
}

/// Whether this FFmpeg has a demuxer named `name` (`rawvideo`, `mpegts`, `s16le`, ...).
pub fn input_format_exists(name: &str) -> bool {
    find_input_format(name).is_some()
}

/// Whether `name` is a pixel format FFmpeg knows (`yuv420p`, `rgb24`, `nv12`, `gray`, ...).
pub fn pixel_format_exists(name: &str) -> bool {
    init();
    name.parse::<Pixel>().is_ok_and(|p| p != Pixel::None)
}

/// Open `path` with `opts`. `-` means stdin.
fn open_input(path: &Path, opts: &InputOptions) -> Result<ff::format::context::Input, FfmpegError> {
    init();
    let stdin = path.as_os_str() == "-";
    let shown = if stdin { "stdin".to_string() } else { path.to_string_lossy().into_owned() };
    let path = if stdin { Path::new("pipe:0") } else { path };
    let err = |source| FfmpegError::Open { path: shown.clone(), source };
    let mut dict = ff::Dictionary::new();
    for (k, v) in &opts.options {
        dict.set(k, v);
    }
    match &opts.format {
        None if opts.options.is_empty() => ff::format::input(&path).map_err(err),
        None => ff::format::input_with_dictionary(&path, dict).map_err(err),
        Some(name) => {
            let f = find_input_format(name).ok_or(FfmpegError::Open { path: shown.clone(), source: ff::Error::DemuxerNotFound })?;
            match ff::format::open_with(&path, &ff::Format::Input(f), dict).map_err(err)? {
                ff::format::context::Context::Input(i) => Ok(i),
                ff::format::context::Context::Output(_) => unreachable!("opened as an input"),
            }
        }
    }
}

/// What the decoder knows about the stream before the first frame.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    pub codec: String,
    pub width: u32,
    pub height: u32,
    pub time_base: (i32, i32),
    /// Frames per second (average), if known.
    pub fps: Option<f64>,
    /// Frame count from the container, or estimated from duration × fps.
    pub frames: Option<u64>,
    /// Frame count the container itself lists (mp4, mov), when it does.
    pub declared_frames: Option<u64>,
}

/// A demuxer + video decoder for one input.
pub struct VideoDecoder {
    path: String,
    input: ff::format::context::Input,
    stream_index: usize,
    decoder: ff::decoder::Video,
    frame: ff::frame::Video,
    eof_sent: bool,
    /// Packets the decoder rejected (corrupt data); decoding goes on.
    pub corrupt_packets: u64,
    /// The input could not be read to its end (truncated file, I/O error): what went wrong.
    pub read_error: Option<String>,
    pub info: StreamInfo,
}

impl VideoDecoder {
    /// Open `path` (file or URL, `-` for stdin) and its best video stream. `threads = 0` lets FFmpeg choose.
    pub fn open(path: &Path, threads: usize) -> Result<Self, FfmpegError> {
        Self::open_with(path, threads, &InputOptions::default())
    }

    /// As [`VideoDecoder::open`], with a named demuxer and its options.
    pub fn open_with(path: &Path, threads: usize, opts: &InputOptions) -> Result<Self, FfmpegError> {
        let p = path.to_string_lossy().into_owned();
        let input = open_input(path, opts)?;
        let stream = input.streams().best(ff::media::Type::Video).ok_or_else(|| FfmpegError::NoVideo { path: p.clone() })?;
        let stream_index = stream.index();
        let codec_id = stream.parameters().id();
        let mut ctx = ff::codec::context::Context::from_parameters(stream.parameters()).map_err(|source| FfmpegError::Decoder {
            path: p.clone(),
            codec: format!("{codec_id:?}"),
            source,
        })?;
        ctx.set_threading(ff::codec::threading::Config { kind: ff::codec::threading::Type::Frame, count: threads, ..Default::default() });
        let decoder =
            ctx.decoder().video().map_err(|source| FfmpegError::Decoder { path: p.clone(), codec: format!("{codec_id:?}"), source })?;
        let tb = stream.time_base();
        let rate = stream.avg_frame_rate();
        let fps = (rate.denominator() != 0 && rate.numerator() > 0).then(|| f64::from(rate));
        let declared_frames = (stream.frames() > 0).then_some(stream.frames() as u64);
        let frames = match stream.frames() {
            n if n > 0 => Some(n as u64),
            _ => {
                let dur = if stream.duration() > 0 {
                    stream.duration() as f64 * f64::from(tb)
                } else {
                    input.duration() as f64 / ffi::AV_TIME_BASE as f64
                };
                fps.filter(|_| dur > 0.0).map(|f| (dur * f).round() as u64)
            }
        };
        let info = StreamInfo {
            codec: ff::codec::decoder::find(codec_id).map(|c| c.name().to_string()).unwrap_or_else(|| format!("{codec_id:?}")),
            width: decoder.width(),
            height: decoder.height(),
            time_base: (tb.numerator(), tb.denominator()),
            fps,
            frames,
            declared_frames,
        };
        Ok(VideoDecoder {
            path: p,
            input,
            stream_index,
            decoder,
            frame: ff::frame::Video::empty(),
            eof_sent: false,
            corrupt_packets: 0,
            read_error: None,
            info,
        })
    }

    /// The next decoded frame, or `None` at the end of the stream.
    pub fn next_frame(&mut self) -> Result<Option<&ff::frame::Video>, FfmpegError> {
        loop {
            match self.decoder.receive_frame(&mut self.frame) {
                Ok(()) => return Ok(Some(&self.frame)),
                Err(ff::Error::Eof) => return Ok(None),
                Err(ff::Error::Other { errno }) if errno == ffi::EAGAIN => {}
                Err(e) => {
                    // A frame the decoder could not rebuild: count it and go on.
                    self.corrupt_packets += 1;
                    tracing::debug!(path = %self.path, error = %e, "decode error");
                    continue;
                }
            }
            if self.eof_sent {
                return Ok(None);
            }
            self.feed();
        }
    }

    /// Send the next packet of our stream (or end of stream) to the decoder.
    fn feed(&mut self) {
        let mut packet = ff::Packet::empty();
        loop {
            match packet.read(&mut self.input) {
                Ok(()) if packet.stream() == self.stream_index => {
                    if let Err(e) = self.decoder.send_packet(&packet) {
                        self.corrupt_packets += 1;
                        tracing::debug!(path = %self.path, error = %e, "packet rejected");
                    }
                    return;
                }
                Ok(()) => continue,
                Err(ff::Error::Eof) => break,
                Err(e) => {
                    tracing::warn!(path = %self.path, error = %e, "read error; treating as end of input");
                    self.read_error = Some(e.to_string());
                    break;
                }
            }
        }
        let _ = self.decoder.send_eof();
        self.eof_sent = true;
    }
}

fn color_of(frame: &ff::frame::Video) -> ColorInfo {
    use ff::color::{Range, Space};
    let matrix = match frame.color_space() {
        Space::BT709 => Matrix::Bt709,
        Space::BT470BG | Space::SMPTE170M | Space::FCC | Space::SMPTE240M => Matrix::Bt601,
        Space::BT2020NCL | Space::BT2020CL => Matrix::Bt2020,
        _ => Matrix::Unspecified,
    };
    let full_range = frame.color_range() == Range::JPEG
        || matches!(
            frame.format(),
            Pixel::YUVJ420P | Pixel::YUVJ422P | Pixel::YUVJ444P | Pixel::RGB24 | Pixel::BGR24 | Pixel::RGBA | Pixel::BGRA | Pixel::GRAY8
        );
    ColorInfo { matrix, full_range }
}

/// Copy a decoded frame into a pooled host buffer (planes packed, no padding).
pub fn copy_to_image(frame: &ff::frame::Video, pool: &Pool<u8>) -> Result<Image, String> {
    let (w, h) = (frame.width(), frame.height());
    let fmt: ffi::AVPixelFormat = frame.format().into();
    // SAFETY: plain arithmetic on the format descriptor; negative means unsupported.
    let size = unsafe { ffi::av_image_get_buffer_size(fmt, w as i32, h as i32, 1) };
    if size <= 0 || w == 0 || h == 0 {
        return Err(format!("unsupported frame {w}x{h} {:?}", frame.format()));
    }
    let mut buf = pool.get(size as usize);
    // SAFETY: `frame` is a valid decoded AVFrame of `fmt`, `w`x`h`; its data and
    // linesize arrays describe planes FFmpeg allocated. `buf` has exactly the
    // size av_image_get_buffer_size reported for align 1.
    let copied = unsafe {
        let raw = frame.as_ptr();
        ffi::av_image_copy_to_buffer(
            buf.as_mut_ptr(),
            size,
            (*raw).data.as_ptr() as *const *const u8,
            (*raw).linesize.as_ptr(),
            fmt,
            w as i32,
            h as i32,
            1,
        )
    };
    if copied < 0 {
        return Err(format!("cannot copy frame ({copied})"));
    }
    let mut ptrs = [std::ptr::null_mut::<u8>(); 4];
    let mut strides = [0i32; 4];
    // SAFETY: computes plane pointers into `buf` for the packed layout just written.
    let filled = unsafe { ffi::av_image_fill_arrays(ptrs.as_mut_ptr(), strides.as_mut_ptr(), buf.as_ptr(), fmt, w as i32, h as i32, 1) };
    if filled < 0 {
        return Err(format!("cannot lay out frame ({filled})"));
    }
    let base = buf.as_ptr() as usize;
    let offsets = ptrs.map(|p| if p.is_null() { 0 } else { p as usize - base });
    Ok(Image { width: w, height: h, format: frame.format(), color: color_of(frame), offsets, strides, storage: Storage::Host(buf) })
}

/// A swscale context from one image geometry to a packed RGB24/BGR24 output,
/// rebuilt only when the input geometry changes.
pub struct Scaler {
    ctx: *mut ffi::SwsContext,
    key: (u32, u32, Pixel, ColorInfo),
    dst: (u32, u32, Pixel),
}

// SAFETY: an SwsContext has no thread affinity; `Scaler` is used by one thread at a time (&mut self).
unsafe impl Send for Scaler {}

/// swscale flags for an interpolation name.
pub fn sws_flags(interp: crate::config::Interpolation) -> i32 {
    use crate::config::Interpolation::*;
    let f = match interp {
        Nearest => ffi::SWS_POINT,
        FastBilinear => ffi::SWS_FAST_BILINEAR,
        Bilinear => ffi::SWS_BILINEAR,
        Bicubic => ffi::SWS_BICUBIC,
        Area => ffi::SWS_AREA,
    };
    f | ffi::SWS_ACCURATE_RND
}

impl Scaler {
    pub fn new(src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel, flags: i32) -> Result<Self, FfmpegError> {
        let err = || FfmpegError::Scaler { from: src.format, to: dst_fmt, src_w: src.width, src_h: src.height, dst_w, dst_h };
        // SAFETY: sizes are non-zero and formats valid; a null return is handled.
        let ctx = unsafe {
            ffi::sws_getContext(
                src.width as i32,
                src.height as i32,
                src.format.into(),
                dst_w as i32,
                dst_h as i32,
                dst_fmt.into(),
                flags,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ctx.is_null() {
            return Err(err());
        }
        let cs = match src.color.matrix {
            Matrix::Bt709 => ffi::SWS_CS_ITU709,
            Matrix::Bt2020 => ffi::SWS_CS_BT2020,
            Matrix::Bt601 | Matrix::Unspecified => ffi::SWS_CS_ITU601,
        };
        // SAFETY: `ctx` is a live context; coefficient tables are static.
        unsafe {
            let src_table = ffi::sws_getCoefficients(cs);
            let dst_table = ffi::sws_getCoefficients(ffi::SWS_CS_DEFAULT);
            ffi::sws_setColorspaceDetails(ctx, src_table, src.color.full_range as i32, dst_table, 1, 0, 1 << 16, 1 << 16);
        }
        Ok(Scaler { ctx, key: (src.width, src.height, src.format, src.color), dst: (dst_w, dst_h, dst_fmt) })
    }

    /// Whether this scaler fits `src` (else build a new one: mid-stream size change).
    pub fn fits(&self, src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel) -> bool {
        self.key == (src.width, src.height, src.format, src.color) && self.dst == (dst_w, dst_h, dst_fmt)
    }

    /// Convert `src` into `dst`, a packed 3-byte-per-pixel buffer of `dst_w * 3` bytes per row.
    pub fn run(&mut self, src: &Image, dst: &mut [u8]) -> Result<(), String> {
        let host = src.host().ok_or("image is not in host memory")?;
        let (dw, dh, _) = self.dst;
        if dst.len() < dw as usize * dh as usize * 3 {
            return Err("destination buffer too small".into());
        }
        let mut planes = [std::ptr::null::<u8>(); 4];
        for i in 0..4 {
            if src.strides[i] != 0 {
                planes[i] = host[src.offsets[i]..].as_ptr();
            }
        }
        let dst_planes = [dst.as_mut_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()];
        let dst_strides = [dw as i32 * 3, 0, 0, 0];
        // SAFETY: source planes point into `host` with the strides `copy_to_image`
        // computed for this format and size (checked by `fits` when the scaler
        // was chosen); the destination holds dh rows of dw*3 bytes (checked above).
        let rows = unsafe {
            ffi::sws_scale(self.ctx, planes.as_ptr(), src.strides.as_ptr(), 0, src.height as i32, dst_planes.as_ptr(), dst_strides.as_ptr())
        };
        if rows != dh as i32 {
            return Err(format!("swscale wrote {rows} rows, expected {dh}"));
        }
        Ok(())
    }
}

impl Drop for Scaler {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from sws_getContext and is freed once.
        unsafe { ffi::sws_freeContext(self.ctx) };
    }
}

/// Hardware device types this FFmpeg build supports (`cuda`, `vaapi`, ...).
pub fn hwaccels() -> Vec<String> {
    init();
    let mut out = Vec::new();
    let mut t = ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_NONE;
    loop {
        // SAFETY: iterating device types is a pure lookup in FFmpeg's static tables.
        t = unsafe { ffi::av_hwdevice_iterate_types(t) };
        if t == ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_NONE {
            break;
        }
        // SAFETY: returns a static NUL-terminated name (or null for unknown types).
        let name = unsafe { ffi::av_hwdevice_get_type_name(t) };
        if !name.is_null() {
            // SAFETY: non-null, static, NUL-terminated (checked above).
            out.push(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned());
        }
    }
    out
}

/// A demuxer + audio decoder + resampler to mono f32 at a fixed rate.
pub struct AudioDecoder {
    path: String,
    input: ff::format::context::Input,
    stream_index: usize,
    decoder: ff::decoder::Audio,
    resampler: Option<ff::software::resampling::Context>,
    rate: u32,
    frame: ff::frame::Audio,
    eof_sent: bool,
    flushed: bool,
    pub corrupt_packets: u64,
    /// Codec, source rate and channels, for the start-up log.
    pub describe: String,
    /// Duration in seconds, when the container says.
    pub duration: Option<f64>,
}

impl AudioDecoder {
    /// Open the best audio stream of `path` (an audio file or a video's audio track,
    /// `-` for stdin), resampled to `rate` Hz mono.
    pub fn open(path: &Path, rate: u32) -> Result<Self, FfmpegError> {
        Self::open_with(path, rate, &InputOptions::default())
    }

    /// As [`AudioDecoder::open`], with a named demuxer (e.g. raw `s16le`) and its options.
    pub fn open_with(path: &Path, rate: u32, opts: &InputOptions) -> Result<Self, FfmpegError> {
        let p = path.to_string_lossy().into_owned();
        let input = open_input(path, opts)?;
        let stream =
            input.streams().best(ff::media::Type::Audio).ok_or_else(|| FfmpegError::NoVideo { path: format!("{p} (no audio stream)") })?;
        let stream_index = stream.index();
        let codec_id = stream.parameters().id();
        let ctx = ff::codec::context::Context::from_parameters(stream.parameters()).map_err(|source| FfmpegError::Decoder {
            path: p.clone(),
            codec: format!("{codec_id:?}"),
            source,
        })?;
        let decoder =
            ctx.decoder().audio().map_err(|source| FfmpegError::Decoder { path: p.clone(), codec: format!("{codec_id:?}"), source })?;
        let duration = (input.duration() > 0).then(|| input.duration() as f64 / ffi::AV_TIME_BASE as f64);
        let codec = ff::codec::decoder::find(codec_id).map(|c| c.name().to_string()).unwrap_or_else(|| format!("{codec_id:?}"));
        let describe = format!("{codec} {} Hz, {} channel(s) → {rate} Hz mono f32", decoder.rate(), decoder.channels());
        Ok(AudioDecoder {
            path: p,
            input,
            stream_index,
            decoder,
            resampler: None,
            rate,
            frame: ff::frame::Audio::empty(),
            eof_sent: false,
            flushed: false,
            corrupt_packets: 0,
            describe,
            duration,
        })
    }

    fn resample(&mut self, out: &mut Vec<f32>) -> Result<(), FfmpegError> {
        let f = &mut self.frame;
        if f.channel_layout().is_empty() {
            f.set_channel_layout(ff::ChannelLayout::default(f.channels() as i32));
        }
        if self.resampler.is_none() {
            let r = ff::software::resampling::Context::get(
                f.format(),
                f.channel_layout(),
                f.rate(),
                ff::format::Sample::F32(ff::format::sample::Type::Packed),
                ff::ChannelLayout::MONO,
                self.rate,
            )
            .map_err(|e| FfmpegError::Frame { path: self.path.clone(), frame: 0, what: format!("cannot resample: {e}") })?;
            self.resampler = Some(r);
        }
        let r = self.resampler.as_mut().expect("set above");
        let cap = f.samples() * self.rate as usize / f.rate().max(1) as usize + 1024;
        let mut o = ff::frame::Audio::new(ff::format::Sample::F32(ff::format::sample::Type::Packed), cap, ff::ChannelLayout::MONO);
        r.run(f, &mut o).map_err(|e| FfmpegError::Frame { path: self.path.clone(), frame: 0, what: format!("resampling: {e}") })?;
        out.extend_from_slice(&o.plane::<f32>(0)[..o.samples()]);
        Ok(())
    }

    /// Append the next decoded samples to `out`; `false` at the end of the stream.
    pub fn read(&mut self, out: &mut Vec<f32>) -> Result<bool, FfmpegError> {
        loop {
            match self.decoder.receive_frame(&mut self.frame) {
                Ok(()) => {
                    self.resample(out)?;
                    return Ok(true);
                }
                Err(ff::Error::Eof) => {
                    if !self.flushed {
                        self.flushed = true;
                        if let Some(r) = self.resampler.as_mut() {
                            let mut o = ff::frame::Audio::new(
                                ff::format::Sample::F32(ff::format::sample::Type::Packed),
                                8192,
                                ff::ChannelLayout::MONO,
                            );
                            if r.flush(&mut o).is_ok() {
                                out.extend_from_slice(&o.plane::<f32>(0)[..o.samples()]);
                            }
                        }
                        return Ok(true);
                    }
                    return Ok(false);
                }
                Err(ff::Error::Other { errno }) if errno == ffi::EAGAIN => {}
                Err(e) => {
                    self.corrupt_packets += 1;
                    tracing::debug!(path = %self.path, error = %e, "audio decode error");
                    continue;
                }
            }
            if self.eof_sent {
                if self.flushed {
                    return Ok(false);
                }
                continue;
            }
            let mut packet = ff::Packet::empty();
            loop {
                match packet.read(&mut self.input) {
                    Ok(()) if packet.stream() == self.stream_index => {
                        if self.decoder.send_packet(&packet).is_err() {
                            self.corrupt_packets += 1;
                        }
                        break;
                    }
                    Ok(()) => continue,
                    Err(_) => {
                        let _ = self.decoder.send_eof();
                        self.eof_sent = true;
                        break;
                    }
                }
            }
        }
    }
}
