//! Opening inputs: a file, a URL or stdin, with a named demuxer and its
//! options, the interrupt that lets a stop end a wait on a silent stream or
//! pipe, the frame size limit, and how messages name an input.

use std::path::Path;

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::setup::init;
use super::{FfmpegError, dictionary};
use crate::config::mask_credentials;

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
pub(super) struct Opened {
    pub(super) input: ff::format::context::Input,
    pub(super) stdin: Option<NonBlockingStdin>,
}

/// Open `path` with `opts`. `-` means stdin.
pub(super) fn open_input(path: &Path, opts: &InputOptions) -> Result<Opened, FfmpegError> {
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
pub(super) struct NonBlockingStdin {
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
