//! FFmpeg through ffmpeg-next: demux + decode into pooled host images, and
//! swscale on pooled buffers for the CPU preprocess.

use std::path::Path;
use std::sync::Once;

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use crate::config::mask_credentials;
use crate::frame::{ColorInfo, Image, Matrix, Pool, Storage};

#[derive(Debug, thiserror::Error)]
pub enum FfmpegError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: ff::Error },
    /// The pipeline stopped while FFmpeg was still opening the input (waiting
    /// for a pipe's first bytes, or for enough of them to know the streams):
    /// a stop, not a fault.
    #[error("{path}: stopped while the input was being opened")]
    Stopped { path: String },
    #[error("{path}: no video stream")]
    NoVideo { path: String },
    #[error("{path}: no audio stream")]
    NoAudio { path: String },
    #[error("{path}: cannot create a decoder for codec `{codec}`: {source}")]
    Decoder { path: String, codec: String, source: ff::Error },
    #[error("{path}: frame {frame}: {what}")]
    Frame { path: String, frame: u64, what: String },
    #[error("{path}: NVDEC: {what}")]
    Hw { path: String, what: String },
    #[error("{path}: frame size {width}x{height} ({} pixels) exceeds the limit of {limit} pixels", *width as u64 * *height as u64)]
    TooLarge { path: String, width: u32, height: u32, limit: u64 },
    #[error("swscale: cannot convert {from:?} {src_w}x{src_h} to {to:?} {dst_w}x{dst_h}")]
    Scaler { from: Pixel, to: Pixel, src_w: u32, src_h: u32, dst_w: u32, dst_h: u32 },
}

impl FfmpegError {
    /// The server refused the credentials (HTTP or RTSP `401 Unauthorized`).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, FfmpegError::Open { source: ff::Error::HttpUnauthorized, .. })
    }
}

/// Initialise FFmpeg once. Its own log lines (`[tcp @ 0x…] Connection to …
/// failed`) repeat what we report ourselves, so they go to our log at debug
/// level (`-v`), FFmpeg's fatal errors at error level.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = ff::init();
        let level = if tracing::enabled!(target: "ffmpeg", tracing::Level::TRACE) {
            ff::util::log::Level::Verbose
        } else if tracing::enabled!(target: "ffmpeg", tracing::Level::DEBUG) {
            ff::util::log::Level::Warning
        } else {
            ff::util::log::Level::Error
        };
        ff::util::log::set_level(level);
        route_log();
    });
}

/// FFmpeg's log into ours (x86_64, where the callback's `va_list` is a plain pointer).
#[cfg(target_arch = "x86_64")]
fn route_log() {
    unsafe extern "C" fn callback(avcl: *mut libc::c_void, level: libc::c_int, fmt: *const libc::c_char, vl: *mut ffi::__va_list_tag) {
        // SAFETY: a plain read of FFmpeg's log level.
        if level > unsafe { ffi::av_log_get_level() } {
            return;
        }
        let mut line = [0 as libc::c_char; 1024];
        let mut prefix: libc::c_int = 1;
        // SAFETY: FFmpeg hands us its own context, format and argument list for
        // this one call; av_log_format_line2 formats them into `line` (NUL
        // terminated, truncated to its size) and reads nothing else.
        let n = unsafe { ffi::av_log_format_line2(avcl, level, fmt, vl, line.as_mut_ptr(), line.len() as libc::c_int, &mut prefix) };
        if n < 0 {
            return;
        }
        // SAFETY: `line` is NUL terminated (see above) and outlives `text`.
        let text = unsafe { std::ffi::CStr::from_ptr(line.as_ptr()) }.to_string_lossy();
        let text = mask_credentials(text.trim_end());
        if level <= ffi::AV_LOG_FATAL {
            tracing::error!(target: "ffmpeg", "FFmpeg: {text}");
        } else {
            tracing::debug!(target: "ffmpeg", "FFmpeg: {text}");
        }
    }
    // SAFETY: installs a callback that stays valid for the whole process
    // (a plain function); FFmpeg may call it from any thread, and it only
    // formats the message and hands it to the (thread-safe) log.
    unsafe { ffi::av_log_set_callback(Some(callback)) };
}

/// Elsewhere FFmpeg's own log stays on stderr, errors only.
#[cfg(not(target_arch = "x86_64"))]
fn route_log() {}

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
    /// For network inputs and stdin: asked while FFmpeg waits for data;
    /// `true` aborts the wait (the pipeline is stopping), so a stalled stream
    /// or a silent pipe cannot block a stop.
    pub interrupt: Option<Interrupt>,
    /// Video: the largest frame (width × height) accepted; a stream declaring
    /// more is refused at open, larger frames later count as corrupt
    /// (default [`DEFAULT_MAX_PIXELS`]).
    pub max_pixels: Option<u64>,
    /// Video: damaged data is an error (the frame is skipped and counted)
    /// rather than concealed (FFmpeg's `err_detect explode`); for still
    /// images, where a concealed half-grey picture would pass as good.
    pub strict: bool,
}

/// A question FFmpeg asks while it waits on an input: stop waiting?
#[derive(Clone)]
pub struct Interrupt(pub std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt")
    }
}

/// Socket timeout for RTSP inputs read by `file` and `audio` sources (the
/// `rtsp` source has its own): a stream silent this long ends with a read
/// error instead of waiting for ever.
const RTSP_READ_TIMEOUT_US: &str = "10000000";

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

/// How messages name an input: `stdin` for `-`, a URL with its password
/// masked, a file path tidied lexically (`pipelines/../samples/a.mp4` is shown
/// as `samples/a.mp4`; symlinks are not resolved).
pub fn shown_name(path: &Path) -> String {
    let text = path.to_string_lossy();
    if path.as_os_str() == "-" {
        "stdin".to_string()
    } else if text.contains("://") {
        mask_credentials(&text).into_owned()
    } else {
        mask_credentials(&crate::config::tidy_path(path).to_string_lossy()).into_owned()
    }
}

/// An open input, and stdin's read mode while FFmpeg reads it (restored after
/// the input closes: fields drop in order).
struct Opened {
    input: ff::format::context::Input,
    stdin: Option<NonBlockingStdin>,
}

/// Open `path` with `opts`. `-` means stdin.
fn open_input(path: &Path, opts: &InputOptions) -> Result<Opened, FfmpegError> {
    init();
    let stdin = path.as_os_str() == "-";
    let shown = shown_name(path);
    let path = if stdin { Path::new("pipe:0") } else { path };
    let err = |source| match source {
        // Only the interrupt callback aborts with AVERROR_EXIT: the pipeline is stopping.
        ff::Error::Exit => FfmpegError::Stopped { path: shown.clone() },
        source => FfmpegError::Open { path: shown.clone(), source },
    };
    let mut dict = dictionary(&opts.options);
    let url = path.to_string_lossy();
    if (url.starts_with("rtsp://") || url.starts_with("rtsps://")) && !opts.options.iter().any(|(k, _)| k == "timeout") {
        dict.set("timeout", RTSP_READ_TIMEOUT_US);
    }
    let format = match &opts.format {
        Some(name) => Some(find_input_format(name).ok_or(FfmpegError::Open { path: shown.clone(), source: ff::Error::DemuxerNotFound })?),
        None => None,
    };
    // A pipe's read() blocks until the writer sends or closes, and FFmpeg asks
    // the interrupt only between reads: in non-blocking mode a silent pipe
    // returns EAGAIN, FFmpeg's retry loop (avio.c, retry_transfer_wrapper)
    // sleeps 1 ms and asks the interrupt before each new try.
    let stdin_mode = if stdin && opts.interrupt.is_some() { NonBlockingStdin::set() } else { None };
    let input = match (&opts.interrupt, format) {
        (Some(interrupt), format) => open_interruptible(path, format.as_ref(), interrupt, dict),
        (None, None) if dict.iter().next().is_none() => ff::format::input(&path),
        (None, None) => ff::format::input_with_dictionary(&path, dict),
        (None, Some(f)) => ff::format::open_with(&path, &ff::Format::Input(f), dict).map(|c| match c {
            ff::format::context::Context::Input(i) => i,
            ff::format::context::Context::Output(_) => unreachable!("opened as an input"),
        }),
    }
    .map_err(err)?;
    Ok(Opened { input, stdin: stdin_mode })
}

/// `avformat_open_input` with the interrupt callback installed before the
/// probe (so a wait for the first bytes can be aborted too) and an optional
/// named demuxer: ffmpeg-next's `input_with_interrupt_and_dictionary` takes
/// no format. The context is wrapped as ffmpeg-next wraps its own, with the
/// callback's closure kept alive until the context is closed.
fn open_interruptible(
    path: &Path,
    format: Option<&ff::format::Input>,
    interrupt: &Interrupt,
    options: ff::Dictionary,
) -> Result<ff::format::context::Input, ff::Error> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| ff::Error::Other { errno: libc::EINVAL })?;
    let ask = interrupt.0.clone();
    let callback = ff::util::interrupt::new(Box::new(move || ask()));
    // SAFETY: `ps` is a fresh context we own; the callback's opaque pointer
    // stays valid while `callback.guard` lives, which is until the context is
    // freed: avformat_open_input frees it on failure (before the guard drops
    // at the end of this function), avformat_close_input on a failed probe,
    // and otherwise the guard moves into the returned Input, whose destructor
    // closes the context before dropping it. The dictionary is handed to
    // FFmpeg and taken back (with the options it did not use) as ffmpeg-next
    // does; `format` is a static demuxer.
    unsafe {
        let mut ps = ffi::avformat_alloc_context();
        if ps.is_null() {
            return Err(ff::Error::Other { errno: libc::ENOMEM });
        }
        (*ps).interrupt_callback = callback.interrupt;
        let mut opts = options.disown();
        let fmt = format.map_or(std::ptr::null(), |f| f.as_ptr());
        let res = ffi::avformat_open_input(&mut ps, c_path.as_ptr(), fmt, &mut opts);
        drop(ff::Dictionary::own(opts));
        if res < 0 {
            return Err(ff::Error::from(res));
        }
        let res = ffi::avformat_find_stream_info(ps, std::ptr::null_mut());
        if res < 0 {
            ffi::avformat_close_input(&mut ps);
            return Err(ff::Error::from(res));
        }
        Ok(ff::format::context::Input::wrap_with_interrupt(ps, callback.guard))
    }
}

/// stdin (fd 0) in non-blocking mode while FFmpeg reads it; the flags it had
/// come back on drop. Not for a terminal: its mode is shared with the shell,
/// which would be left non-blocking if this process were killed.
struct NonBlockingStdin {
    flags: libc::c_int,
}

