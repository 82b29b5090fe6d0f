//! Writing video: an encoder + muxer for one stream into a file, stdout or a
//! server, with forced keyframes and time limits on network connects and writes.

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::dictionary;
use super::encode::{ChosenEncoder, DeviceFrames, open_encoder};
use super::setup::init;
use crate::config::mask_credentials;
use crate::frame::ColorInfo;

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
