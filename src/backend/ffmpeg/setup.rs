//! FFmpeg's one-time set-up, its own log routed into ours, and what the
//! linked build offers (library versions, hardware device types).

use std::sync::Once;

use ff::ffi;
use ffmpeg_next as ff;

use crate::config::mask_credentials;

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