impl NonBlockingStdin {
    /// `None` when stdin is a terminal, already non-blocking, or its flags cannot be changed.
    fn set() -> Option<Self> {
        use std::io::IsTerminal;
        if std::io::stdin().is_terminal() {
            return None;
        }
        // SAFETY: F_GETFL on fd 0 reads its file status flags; no memory is involved.
        let flags = unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_GETFL) };
        if flags < 0 || flags & libc::O_NONBLOCK != 0 {
            return None;
        }
        // SAFETY: F_SETFL on fd 0 changes only its status flags (here O_NONBLOCK).
        if unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            tracing::debug!("stdin: cannot make reads non-blocking: {}", std::io::Error::last_os_error());
            return None;
        }
        Some(NonBlockingStdin { flags })
    }
}

impl Drop for NonBlockingStdin {
    fn drop(&mut self) {
        // SAFETY: F_SETFL on fd 0 puts back the status flags it had before `set`.
        unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_SETFL, self.flags) };
    }
}

/// Largest frame (width × height) a decoder accepts unless told otherwise:
/// 8192×8192, twice 8K UHD. FFmpeg's own ceiling is about 268M pixels (16384²),
/// over 400 MiB per 4:2:0 frame before any queue holds a few of them; a
/// header claiming that much is far more likely hostile or corrupt than real.
pub const DEFAULT_MAX_PIXELS: u64 = 8192 * 8192;

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
    /// Duration in seconds the container gives (the stream's own, else the whole input's).
    pub duration: Option<f64>,
    /// Degrees clockwise a player turns the picture (the container's display
    /// matrix), when not 0. Frames are processed as stored.
    pub rotation: Option<f64>,
}

impl StreamInfo {
    /// The quarter turn (90, 180, 270 degrees clockwise) the container asks
    /// for, when it asks for one.
    pub fn quarter_turn(&self) -> Option<u32> {
        self.rotation.map(|r| r as u32).filter(|r| [90, 180, 270].contains(r))
    }

    /// What the container asks a player to do with the picture, and that it
    /// is not done, in words for the log; `None` when it asks nothing.
    pub fn turn_note(&self) -> Option<String> {
        let turn = match self.rotation? as i64 {
            90 => "turn it 90° clockwise".to_string(),
            180 => "turn it 180°".to_string(),
            270 => "turn it 90° counterclockwise".to_string(),
            r => format!("turn it {r}° clockwise"),
        };
        Some(format!("the container says to {turn} for display; frames are processed as stored, not turned"))
    }
}

/// A demuxer + video decoder for one input.
pub struct VideoDecoder {
    path: String,
    input: ff::format::context::Input,
    stream_index: usize,
    decoder: ff::decoder::Video,
    frame: ff::frame::Video,
    eof_sent: bool,
    /// Why reading stopped, when it was not the end of the input (truncated file, I/O error).
    pub read_error: Option<String>,
    /// Frames lost to corrupt data: packets the decoder rejected, frames it
    /// flagged as damaged, and the frames after them up to the next keyframe.
    pub skipped_frames: u64,
    /// Stretches of corrupt data, each ended by a keyframe (or the end of the stream).
    pub corrupt_bursts: u64,
    burst: Option<Burst>,
    /// Set when the input ended by itself short of what its container says
    /// (see [`Truncation`]); the frames of a damaged stretch running into the
    /// cut are counted here, not as corrupt data.
    pub truncated: Option<Truncation>,
    /// Packets of the video stream read so far, and the earliest and latest
    /// timestamps among them (stream time base): how far the input got.
    packets: u64,
    packet_span: Option<(i64, i64)>,
    /// Frames given out (see [`VideoDecoder::end_of_input`]).
    given: u64,
    /// Where the packets read so far end in the input (bytes, any stream),
    /// and the largest of them: what a cut could have left half-read.
    data_end: i64,
    largest_packet: usize,
    pub info: StreamInfo,
    /// Reading ended because the interrupt asked it to (the pipeline is stopping).
    interrupted: bool,
    /// Last, so stdin's mode comes back after the input is closed.
    _stdin: Option<NonBlockingStdin>,
}

/// An input that ended early: the demuxer reached the end of the data
/// before the frame count its container lists (mp4, mov), before the
/// duration it declares (Matroska, WebM), or part-way through a packet
/// (MPEG-TS, whose duration is read from its last packets and so cannot tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Frames the whole input would have had, as its container says
    /// (listed, or duration × frame rate); `None` when it does not say.
    pub expected: Option<u64>,
    /// Frames of the damaged stretch that ran into the cut (incomplete data), not counted as corrupt.
    pub lost_at_cut: u64,
}

impl Truncation {
    /// `truncated: ended early after N frames (expected about M)`, N the frames given.
    pub fn describe(&self, frames: u64) -> String {
        let expected = match self.expected {
            Some(m) => format!("expected about {m}"),
            None => "the file ends part-way through a packet".into(),
        };
        format!("truncated: ended early after {frames} frames ({expected})")
    }
}

/// A stretch of corrupt input being skipped.
#[derive(Debug, Clone, Copy)]
struct Burst {
    /// Timestamp of the first damaged frame or packet, when known.
    from: Option<i64>,
    frames: u64,
    /// Of `frames`, those estimated from the size of unreadable data at the
    /// end of an input whose container does not say how many it holds.
    estimated: u64,
}

impl VideoDecoder {
    /// Open `path` (file or URL, `-` for stdin) and its best video stream. `threads = 0` lets FFmpeg choose.
    pub fn open(path: &Path, threads: usize) -> Result<Self, FfmpegError> {
        Self::open_with(path, threads, &InputOptions::default())
    }

    /// As [`VideoDecoder::open`], with a named demuxer, its options, an
    /// interrupt for network inputs and a frame size limit.
    pub fn open_with(path: &Path, threads: usize, opts: &InputOptions) -> Result<Self, FfmpegError> {
        Self::open_full(path, threads, opts, None)
    }

    /// Open for NVDEC decoding on `device`: frames come out as `Pixel::CUDA`
    /// (see [`cuda_planes`]). Fails when the codec has no CUDA hwaccel here.
    pub fn open_cuda(path: &Path, device: &HwDevice, opts: &InputOptions) -> Result<Self, FfmpegError> {
        Self::open_full(path, 1, opts, Some(device))
    }

    fn open_full(path: &Path, threads: usize, opts: &InputOptions, hw: Option<&HwDevice>) -> Result<Self, FfmpegError> {
        let Opened { input, stdin } = open_input(path, opts)?;
        Self::with_input(shown_name(path), input, stdin, threads, hw, opts.max_pixels.unwrap_or(DEFAULT_MAX_PIXELS), opts.strict)
    }

    fn with_input(
        p: String,
        input: ff::format::context::Input,
        stdin: Option<NonBlockingStdin>,
        threads: usize,
        hw: Option<&HwDevice>,
        max_pixels: u64,
        strict: bool,
    ) -> Result<Self, FfmpegError> {
        let stream = input.streams().best(ff::media::Type::Video).ok_or_else(|| FfmpegError::NoVideo { path: p.clone() })?;
        let stream_index = stream.index();
        let codec_id = stream.parameters().id();
        let mut ctx = ff::codec::context::Context::from_parameters(stream.parameters()).map_err(|source| FfmpegError::Decoder {
            path: p.clone(),
            codec: format!("{codec_id:?}"),
            source,
        })?;
        ctx.set_threading(ff::codec::threading::Config { kind: ff::codec::threading::Type::Frame, count: threads, ..Default::default() });
        if let Some(dev) = hw {
            dev.attach(&mut ctx, codec_id).map_err(|what| FfmpegError::Hw { path: p.clone(), what })?;
        }
        // What the container declares, checked before the decoder allocates anything.
        let params = stream.parameters();
        // SAFETY: plain reads of two ints from the stream's codec parameters, owned by `input`.
        let (declared_w, declared_h) = unsafe { ((*params.as_ptr()).width.max(0) as u32, (*params.as_ptr()).height.max(0) as u32) };
        if declared_w as u64 * declared_h as u64 > max_pixels {
            return Err(FfmpegError::TooLarge { path: p, width: declared_w, height: declared_h, limit: max_pixels });
        }
        // SAFETY: `ctx` is an unopened codec context we own; `max_pixels` is a
        // documented decoder option read when frames are allocated.
        unsafe { (*ctx.as_mut_ptr()).max_pixels = max_pixels.min(i64::MAX as u64) as i64 };
        if strict {
            // SAFETY: as above; `err_recognition` is a documented decoder option read when it opens.
            unsafe { (*ctx.as_mut_ptr()).err_recognition |= ffi::AV_EF_EXPLODE };
        }
        let decoder =
            ctx.decoder().video().map_err(|source| FfmpegError::Decoder { path: p.clone(), codec: format!("{codec_id:?}"), source })?;
        let tb = stream.time_base();
        let rate = stream.avg_frame_rate();
        let fps = (rate.denominator() != 0 && rate.numerator() > 0).then(|| f64::from(rate));
        let declared_frames = (stream.frames() > 0).then_some(stream.frames() as u64);
        let duration = if stream.duration() > 0 {
            stream.duration() as f64 * f64::from(tb)
        } else {
            input.duration() as f64 / ffi::AV_TIME_BASE as f64
        };
        let duration = (duration > 0.0 && duration.is_finite()).then_some(duration);
        let frames = declared_frames.or_else(|| duration.zip(fps).map(|(d, f)| (d * f).round() as u64));
        let rotation = stream.side_data().find(|d| d.kind() == ff::codec::packet::side_data::Type::DisplayMatrix).and_then(|d| {
            let m = d.data();
            (m.len() >= 36).then(|| {
                let mut matrix = [0i32; 9];
                for (i, v) in matrix.iter_mut().enumerate() {
                    *v = i32::from_ne_bytes(m[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
                }
                // SAFETY: a display matrix is nine i32, copied into a local array the call only reads.
                unsafe { ffi::av_display_rotation_get(matrix.as_ptr()) }
            })
        });
        // Counterclockwise in FFmpeg's terms: clockwise degrees, 0 … 359.
        let rotation = rotation.filter(|r| r.is_finite()).map(|r| (-r).round().rem_euclid(360.0)).filter(|r| *r != 0.0);
        let info = StreamInfo {
            codec: ff::codec::decoder::find(codec_id).map(|c| c.name().to_string()).unwrap_or_else(|| format!("{codec_id:?}")),
            width: decoder.width(),
            height: decoder.height(),
            time_base: (tb.numerator(), tb.denominator()),
            fps,
            frames,
            declared_frames,
            duration,
            rotation,
        };
        Ok(VideoDecoder {
            path: p,
            input,
            stream_index,
            decoder,
            frame: ff::frame::Video::empty(),
            eof_sent: false,
            read_error: None,
            skipped_frames: 0,
            corrupt_bursts: 0,
            burst: None,
            truncated: None,
            packets: 0,
            packet_span: None,
            given: 0,
            data_end: 0,
            largest_packet: 0,
            info,
            interrupted: false,
            _stdin: stdin,
        })
    }

    /// The next decoded frame, or `None` at the end of the stream. Corrupt data is
    /// skipped up to the next keyframe (a damaged frame spoils the frames that
    /// refer to it); each stretch is logged once, when it ends.
    pub fn next_frame(&mut self) -> Result<Option<&ff::frame::Video>, FfmpegError> {
        loop {
            match self.decoder.receive_frame(&mut self.frame) {
                Ok(()) => {
                    let pts = self.frame.timestamp().or(self.frame.pts());
                    if self.frame.is_corrupt() || self.frame.has_decode_errors() {
                        self.damaged(pts);
                        continue;
                    }
                    if self.burst.is_some() {
                        if !self.frame.is_key() {
                            self.damaged(pts);
                            continue;
                        }
                        self.end_burst(pts);
                    }
                    self.given += 1;
                    return Ok(Some(&self.frame));
                }
                Err(ff::Error::Eof) => {
                    self.end_of_input();
                    return Ok(None);
                }
                Err(ff::Error::Other { errno }) if errno == ffi::EAGAIN => {}
                Err(e) => {
                    // A frame the decoder could not rebuild.
                    tracing::debug!(path = %self.path, error = %e, "decode error");
                    self.damaged(None);
                    continue;
                }
            }
            if self.eof_sent {
                self.end_of_input();
                return Ok(None);
            }
            self.feed();
        }
    }

    /// The decoder has given its last frame: tell a cut input from one that
    /// ended where its container says, and close the open stretch of corrupt
    /// data (at a cut, its frames are the cut's, not corrupt data).
    ///
    /// Corrupt data at the end of an input is not a cut: when the bytes the
    /// demuxer could not read past its last packet outweigh any packet (a cut
    /// leaves at most part of one), or a stretch of corrupt data is still open,
    /// the frames the container promises but that never came are that
    /// stretch's, counted as corrupt data like any other.
    fn end_of_input(&mut self) {
        if self.truncated.is_none() && !self.interrupted {
            let unread = self.unread_tail();
            self.truncated = self.truncation().filter(|_| unread.is_none());
            if let Some(t) = self.truncated.as_mut()
                && let Some(b) = self.burst.take()
            {
                t.lost_at_cut = b.frames;
                self.skipped_frames -= b.frames;
                tracing::debug!(path = %self.path, frames = b.frames, "incomplete frames at the cut");
            } else if self.truncated.is_none() && (self.burst.is_some() || unread.is_some()) {
                let accounted = self.given + self.skipped_frames;
                let missing = self.info.frames.map_or(0, |n| n.saturating_sub(accounted));
                // MPEG-TS holds no count nor duration of its own: FFmpeg reads the
                // duration from the last timestamps it can find, so frames that
                // garbage replaced at the end are in no count. Estimate them from
                // the unreadable bytes at the rate of the bytes read per frame.
                let estimated = match unread {
                    Some(bytes) if self.is_mpegts() && self.packets > 0 && self.data_end > 0 => {
                        (bytes as f64 * self.packets as f64 / self.data_end as f64).round() as u64
                    }
                    _ => 0,
                };
                let estimated = estimated.saturating_sub(missing);
                if let Some(bytes) = unread {
                    tracing::debug!(path = %self.path, bytes, missing, estimated, "corrupt data at the end of the input");
                }
                if missing + estimated > 0 {
                    let from = self.burst.map_or(self.packet_span.map(|(_, last)| last), |b| b.from);
                    let b = self.burst.get_or_insert(Burst { from, frames: 0, estimated: 0 });
                    b.frames += missing + estimated;
                    b.estimated += estimated;
                    self.skipped_frames += missing + estimated;
                }
            }
        }
        self.end_burst(None);
    }

    /// Bytes of the input after the end of its last packet, when more than a
    /// cut leaves (part of one packet and its container header): data the
    /// demuxer could not read. `None` for inputs of unknown size (pipes, URLs).
    fn unread_tail(&self) -> Option<i64> {
        // SAFETY: reads the size of the open input's own I/O context (null for none); no data is read.
        let size = unsafe {
            let pb = (*self.input.as_ptr()).pb;
            if pb.is_null() { -1 } else { ffi::avio_size(pb) }
        };
        let unread = size - self.data_end;
        (size > 0 && self.data_end > 0 && unread > self.largest_packet as i64 + 4096).then_some(unread)
    }

    /// Whether the input, read to its end, stops short of what its container says.
    fn truncation(&self) -> Option<Truncation> {
        let cut = |expected| Some(Truncation { expected, lost_at_cut: 0 });
        if let Some(n) = self.info.declared_frames {
            // One short: an edit list or a last frame dropped, not a cut.
            return if self.packets + 1 < n { cut(Some(n)) } else { None };
        }
        if let (Some(duration), Some(fps)) = (self.info.duration, self.info.fps) {
            let (num, den) = self.info.time_base;
            let reached = self.packet_span.map_or(0.0, |(a, b)| (b - a) as f64 * num as f64 / den.max(1) as f64 + 1.0 / fps);
            if reached + 1.5 / fps < duration {
                return cut(Some((duration * fps).round() as u64));
            }
        }
        // MPEG-TS comes in packets of 188 bytes (192 in M2TS, 204 with FEC): a file
        // ending inside one was cut.
        if self.is_mpegts() {
            // SAFETY: reads the size of the open input's own I/O context (null for none); no data is read.
            let size = unsafe {
                let pb = (*self.input.as_ptr()).pb;
                if pb.is_null() { -1 } else { ffi::avio_size(pb) }
            };
            if size > 0 && [188, 192, 204].iter().all(|p| size % p != 0) {
                return cut(None);
            }
        }
        None
    }

    /// Whether the input is MPEG-TS (no frame count nor duration of its own).
    fn is_mpegts(&self) -> bool {
        self.input.format().name().split(',').any(|n| n == "mpegts")
    }

    /// The read error that ended the input (`None`: it ended normally, or has not ended).
    pub fn read_error(&self) -> Option<&str> {
        self.read_error.as_deref()
    }

    /// Whether the interrupt ended the input (a stop, or a network watchdog), not the input itself.
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// One frame lost to corrupt data (opens a burst if none is open).
    fn damaged(&mut self, pts: Option<i64>) {
        self.skipped_frames += 1;
        let b = self.burst.get_or_insert(Burst { from: pts, frames: 0, estimated: 0 });
        b.frames += 1;
        if b.from.is_none() {
            b.from = pts;
        }
    }

    /// A burst of corrupt data ends at a clean keyframe at `pts` (`None`: the end of the stream).
    fn end_burst(&mut self, pts: Option<i64>) {
        let Some(b) = self.burst.take() else { return };
        self.corrupt_bursts += 1;
        let (num, den) = self.info.time_base;
        let secs = |p: i64| format!("{:.3} s", p as f64 * num as f64 / den.max(1) as f64);
        let from = b.from.map(|p| format!(" from {}", secs(p))).unwrap_or_default();
        let to = pts.map(|p| format!("resumed at the keyframe at {}", secs(p))).unwrap_or_else(|| "no keyframe before the end".into());
        let about = if b.estimated > 0 {
            format!(" ({} of them estimated from the size of the unreadable data at the end)", b.estimated)
        } else {
            String::new()
        };
        tracing::warn!("{}: corrupt data{from}: {} frame(s) skipped{about}, {to}", self.path, b.frames);
    }

    /// Send the next packet of our stream (or end of stream) to the decoder.
    fn feed(&mut self) {
        let mut packet = ff::Packet::empty();
        loop {
            let read = packet.read(&mut self.input);
            if read.is_ok() && packet.position() >= 0 {
                self.data_end = self.data_end.max(packet.position() as i64 + packet.size() as i64);
                self.largest_packet = self.largest_packet.max(packet.size());
            }
            match read {
                Ok(()) if packet.stream() == self.stream_index => {
                    self.packets += 1;
                    if let Some(p) = packet.pts().or(packet.dts()) {
                        self.packet_span = Some(self.packet_span.map_or((p, p), |(a, b)| (a.min(p), b.max(p))));
                    }
                    if let Err(e) = self.decoder.send_packet(&packet) {
                        tracing::debug!(path = %self.path, error = %e, "packet rejected");
                        self.damaged(packet.pts());
                    }
                    return;
                }
                Ok(()) => continue,
                Err(ff::Error::Eof) => break,
                Err(e) => {
                    // The caller reports it (`read_error`): a file warns, a camera reconnects.
                    self.interrupted = e == ff::Error::Exit;
                    self.read_error = Some(e.to_string());
                    break;
                }
            }
        }
        let _ = self.decoder.send_eof();
        self.eof_sent = true;
    }
}

/// FFmpeg's view of a CUDA context and stream owned elsewhere (the crate's
/// `Gpu`): they are injected into `AVCUDADeviceContext`, so NVDEC decodes in
/// the same (primary) context as the kernels and ONNX Runtime and queues its
/// copies on the same stream. FFmpeg never destroys either (it did not create them).
pub struct HwDevice(*mut ffi::AVBufferRef);

// SAFETY: the device context is only read after `av_hwdevice_ctx_init`, and
// AVBufferRef reference counting is atomic.
unsafe impl Send for HwDevice {}
// SAFETY: as above; `&HwDevice` only hands out new references.
unsafe impl Sync for HwDevice {}

impl HwDevice {
    /// Wrap a CUDA context and stream (raw `CUcontext` / `CUstream`).
    pub fn cuda(cu_ctx: *mut std::ffi::c_void, cu_stream: *mut std::ffi::c_void) -> Result<Self, String> {
        init();
        // SAFETY: av_hwdevice_ctx_alloc returns a fresh device context whose
        // `hwctx` is an AVCUDADeviceContext for the CUDA type; we fill the two
        // public fields before init, as hwcontext_cuda.h documents. Init only
        // loads libcuda's entry points and, with the context already set,
        // marks it as not owned by FFmpeg.
        unsafe {
            let mut r = ffi::av_hwdevice_ctx_alloc(ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_CUDA);
            if r.is_null() {
                return Err("cannot allocate an FFmpeg CUDA device".into());
            }
            let dev = (*r).data as *mut ffi::AVHWDeviceContext;
            let hw = (*dev).hwctx as *mut ffi::AVCUDADeviceContext;
            (*hw).cuda_ctx = cu_ctx as _;
            (*hw).stream = cu_stream as _;
            let e = ffi::av_hwdevice_ctx_init(r);
            if e < 0 {
                ffi::av_buffer_unref(&mut r);
                return Err(format!("FFmpeg cannot use the CUDA context: {}", ff::Error::from(e)));
            }
            Ok(HwDevice(r))
        }
    }

    /// Set up a decoder context to decode on this device (before opening it).
    fn attach(&self, ctx: &mut ff::codec::context::Context, codec_id: ff::codec::Id) -> Result<(), String> {
        let codec = ff::codec::decoder::find(codec_id).ok_or("no decoder for this codec")?;
        // SAFETY: a static codec descriptor from FFmpeg's registry.
        if !codec_has_cuda(unsafe { codec.as_ptr() }) {
            return Err(format!("FFmpeg has no CUDA hwaccel for {}", codec.name()));
        }
        // SAFETY: `ctx` is an unopened codec context we own; the fields set
        // are the documented hwaccel inputs. `av_buffer_ref` gives the codec
        // its own reference, released by avcodec_free_context.
        unsafe {
            let c = ctx.as_mut_ptr();
            (*c).hw_device_ctx = ffi::av_buffer_ref(self.0);
            if (*c).hw_device_ctx.is_null() {
                return Err("out of memory".into());
            }
            (*c).get_format = Some(pick_cuda);
            // Frames are copied out of the decoder's surfaces at once; a
            // couple of extra surfaces cover the one in hand and those held
            // until their copies complete (`nvdec::Surfaces`).
            (*c).extra_hw_frames = 2 + HELD_SURFACES as i32;
            (*c).thread_count = 1;
        }
        Ok(())
    }
}

impl Drop for HwDevice {
    fn drop(&mut self) {
        // SAFETY: we hold one reference, released once.
        unsafe { ffi::av_buffer_unref(&mut self.0) };
    }
}

/// A pool of NV12 pictures in device memory on an [`HwDevice`]
/// (`AVHWFramesContext`), for an encoder that reads CUDA frames (NVENC):
/// pictures are drawn on where they are and encoded without a download.
pub struct DeviceFrames {
    frames: *mut ffi::AVBufferRef,
    pub width: u32,
    pub height: u32,
}

// SAFETY: as HwDevice: the frames context is read-only after init and its
// reference counting is atomic.
unsafe impl Send for DeviceFrames {}

impl DeviceFrames {
    /// NV12 pictures of `w` x `h` on `device`.
    pub fn nv12(device: &HwDevice, w: u32, h: u32) -> Result<Self, String> {
        // SAFETY: av_hwframe_ctx_alloc takes its own reference to the device
        // and returns a frames context whose public fields are set before
        // av_hwframe_ctx_init, as hwcontext.h documents; on failure the one
        // reference we hold is released.
        unsafe {
            let mut r = ffi::av_hwframe_ctx_alloc(device.0);
            if r.is_null() {
                return Err("cannot allocate FFmpeg CUDA frames".into());
            }
            let fc = (*r).data as *mut ffi::AVHWFramesContext;
            (*fc).format = ffi::AVPixelFormat::AV_PIX_FMT_CUDA;
            (*fc).sw_format = ffi::AVPixelFormat::AV_PIX_FMT_NV12;
            (*fc).width = w as i32;
            (*fc).height = h as i32;
            let e = ffi::av_hwframe_ctx_init(r);
            if e < 0 {
                ffi::av_buffer_unref(&mut r);
                return Err(format!("FFmpeg cannot make {w}x{h} NV12 frames on the GPU: {}", ff::Error::from(e)));
            }
            Ok(DeviceFrames { frames: r, width: w, height: h })
        }
    }

    /// A free picture from the pool: device pointers and pitches of its luma
    /// and interleaved chroma planes are in `data[0..2]` / `linesize[0..2]`
    /// (see [`DeviceFrames::planes`]).
    pub fn picture(&self) -> Result<ff::frame::Video, String> {
        let mut f = ff::frame::Video::empty();
        // SAFETY: `f` is an empty frame we own; av_hwframe_get_buffer fills it
        // with a pooled surface and a reference to our frames context.
        let e = unsafe { ffi::av_hwframe_get_buffer(self.frames, f.as_mut_ptr(), 0) };
        if e < 0 {
            return Err(format!("no free GPU picture for the encoder: {}", ff::Error::from(e)));
        }
        Ok(f)
    }

    /// (luma, chroma) device pointers and pitches of a picture from [`DeviceFrames::picture`].
    pub fn planes(f: &ff::frame::Video) -> [(u64, usize); 2] {
        // SAFETY: reads two pointers and pitches of a frame we hold; no pixel is touched.
        unsafe {
            let p = f.as_ptr();
            [((*p).data[0] as u64, (*p).linesize[0] as usize), ((*p).data[1] as u64, (*p).linesize[1] as usize)]
        }
    }

    /// Whether `encoder` takes these pictures: one is encoded by a scratch
    /// encoder (nothing is written anywhere), so a refusal that only shows
    /// when the first picture is sent (NVENC maps its input then) is known
    /// before a file is started.
    pub fn try_encoder(&self, encoder: &ChosenEncoder, color: ColorInfo) -> Result<(), String> {
        let tb = ff::Rational::new(1, 25);
        let mut enc = open_encoder(&encoder.name, &encoder.options, self.width, self.height, tb, false, Some((self, color)))?;
        let mut pic = self.picture()?;
        pic.set_pts(Some(0));
        let fail = |e: ff::Error| format!("{} refused a picture in device memory: {e}", encoder.name);
        enc.send_frame(&pic).map_err(fail)?;
        enc.send_eof().map_err(fail)?;
        let mut packet = ff::Packet::empty();
        loop {
            match enc.receive_packet(&mut packet) {
                Ok(()) => {}
                Err(ff::Error::Eof) => return Ok(()),
                Err(e) => return Err(fail(e)),
            }
        }
    }

    /// Copy a host NV12 picture `src` of this size into the device picture `dst`.
    pub fn upload(dst: &mut ff::frame::Video, src: &ff::frame::Video) -> Result<(), String> {
        // SAFETY: `dst` is a CUDA frame from this pool and `src` a host NV12
        // frame of the same size; av_hwframe_transfer_data copies between them
        // in the frames context's CUDA context and checks both.
        let e = unsafe { ffi::av_hwframe_transfer_data(dst.as_mut_ptr(), src.as_ptr(), 0) };
        if e < 0 { Err(format!("cannot copy a picture to the GPU: {}", ff::Error::from(e))) } else { Ok(()) }
    }
}

impl Drop for DeviceFrames {
    fn drop(&mut self) {
        // SAFETY: we hold one reference, released once.
        unsafe { ffi::av_buffer_unref(&mut self.frames) };
    }
}

/// Does `codec` decode through a CUDA device context?
fn codec_has_cuda(codec: *const ffi::AVCodec) -> bool {
    for i in 0.. {
        // SAFETY: iterates the codec's static hw config table; null ends it.
        let cfg = unsafe { ffi::avcodec_get_hw_config(codec, i) };
        if cfg.is_null() {
            return false;
        }
        // SAFETY: non-null entries point into the static table.
        let cfg = unsafe { &*cfg };
        if cfg.device_type == ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_CUDA
            && cfg.methods & ffi::AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX as i32 != 0
        {
            return true;
        }
    }
    false
}

/// Take CUDA output or nothing: a silent software fallback would hide that
/// NVDEC is not running.
unsafe extern "C" fn pick_cuda(_: *mut ffi::AVCodecContext, mut p: *const ffi::AVPixelFormat) -> ffi::AVPixelFormat {
    // SAFETY: FFmpeg passes a list terminated by AV_PIX_FMT_NONE.
    unsafe {
        while *p != ffi::AVPixelFormat::AV_PIX_FMT_NONE {
            if *p == ffi::AVPixelFormat::AV_PIX_FMT_CUDA {
                return *p;
            }
            p = p.add(1);
        }
    }
    ffi::AVPixelFormat::AV_PIX_FMT_NONE
}

/// Where a decoded `Pixel::CUDA` frame's planes are on the device.
#[derive(Debug, Clone, Copy)]
pub struct CudaPlanes {
    /// The real layout (NV12, P010LE, ...).
    pub sw_format: Pixel,
    /// Y and interleaved UV (device pointers), crop applied.
    pub planes: [u64; 2],
    pub pitches: [usize; 2],
    pub width: u32,
    pub height: u32,
    pub color: ColorInfo,
}

/// Decoded CUDA frames a source may hold while their copies complete.
pub const HELD_SURFACES: usize = 3;

/// A new reference to `frame`'s buffers (no copy). For a CUDA frame it keeps
/// the decoder's surface mapped until dropped.
pub fn frame_ref(frame: &ff::frame::Video) -> Result<ff::frame::Video, String> {
    // SAFETY: `frame` is a valid frame; av_frame_clone returns a new frame
    // referencing the same buffers (or null when out of memory), which
    // `Video::wrap` owns and frees with av_frame_free on drop.
    unsafe {
        let p = ffi::av_frame_clone(frame.as_ptr());
        if p.is_null() {
            return Err("out of memory".into());
        }
        Ok(ff::frame::Video::wrap(p))
    }
}

/// The device planes of a CUDA frame (`None` for a host frame).
pub fn cuda_planes(frame: &ff::frame::Video) -> Option<CudaPlanes> {
    if frame.format() != Pixel::CUDA {
        return None;
    }
    // SAFETY: a CUDA frame from the decoder carries `hw_frames_ctx` (an
    // AVHWFramesContext) and device pointers in data[0..2]; only addresses
    // are read here, never the pixels.
    unsafe {
        let f = frame.as_ptr();
        if (*f).hw_frames_ctx.is_null() {
            return None;
        }
        let fc = (*(*f).hw_frames_ctx).data as *const ffi::AVHWFramesContext;
        let sw_format: Pixel = (*fc).sw_format.into();
        let bpp = if matches!(sw_format, Pixel::P010LE | Pixel::P016LE) { 2 } else { 1 };
        let (ct, cl) = ((*f).crop_top, (*f).crop_left);
        let pitches = [(*f).linesize[0] as usize, (*f).linesize[1] as usize];
        let y = (*f).data[0] as u64 + (ct * pitches[0] + cl * bpp) as u64;
        let uv = (*f).data[1] as u64 + ((ct / 2) * pitches[1] + (cl / 2) * 2 * bpp) as u64;
        Some(CudaPlanes { sw_format, planes: [y, uv], pitches, width: frame.width(), height: frame.height(), color: color_of(frame) })
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

/// `image` turned `degrees` clockwise (see [`turn_image`]); a layout that
/// cannot be turned in place (4:2:2, YUYV, ...) is first converted to 4:4:4
/// in its own colour matrix and range, and turned in that.
pub fn turn_picture(image: &Image, degrees: u32, pool: &Pool<u8>) -> Result<Image, String> {
    let refused = match turn_image(image, degrees, pool) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    if image.host().is_none() || image.format == Pixel::YUV444P {
        return Err(refused);
    }
    let (w, h) = (image.width, image.height);
    let mut scaler = Scaler::new_to(image, w, h, Pixel::YUV444P, sws_flags(crate::config::Interpolation::Bilinear), Some(image.color))
        .map_err(|e| format!("{refused}: {e}"))?;
    let mut full = ff::frame::Video::new(Pixel::YUV444P, w, h);
    scaler.run_into(image, &mut full).map_err(|e| format!("{refused}: {e}"))?;
    let mut full = copy_to_image(&full, pool)?;
    full.color = image.color;
    turn_image(&full, degrees, pool)
}

/// `image` turned `degrees` clockwise (90, 180 or 270) into a pooled host
/// buffer of the same pixel format: width and height swap for 90 and 270.
/// Each plane is turned element by element (a pixel of a packed plane, a
/// chroma pair of NV12); formats whose chroma is subsampled unevenly (4:2:2,
/// 4:1:1) cannot be turned a quarter in their own layout, nor packed ones
/// whose pixels share chroma (YUYV) turned at all: those are refused.
pub fn turn_image(image: &Image, degrees: u32, pool: &Pool<u8>) -> Result<Image, String> {
    let src = image.host().ok_or("the picture is not in host memory")?;
    let fmt: ffi::AVPixelFormat = image.format.into();
    // SAFETY: a lookup in FFmpeg's static pixel format table; null for an unknown format.
    let desc = unsafe { ffi::av_pix_fmt_desc_get(fmt) };
    if desc.is_null() {
        return Err(format!("cannot turn a {:?} picture", image.format));
    }
    // SAFETY: non-null descriptors are static.
    let desc = unsafe { &*desc };
    let unsupported = (ffi::AV_PIX_FMT_FLAG_BITSTREAM | ffi::AV_PIX_FMT_FLAG_HWACCEL | ffi::AV_PIX_FMT_FLAG_PAL) as u64;
    let quarter = degrees % 180 == 90;
    if desc.flags & unsupported != 0 || (quarter && desc.log2_chroma_w != desc.log2_chroma_h) {
        return Err(format!("cannot turn a {:?} picture {degrees}°", image.format));
    }
    let (w, h) = (image.width, image.height);
    let (tw, th) = if quarter { (h, w) } else { (w, h) };
    // SAFETY: plain arithmetic on the format descriptor.
    let size = unsafe { ffi::av_image_get_buffer_size(fmt, tw as i32, th as i32, 1) };
    if size <= 0 {
        return Err(format!("cannot lay out a turned {tw}x{th} {:?} picture", image.format));
    }
    let mut buf = pool.get(size as usize);
    let mut ptrs = [std::ptr::null_mut::<u8>(); 4];
    let mut strides = [0i32; 4];
    // SAFETY: computes plane pointers into `buf` (of the size just asked for) for the packed layout.
    let filled = unsafe { ffi::av_image_fill_arrays(ptrs.as_mut_ptr(), strides.as_mut_ptr(), buf.as_ptr(), fmt, tw as i32, th as i32, 1) };
    if filled < 0 {
        return Err(format!("cannot lay out a turned picture ({filled})"));
    }
    let base = buf.as_ptr() as usize;
    let offsets = ptrs.map(|p| if p.is_null() { 0 } else { p as usize - base });
    let ceil_shift = |v: u32, s: u8| (v + (1 << s) - 1) >> s;
    for plane in 0..4usize {
        let comps = &desc.comp[..desc.nb_components as usize];
        let Some(step) = comps.iter().filter(|c| c.plane as usize == plane).map(|c| c.step as usize).max() else { continue };
        // Packed with shared chroma (YUYV: Y U Y V): a pixel is not an element of its own.
        if comps.iter().any(|c| c.plane as usize == plane && c.step as usize != step) {
            return Err(format!("cannot turn a {:?} picture", image.format));
        }
        // Chroma planes (components 1 and 2 without luma) are subsampled; the others are full size.
        let chroma = comps.iter().enumerate().all(|(i, c)| c.plane as usize != plane || i == 1 || i == 2) && desc.nb_components >= 3;
        let (pw, ph) = if chroma { (ceil_shift(w, desc.log2_chroma_w), ceil_shift(h, desc.log2_chroma_h)) } else { (w, h) };
        let (pw, ph) = (pw as usize, ph as usize);
        let (sstride, dstride) = (image.strides[plane] as usize, strides[plane] as usize);
        let (so, d0) = (image.offsets[plane], offsets[plane]);
        if src.len() < so + sstride * ph.saturating_sub(1) + pw * step {
            return Err("the picture is smaller than its layout".into());
        }
        for sy in 0..ph {
            let row = &src[so + sy * sstride..so + sy * sstride + pw * step];
            for sx in 0..pw {
                let (dx, dy) = match degrees {
                    90 => (ph - 1 - sy, sx),
                    180 => (pw - 1 - sx, ph - 1 - sy),
                    _ => (sy, pw - 1 - sx),
                };
                let d = d0 + dy * dstride + dx * step;
                buf[d..d + step].copy_from_slice(&row[sx * step..sx * step + step]);
            }
        }
    }
    Ok(Image { width: tw, height: th, format: image.format, color: image.color, offsets, strides, storage: Storage::Host(buf) })
}

#[cfg(test)]
mod turn_tests {
    use super::*;

    /// A packed host image of `fmt`, `w` x `h`, its bytes `data`.
    fn image(fmt: Pixel, w: u32, h: u32, data: &[u8], pool: &Pool<u8>) -> Image {
        let f: ffi::AVPixelFormat = fmt.into();
        let mut buf = pool.get(data.len());
        buf.copy_from_slice(data);
        let (mut ptrs, mut strides) = ([std::ptr::null_mut::<u8>(); 4], [0i32; 4]);
        // SAFETY: plane pointers into `buf`, which holds the packed layout of this size (checked by the caller).
        let n = unsafe { ffi::av_image_fill_arrays(ptrs.as_mut_ptr(), strides.as_mut_ptr(), buf.as_ptr(), f, w as i32, h as i32, 1) };
        assert_eq!(n as usize, data.len());
        let base = buf.as_ptr() as usize;
        let offsets = ptrs.map(|p| if p.is_null() { 0 } else { p as usize - base });
        Image {
            width: w,
            height: h,
            format: fmt,
            color: ColorInfo { matrix: Matrix::Bt601, full_range: false },
            offsets,
            strides,
            storage: Storage::Host(buf),
        }
    }

    #[test]
    fn a_quarter_turn_clockwise_puts_the_bottom_left_corner_top_left() {
        let pool = Pool::new(4);
        // 3x2 grey:  1 2 3 / 4 5 6  turned 90° clockwise is 2x3:  4 1 / 5 2 / 6 3
        let g = image(Pixel::GRAY8, 3, 2, &[1, 2, 3, 4, 5, 6], &pool);
        let t = turn_image(&g, 90, &pool).unwrap();
        assert_eq!((t.width, t.height, t.host().unwrap()), (2, 3, &[4, 1, 5, 2, 6, 3][..]));
        let t = turn_image(&g, 270, &pool).unwrap();
        assert_eq!((t.width, t.height, t.host().unwrap()), (2, 3, &[3, 6, 2, 5, 1, 4][..]));
        let t = turn_image(&g, 180, &pool).unwrap();
        assert_eq!((t.width, t.height, t.host().unwrap()), (3, 2, &[6, 5, 4, 3, 2, 1][..]));
    }

    /// NV12's chroma pairs move as one element; four quarter turns give the picture back.
    #[test]
    fn chroma_pairs_turn_whole_and_four_turns_are_none() {
        let pool = Pool::new(8);
        // 4x2 NV12: 8 luma bytes, one row of two (U, V) pairs.
        let data = [10, 11, 12, 13, 14, 15, 16, 17, 100, 200, 101, 201];
        let img = image(Pixel::NV12, 4, 2, &data, &pool);
        let t = turn_image(&img, 90, &pool).unwrap();
        assert_eq!((t.width, t.height), (2, 4));
        let chroma = &t.host().unwrap()[t.offsets[1]..];
        assert_eq!(chroma, [100, 200, 101, 201], "pairs kept whole, one per row of the turned picture");
        let mut back = img;
        for _ in 0..4 {
            back = turn_image(&back, 90, &pool).unwrap();
        }
        assert_eq!(back.host().unwrap(), data);
        let yuyv = image(Pixel::YUYV422, 2, 2, &[0; 8], &pool);
        assert!(turn_image(&yuyv, 90, &pool).is_err(), "4:2:2 cannot be turned a quarter in its own layout");
        assert!(turn_image(&yuyv, 180, &pool).is_err(), "nor can a layout whose pixels share their chroma");
        // Those are turned in 4:4:4: grey (Y 16 to 235, no colour) stays grey, turned.
        let mut data = [128u8; 8];
        for (i, y) in [16u8, 60, 180, 235].into_iter().enumerate() {
            data[i * 2] = y;
        }
        let yuyv = image(Pixel::YUYV422, 2, 2, &data, &pool);
        let t = turn_picture(&yuyv, 90, &pool).unwrap();
        assert_eq!((t.width, t.height, t.format), (2, 2, Pixel::YUV444P));
        let host = t.host().unwrap();
        assert_eq!(&host[..4], [180, 16, 235, 60], "luma turned clockwise");
        assert!(host[4..].iter().all(|c| c.abs_diff(128) <= 1), "no colour: {host:?}");
    }
}

/// A swscale context from one image geometry to a packed RGB24/BGR24 output,
/// rebuilt only when the input geometry changes.
pub struct Scaler {
    ctx: *mut ffi::SwsContext,
    key: (u32, u32, Pixel, ColorInfo),
    dst: (u32, u32, Pixel, Option<ColorInfo>),
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

/// swscale's coefficient table for a matrix.
fn sws_matrix(m: Matrix) -> i32 {
    match m {
        Matrix::Bt709 => ffi::SWS_CS_ITU709,
        Matrix::Bt2020 => ffi::SWS_CS_BT2020,
        Matrix::Bt601 | Matrix::Unspecified => ffi::SWS_CS_ITU601,
    }
}

impl Scaler {
    pub fn new(src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel, flags: i32) -> Result<Self, FfmpegError> {
        Self::new_to(src, dst_w, dst_h, dst_fmt, flags, None)
    }

    /// As `new`, with a YUV output in `dst_color`'s matrix and range (else
    /// BT.601, limited for YUV formats).
    pub fn new_to(
        src: &Image,
        dst_w: u32,
        dst_h: u32,
        dst_fmt: Pixel,
        flags: i32,
        dst_color: Option<ColorInfo>,
    ) -> Result<Self, FfmpegError> {
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
        let (dst_cs, dst_full) = match dst_color {
            Some(c) => (sws_matrix(c.matrix), c.full_range),
            None => (ffi::SWS_CS_DEFAULT, dst_full_range(dst_fmt)),
        };
        // SAFETY: `ctx` is a live context; coefficient tables are static.
        unsafe {
            let src_table = ffi::sws_getCoefficients(sws_matrix(src.color.matrix));
            let dst_table = ffi::sws_getCoefficients(dst_cs);
            ffi::sws_setColorspaceDetails(ctx, src_table, src.color.full_range as i32, dst_table, dst_full as i32, 0, 1 << 16, 1 << 16);
        }
        Ok(Scaler { ctx, key: (src.width, src.height, src.format, src.color), dst: (dst_w, dst_h, dst_fmt, dst_color) })
    }

    /// Whether this scaler fits `src` (else build a new one: mid-stream size change).
    pub fn fits(&self, src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel) -> bool {
        self.fits_to(src, dst_w, dst_h, dst_fmt, None)
    }

    /// As `fits`, for a scaler made by `new_to` with `dst_color`.
    pub fn fits_to(&self, src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel, dst_color: Option<ColorInfo>) -> bool {
        self.key == (src.width, src.height, src.format, src.color) && self.dst == (dst_w, dst_h, dst_fmt, dst_color)
    }

    /// Convert `src` into `dst`, a packed 3-byte-per-pixel buffer of `dst_w * 3` bytes per row.
    pub fn run(&mut self, src: &Image, dst: &mut [u8]) -> Result<(), String> {
        let host = src.host().ok_or("image is not in host memory")?;
        let (dw, dh, _, _) = self.dst;
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

/// RGB and grey outputs are full range; YUV outputs (for encoders) are limited-range BT.601.
fn dst_full_range(fmt: Pixel) -> bool {
    matches!(fmt, Pixel::RGB24 | Pixel::BGR24 | Pixel::RGBA | Pixel::BGRA | Pixel::GRAY8)
}

impl Scaler {
    /// Convert `src` into `dst`, an FFmpeg frame of this scaler's output size and format.
    pub fn run_into(&mut self, src: &Image, dst: &mut ff::frame::Video) -> Result<(), String> {
        let host = src.host().ok_or("image is not in host memory")?;
        let (dw, dh, fmt, _) = self.dst;
        if (dst.width(), dst.height(), dst.format()) != (dw, dh, fmt) {
            return Err(format!("destination frame is {}x{} {:?}, expected {dw}x{dh} {fmt:?}", dst.width(), dst.height(), dst.format()));
        }
        let mut planes = [std::ptr::null::<u8>(); 4];
        for i in 0..4 {
            if src.strides[i] != 0 {
                planes[i] = host[src.offsets[i]..].as_ptr();
            }
        }
        // SAFETY: `dst` is an allocated frame of the output size and format
        // (checked above), so its data/linesize arrays describe writable planes;
        // the source planes point into `host` as in `run`.
        let rows = unsafe {
            let raw = dst.as_mut_ptr();
            ffi::sws_scale(
                self.ctx,
                planes.as_ptr(),
                src.strides.as_ptr(),
                0,
                src.height as i32,
                (*raw).data.as_ptr(),
                (*raw).linesize.as_ptr(),
            )
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
    /// Why reading stopped, when it was not the end of the input (a network
    /// stream that went silent, a truncated file, a stop).
    pub read_error: Option<String>,
    /// Codec, source rate and channels, for the start-up log.
    pub describe: String,
    /// Duration in seconds, when the container says.
    pub duration: Option<f64>,
    /// Last, so stdin's mode comes back after the input is closed.
    _stdin: Option<NonBlockingStdin>,
}

impl AudioDecoder {
    /// Open the best audio stream of `path` (an audio file or a video's audio track,
    /// `-` for stdin), resampled to `rate` Hz mono.
    pub fn open(path: &Path, rate: u32) -> Result<Self, FfmpegError> {
        Self::open_with(path, rate, &InputOptions::default())
    }

    /// As [`AudioDecoder::open`], with a named demuxer (e.g. raw `s16le`) and its options.
    pub fn open_with(path: &Path, rate: u32, opts: &InputOptions) -> Result<Self, FfmpegError> {
        let p = shown_name(path);
        let Opened { input, stdin } = open_input(path, opts)?;
        let stream = input.streams().best(ff::media::Type::Audio).ok_or_else(|| FfmpegError::NoAudio { path: p.clone() })?;
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
            read_error: None,
            describe,
            duration,
            _stdin: stdin,
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
                    Err(e) => {
                        if e != ff::Error::Eof {
                            self.read_error = Some(e.to_string());
                        }
                        let _ = self.decoder.send_eof();
                        self.eof_sent = true;
                        break;
                    }
                }
            }
        }
    }
}

/// Whether `name` is a video encoder this FFmpeg has (`auto` always is).
pub fn check_video_encoder(name: &str) -> Result<(), String> {
    init();
    if name == "auto" {
        return Ok(());
    }
    match ff::codec::encoder::find_by_name(name) {
        None => Err(format!("unknown video encoder `{name}`")),
        Some(c) if !c.is_video() => Err(format!("`{name}` is not a video encoder")),
        Some(_) => Ok(()),
    }
}

/// What an encoder is asked for.
#[derive(Debug, Clone)]
pub struct EncoderSettings {
    /// An FFmpeg encoder name, or `auto`.
    pub codec: String,
    pub preset: Option<String>,
    pub crf: Option<u32>,
}

/// The encoder chosen for some settings, with the options it is opened with.
#[derive(Debug, Clone)]
pub struct ChosenEncoder {
    pub name: String,
    pub options: Vec<(String, String)>,
    /// Why `auto` chose it.
    pub note: Option<String>,
}

/// The NVENC preset nearest a libx264 one.
fn x264_to_nvenc_preset(p: &str) -> Option<&'static str> {
    Some(match p {
        "ultrafast" | "superfast" => "p1",
        "veryfast" => "p2",
        "faster" | "fast" => "p3",
        "medium" => "p4",
        "slow" => "p5",
        "slower" => "p6",
        "veryslow" | "placebo" => "p7",
        _ => return None,
    })
}

fn encoder_options(name: &str, s: &EncoderSettings) -> Vec<(String, String)> {
    let mut o = Vec::new();
    match name {
        "libx264" | "libx264rgb" | "libx265" => {
            o.push(("preset".into(), s.preset.clone().unwrap_or_else(|| "veryfast".into())));
            o.push(("crf".into(), s.crf.unwrap_or(23).to_string()));
        }
        n if n.ends_with("_nvenc") => {
            // `codec = "auto"` with a libx264 preset: NVENC's nearest (p1 fastest … p7 best).
            let preset = match s.preset.as_deref() {
                None => "p4".to_string(),
                Some(p) if s.codec == "auto" => x264_to_nvenc_preset(p).unwrap_or(p).to_string(),
                Some(p) => p.to_string(),
            };
            o.push(("preset".into(), preset));
            o.push(("rc".into(), "vbr".into()));
            o.push(("cq".into(), s.crf.unwrap_or(23).to_string()));
        }
        _ => {
            if let Some(p) = &s.preset {
                o.push(("preset".into(), p.clone()));
            }
            if let Some(c) = s.crf {
                o.push(("crf".into(), c.to_string()));
            }
        }
    }
    o
}

fn dictionary(options: &[(String, String)]) -> ff::Dictionary<'static> {
    let mut d = ff::Dictionary::new();
    for (k, v) in options {
        d.set(k, v);
    }
    d
}

/// Open the encoder `name` for `w`x`h` YUV 4:2:0 at time base `tb`.
fn open_encoder(
    name: &str,
    options: &[(String, String)],
    w: u32,
    h: u32,
    tb: ff::Rational,
    global_header: bool,
    input: Option<(&DeviceFrames, ColorInfo)>,
) -> Result<ff::encoder::Video, String> {
    use ff::color::{Range, Space};
    let codec = ff::codec::encoder::find_by_name(name).ok_or_else(|| format!("unknown video encoder `{name}`"))?;
    let mut enc = ff::codec::context::Context::new_with_codec(codec).encoder().video().map_err(|e| format!("{name}: {e}"))?;
    enc.set_width(w);
    enc.set_height(h);
    enc.set_time_base(tb);
    match input {
        None => {
            enc.set_format(Pixel::YUV420P);
            enc.set_colorspace(Space::SMPTE170M);
            enc.set_color_range(Range::MPEG);
        }
        Some((frames, color)) => {
            // The decoded pictures go in as they are: tagged with their own matrix and range.
            enc.set_format(Pixel::CUDA);
            enc.set_colorspace(match color.matrix {
                Matrix::Bt709 => Space::BT709,
                Matrix::Bt2020 => Space::BT2020NCL,
                Matrix::Bt601 | Matrix::Unspecified => Space::SMPTE170M,
            });
            enc.set_color_range(if color.full_range { Range::JPEG } else { Range::MPEG });
            // SAFETY: an unopened encoder context we own; it takes its own
            // reference to the frames context, released by avcodec_free_context.
            unsafe {
                let c = enc.as_mut_ptr();
                (*c).hw_frames_ctx = ffi::av_buffer_ref(frames.frames);
                if (*c).hw_frames_ctx.is_null() {
                    return Err("out of memory".into());
                }
            }
        }
    }
    if global_header {
        enc.set_flags(ff::codec::Flags::GLOBAL_HEADER);
    }
    let r = enc.open_as_with(codec, dictionary(options));
    r.map_err(|e| {
        let opts: Vec<String> = options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("cannot open encoder `{name}` ({}): {e}", opts.join(", "))
    })
}

/// Choose and check the encoder: `auto` takes h264_nvenc when it opens here, else
/// libx264; any encoder is opened once on a small picture so bad options fail now.
pub fn choose_encoder(s: &EncoderSettings) -> Result<ChosenEncoder, String> {
    init();
    let probe = |name: &str| {
        let options = encoder_options(name, s);
        // SAFETY: plain reads and writes of FFmpeg's log level. This runs while the
        // pipeline is built, before any decoder thread: an encoder that cannot open
        // (NVENC without a GPU) is reported by us, not by FFmpeg's own log.
        let level = unsafe { ffi::av_log_get_level() };
        // SAFETY: as above.
        unsafe { ffi::av_log_set_level(ffi::AV_LOG_QUIET) };
        let r = open_encoder(name, &options, 256, 144, ff::Rational::new(1, 25), false, None).map(|_| options);
        // SAFETY: restores the level read above.
        unsafe { ffi::av_log_set_level(level) };
        r
    };
    if s.codec == "auto" {
        let nvenc = match ff::codec::encoder::find_by_name("h264_nvenc") {
            None => Err("this FFmpeg has no h264_nvenc".to_string()),
            // FFmpeg's own reason is a bare errno ("Operation not permitted").
            Some(_) if !Path::new("/proc/driver/nvidia/version").exists() => Err("no NVIDIA driver on this machine".to_string()),
            Some(_) => probe("h264_nvenc").map_err(|e| format!("the GPU's NVENC refused to open: {e}")),
        };
        return match nvenc {
            Ok(options) => Ok(ChosenEncoder { name: "h264_nvenc".into(), options, note: Some("NVENC opened on the GPU".into()) }),
            Err(e) => {
                let options = probe("libx264")?;
                Ok(ChosenEncoder {
                    name: "libx264".into(),
                    options,
                    note: Some(format!("h264_nvenc unusable here ({e}); encoding on the CPU")),
                })
            }
        };
    }
    let options = probe(&s.codec)?;
    Ok(ChosenEncoder { name: s.codec.clone(), options, note: None })
}

/// Where and how a video is written: the muxer, its options and the keyframe spacing.
#[derive(Debug, Clone)]
pub struct OutputSpec {
    /// FFmpeg muxer name (`mp4`, `matroska`, `mpegts`, `flv`, `rtsp`).
    pub muxer: String,
    pub muxer_options: Vec<(String, String)>,
    /// Force a keyframe at least this often (seconds of source time); `None`: the encoder's own spacing.
    pub keyframe_interval_s: Option<f64>,
    /// A server at the other end (a URL): connecting and each write give up
    /// after a few seconds rather than wait for a server that went away.
    pub network: bool,
}

/// How long a network output may take to connect (and write its header).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// How long one write (or the trailer) to a network output may take.
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The time by which the current network operation must be done, read by
/// FFmpeg's interrupt callback: nanoseconds since [`clock_ns`]'s start; 0: none.
struct Deadline(std::sync::atomic::AtomicU64);

fn clock_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64 + 1
}

impl Deadline {
    /// Every operation from now on gives up at once.
    const NOW: u64 = 1;

    fn arm(&self, within: Option<std::time::Duration>) {
        let at = within.map_or(0, |d| clock_ns() + d.as_nanos() as u64);
        self.0.store(at, std::sync::atomic::Ordering::Relaxed);
    }
}

/// FFmpeg asks this between the steps of a blocking network read or write;
/// non-zero aborts it (AVERROR_EXIT).
unsafe extern "C" fn past_deadline(opaque: *mut std::ffi::c_void) -> std::ffi::c_int {
    // SAFETY: `opaque` is the `Deadline` boxed in the `VideoEncoder` that owns
    // the context calling this; the box is dropped after the context.
    let d = unsafe { &*(opaque as *const Deadline) };
    let at = d.0.load(std::sync::atomic::Ordering::Relaxed);
    std::ffi::c_int::from(at == Deadline::NOW || (at != 0 && clock_ns() > at))
}

/// Protocol options for writing `target`. SRT in live mode drops what is
/// still unsent when the connection closes (the last half second or so of a
/// stream): it waits up to 2 s for it, unless the URL says otherwise.
fn io_options(target: &str) -> ff::Dictionary<'static> {
    let mut d = ff::Dictionary::new();
    if target.to_ascii_lowercase().starts_with("srt://") && !target.contains("linger=") {
        d.set("linger", "2");
    }
    d
}

/// An output context for `target` in `muxer`, its I/O opened (unless the
/// muxer does its own, as RTSP does) with `deadline` as the interrupt.
fn open_output(target: &str, muxer: &str, deadline: &Deadline) -> Result<ff::format::context::Output, String> {
    let c_target = std::ffi::CString::new(target).map_err(|_| format!("{target}: a NUL byte in the name"))?;
    let c_muxer = std::ffi::CString::new(muxer).map_err(|_| format!("{muxer}: a NUL byte in the muxer name"))?;
    // SAFETY: `ps` is a fresh context, wrapped at once so that every path frees
    // it (ffmpeg-next's Output closes `pb`, null or not, then frees the
    // context). The interrupt's opaque pointer is `deadline`, which the caller
    // keeps alive longer than the context. `pb` is opened by FFmpeg only when
    // the muxer wants a file handle (not AVFMT_NOFILE); the options dictionary
    // is handed to FFmpeg and taken back (with what it did not use) as ffmpeg-next does.
    unsafe {
        let mut ps = std::ptr::null_mut();
        let r = ffi::avformat_alloc_output_context2(&mut ps, std::ptr::null_mut(), c_muxer.as_ptr(), c_target.as_ptr());
        if r < 0 || ps.is_null() {
            return Err(format!("cannot create {target}: {}", ff::Error::from(r)));
        }
        (*ps).interrupt_callback =
            ffi::AVIOInterruptCB { callback: Some(past_deadline), opaque: deadline as *const Deadline as *mut std::ffi::c_void };
        let out = ff::format::context::Output::wrap(ps);
        if (*(*ps).oformat).flags & ffi::AVFMT_NOFILE == 0 {
            let mut opts = io_options(target).disown();
            let r = ffi::avio_open2(&mut (*ps).pb, c_target.as_ptr(), ffi::AVIO_FLAG_WRITE, &(*ps).interrupt_callback, &mut opts);
            drop(ff::Dictionary::own(opts));
            if r < 0 {
                return Err(format!("cannot open {target}: {}", ff::Error::from(r)));
            }
        }
        Ok(out)
    }
}

/// An encoder + muxer writing one video stream to a file, stdout or a server.
pub struct VideoEncoder {
    target: String,
    octx: ff::format::context::Output,
    encoder: ff::encoder::Video,
    enc_tb: ff::Rational,
    ost_tb: ff::Rational,
    pub width: u32,
    pub height: u32,
    /// The last frame, held back until the next one tells its duration.
    pending: Option<ff::frame::Video>,
    last_pts: Option<i64>,
    last_duration: i64,
    /// Frame durations by pts, for the packets that come out of the encoder.
    durations: std::collections::HashMap<i64, i64>,
    /// Forced keyframes: their spacing in the encoder's time base, and when the next one is due.
    key_every: Option<i64>,
    next_key: Option<i64>,
    /// Frames handed to the encoder.
    pub frames: u64,
    finished: bool,
    /// Network outputs: how long each write may take.
    write_timeout: Option<std::time::Duration>,
    /// Read by the interrupt callback of `octx`: declared after it, so dropped after it.
    deadline: Box<Deadline>,
}

// SAFETY: the FFmpeg contexts inside have no thread affinity; the encoder is
// owned and used by one sink thread at a time (&mut self).
unsafe impl Send for VideoEncoder {}

impl VideoEncoder {
    /// Create `target` (a path, `pipe:1` for stdout, or a URL) as `spec` says,
    /// with one `w`x`h` stream in time base `tb` (the source's), and write its
    /// header (for a server: connect).
    /// `input`: NV12 pictures in device memory (NVENC) of that colour, rather
    /// than host YUV 4:2:0 pictures.
    pub fn create(
        target: &str,
        spec: &OutputSpec,
        encoder: &ChosenEncoder,
        (w, h): (u32, u32),
        tb: (i32, i32),
        input: Option<(&DeviceFrames, ColorInfo)>,
    ) -> Result<Self, String> {
        init();
        let deadline = Box::new(Deadline(std::sync::atomic::AtomicU64::new(0)));
        deadline.arm(spec.network.then_some(CONNECT_TIMEOUT));
        let shown = mask_credentials(target).into_owned();
        let timed_out = |e: String| {
            if spec.network && e.contains(&ff::Error::Exit.to_string()) {
                format!("{shown}: no answer within {} s", CONNECT_TIMEOUT.as_secs())
            } else {
                e
            }
        };
        let mut octx = open_output(target, &spec.muxer, &deadline).map_err(|e| timed_out(e.replace(target, &shown)))?;
        let global_header = octx.format().flags().contains(ff::format::Flags::GLOBAL_HEADER);
        let enc_tb = ff::Rational::new(tb.0.max(1), tb.1.max(1));
        let mut options = encoder.options.clone();
        if spec.keyframe_interval_s.is_some() {
            // A forced keyframe is an IDR picture, where a player (or a fragment) can start.
            options.push(("forced-idr".into(), "1".into()));
        }
        if spec.network {
            // Live: each picture leaves as soon as it is encoded, in order (RTP carries no decode times).
            options.push(("bf".into(), "0".into()));
        }
        let enc = open_encoder(&encoder.name, &options, w, h, enc_tb, global_header, input)?;
        let codec = ff::codec::encoder::find_by_name(&encoder.name);
        let mut ost = octx.add_stream(codec).map_err(|e| format!("{shown}: cannot add a stream: {e}"))?;
        ost.set_parameters(&enc);
        ost.set_time_base(enc_tb);
        octx.write_header_with(dictionary(&spec.muxer_options)).map_err(|e| timed_out(format!("{shown}: cannot write the header: {e}")))?;
        let ost_tb = octx.stream(0).map(|s| s.time_base()).unwrap_or(enc_tb);
        let key_every =
            spec.keyframe_interval_s.map(|s| ((s * enc_tb.denominator() as f64 / enc_tb.numerator() as f64).round() as i64).max(1));
        Ok(VideoEncoder {
            target: shown,
            octx,
            encoder: enc,
            enc_tb,
            ost_tb,
            width: w,
            height: h,
            pending: None,
            last_pts: None,
            last_duration: 1,
            durations: Default::default(),
            key_every,
            next_key: None,
            frames: 0,
            finished: false,
            write_timeout: spec.network.then_some(WRITE_TIMEOUT),
            deadline,
        })
    }

    /// An empty host picture of the encoder's size to fill (YUV 4:2:0).
    pub fn picture(&self) -> ff::frame::Video {
        ff::frame::Video::new(Pixel::YUV420P, self.width, self.height)
    }

    /// Encode `picture` shown at `pts` (source time base). Timestamps must rise;
    /// a missing or repeated one follows the previous frame by its duration.
    pub fn push(&mut self, mut picture: ff::frame::Video, pts: Option<i64>) -> Result<(), String> {
        let pts = match (pts, self.last_pts) {
            (Some(p), Some(last)) if p > last => p,
            (Some(p), None) => p,
            (_, Some(last)) => last + self.last_duration.max(1),
            (None, None) => 0,
        };
        if let Some(last) = self.last_pts {
            self.last_duration = pts - last;
        }
        self.last_pts = Some(pts);
        picture.set_pts(Some(pts));
        let key = self.key_every.is_some_and(|every| {
            let due = self.next_key.is_none_or(|k| pts >= k);
            if due {
                self.next_key = Some(pts + every);
            }
            due
        });
        picture.set_kind(if key { ff::picture::Type::I } else { ff::picture::Type::None });
        if let Some(prev) = self.pending.replace(picture) {
            self.send(prev, self.last_duration)?;
        }
        Ok(())
    }

    fn send(&mut self, picture: ff::frame::Video, duration: i64) -> Result<(), String> {
        if let Some(p) = picture.pts() {
            self.durations.insert(p, duration);
        }
        self.encoder.send_frame(&picture).map_err(|e| format!("{}: encoding: {e}", self.target))?;
        self.frames += 1;
        self.deadline.arm(self.write_timeout);
        self.drain()
    }

    /// Write every packet the encoder has ready.
    fn drain(&mut self) -> Result<(), String> {
        let mut packet = ff::Packet::empty();
        loop {
            match self.encoder.receive_packet(&mut packet) {
                Ok(()) => {
                    packet.set_stream(0);
                    if let Some(d) = packet.pts().and_then(|p| self.durations.remove(&p)) {
                        packet.set_duration(d);
                    }
                    packet.rescale_ts(self.enc_tb, self.ost_tb);
                    packet.write_interleaved(&mut self.octx).map_err(|e| match e {
                        ff::Error::Exit => format!("{}: writing: no progress within {} s", self.target, WRITE_TIMEOUT.as_secs()),
                        e => format!("{}: writing: {e}", self.target),
                    })?;
                }
                Err(ff::Error::Eof) => return Ok(()),
                Err(ff::Error::Other { errno }) if errno == ffi::EAGAIN => return Ok(()),
                Err(e) => return Err(format!("{}: encoding: {e}", self.target)),
            }
        }
    }

    /// Close a connection that failed: whatever is still buffered is given up
    /// at once rather than waited for.
    pub fn abandon(mut self) {
        self.finished = true;
        self.deadline.0.store(Deadline::NOW, std::sync::atomic::Ordering::Relaxed);
        // Closes what the muxer opened itself (RTSP's RTP streams and its connection); the error is expected.
        let _ = self.octx.write_trailer();
    }

    /// Flush the encoder and write the trailer: the file is complete and playable.
    pub fn finish(&mut self) -> Result<(), String> {
        if std::mem::replace(&mut self.finished, true) {
            return Ok(());
        }
        if let Some(last) = self.pending.take() {
            self.send(last, self.last_duration.max(1))?;
        }
        self.encoder.send_eof().map_err(|e| format!("{}: flushing the encoder: {e}", self.target))?;
        self.drain()?;
        self.deadline.arm(self.write_timeout);
        self.octx.write_trailer().map_err(|e| format!("{}: writing the trailer: {e}", self.target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_paths_are_tidied_by_their_text() {
        let n = |p: &str| shown_name(Path::new(p));
        assert_eq!(n("pipelines/../samples/a.mp4"), "samples/a.mp4");
        assert_eq!(n("./../samples/./a.mp4"), "../samples/a.mp4");
        assert_eq!(n("tests/data/../../samples/x.mp4"), "samples/x.mp4");
        assert_eq!(n("/data/../../clips/a.mp4"), "/clips/a.mp4");
        assert_eq!(n("a/.."), ".");
        assert_eq!(n("-"), "stdin");
        assert_eq!(n("rtsp://u:pw@cam/../x"), "rtsp://u:***@cam/../x");
    }

    fn settings(codec: &str, preset: Option<&str>) -> EncoderSettings {
        EncoderSettings { codec: codec.into(), preset: preset.map(str::to_string), crf: Some(20) }
    }

    /// A YUV output in a chosen matrix and range (what a device-mode video
    /// sink uploads, tagged with its stream's colour): white and a red are
    /// the textbook codes of each, and the default stays BT.601 limited.
    #[test]
    fn scaler_writes_yuv_in_the_colour_asked_for() {
        use crate::frame::convert::rgb_to_yuv;
        let (w, h) = (16u32, 8u32);
        let pool = Pool::<u8>::new(1);
        let paint = |rgb: [u8; 3]| {
            let mut buf = pool.get((w * h * 3) as usize);
            buf.chunks_exact_mut(3).for_each(|p| p.copy_from_slice(&rgb));
            Image::rgb24(w, h, buf)
        };
        init();
        let flags = sws_flags(crate::config::Interpolation::Bilinear);
        for to in [
            None,
            Some(ColorInfo { matrix: Matrix::Bt709, full_range: false }),
            Some(ColorInfo { matrix: Matrix::Bt709, full_range: true }),
            Some(ColorInfo { matrix: Matrix::Bt601, full_range: true }),
        ] {
            for rgb in [[255u8, 255, 255], [200, 30, 40]] {
                let src = paint(rgb);
                let mut s = Scaler::new_to(&src, w, h, Pixel::NV12, flags, to).unwrap();
                assert!(s.fits_to(&src, w, h, Pixel::NV12, to) && (to.is_none() || !s.fits(&src, w, h, Pixel::NV12)));
                let mut out = ff::frame::Video::new(Pixel::NV12, w, h);
                s.run_into(&src, &mut out).unwrap();
                let want = rgb_to_yuv(rgb, to.unwrap_or(ColorInfo { matrix: Matrix::Bt601, full_range: false }));
                let got = [out.data(0)[0], out.data(1)[0], out.data(1)[1]];
                for k in 0..3 {
                    assert!((got[k] as i32 - want[k] as i32).abs() <= 1, "{to:?} {rgb:?}: got {got:?}, want {want:?}");
                }
            }
        }
    }

    /// `auto` with a libx264 preset gives NVENC its nearest preset (NVENC
    /// refuses libx264's names); a preset named for NVENC itself is kept as written.
    #[test]
    fn auto_translates_libx264_presets_for_nvenc() {
        let get = |o: Vec<(String, String)>, k: &str| o.into_iter().find(|(n, _)| n == k).map(|(_, v)| v);
        assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("veryfast"))), "preset").as_deref(), Some("p2"));
        assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("veryslow"))), "preset").as_deref(), Some("p7"));
        assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("p5"))), "preset").as_deref(), Some("p5"));
        assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", None)), "preset").as_deref(), Some("p4"));
        assert_eq!(get(encoder_options("h264_nvenc", &settings("h264_nvenc", Some("veryfast"))), "preset").as_deref(), Some("veryfast"));
        assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("veryfast"))), "cq").as_deref(), Some("20"));
        // libx264 keeps its own names.
        assert_eq!(get(encoder_options("libx264", &settings("auto", Some("veryfast"))), "preset").as_deref(), Some("veryfast"));
    }
}

/// Decode one JPEG or PNG picture held in memory (the body of a request) with
/// the decoder an `image_sequence` uses for a file of that format, strictly
/// (a cut or corrupt picture is an error, not concealed), so the same picture
/// gives the same pixels either way. A picture over `max_pixels` is refused
/// before its pixels are allocated. `Err` says what is wrong, for the sender.
pub fn decode_picture(data: &[u8], max_pixels: u64, pool: &Pool<u8>) -> Result<Image, String> {
    init();
    let id = if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        ff::codec::Id::MJPEG
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        ff::codec::Id::PNG
    } else if data.is_empty() {
        return Err("the picture is empty (0 bytes)".into());
    } else {
        return Err(format!("not a JPEG or PNG picture (it starts with bytes {:02x?})", &data[..data.len().min(4)]));
    };
    let what = if id == ff::codec::Id::PNG { "PNG" } else { "JPEG" };
    if let Some((w, h)) = picture_size(data)
        && w as u64 * h as u64 > max_pixels
    {
        return Err(format!("the {what} picture is {w}x{h} ({} pixels), over the limit of {max_pixels} pixels", w as u64 * h as u64));
    }
    let codec = ff::decoder::find(id).ok_or_else(|| format!("this FFmpeg has no {what} decoder"))?;
    let mut ctx = ff::codec::context::Context::new_with_codec(codec);
    // SAFETY: `ctx` is an unopened codec context we own; `max_pixels` and
    // `err_recognition` are documented decoder options read when it opens and
    // when frames are allocated.
    unsafe {
        (*ctx.as_mut_ptr()).max_pixels = max_pixels.min(i64::MAX as u64) as i64;
        (*ctx.as_mut_ptr()).err_recognition |= ffi::AV_EF_EXPLODE;
    }
    let mut dec = ctx.decoder().video().map_err(|e| format!("cannot open the {what} decoder: {e}"))?;
    let mut frame = ff::frame::Video::empty();
    let decoded = dec.send_packet(&ff::Packet::copy(data)).and_then(|_| dec.send_eof()).and_then(|_| dec.receive_frame(&mut frame));
    if let Err(e) = decoded {
        return Err(format!("the {what} picture cannot be decoded ({e}): cut short or corrupt"));
    }
    copy_to_image(&frame, pool)
}

/// The size a PNG (its IHDR) or JPEG (its first frame header) declares.
fn picture_size(data: &[u8]) -> Option<(u32, u32)> {
    let be16 = |d: &[u8], at: usize| Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]) as u32);
    let be32 = |d: &[u8], at: usize| Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?));
    if data.starts_with(b"\x89PNG") {
        return Some((be32(data, 16)?, be32(data, 20)?));
    }
    // JPEG: markers from after SOI; SOFn (C0-CF but C4, C8, CC) hold height then width.
    let mut at = 2;
    while at + 4 <= data.len() {
        if data[at] != 0xFF {
            return None;
        }
        let marker = data[at + 1];
        if marker == 0xFF {
            at += 1;
            continue;
        }
        let len = be16(data, at + 2)? as usize;
        if (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker) {
            return Some((be16(data, at + 7)?, be16(data, at + 5)?));
        }
        at += 2 + len;
    }
    None
}
