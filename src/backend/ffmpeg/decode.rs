//! Video decode: a demuxer + decoder for one input's best video stream (on
//! the CPU, or on NVDEC through an [`HwDevice`]), skipping and counting
//! corrupt data, telling a cut input from a complete one; and one JPEG or
//! PNG picture held in memory.

use std::path::Path;

use ff::ffi;
use ffmpeg_next as ff;

use super::FfmpegError;
use super::hw::HwDevice;
use super::input::{DEFAULT_MAX_PIXELS, InputOptions, NonBlockingStdin, Opened, open_input, shown_name};
use super::picture::copy_to_image;
use super::setup::init;
use crate::frame::{Image, Pool};

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
    /// Event clips: given each packet of the video stream once the decoder has it.
    tap: Option<super::remux::PacketTap>,
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
    /// (see [`cuda_planes`](super::hw::cuda_planes)). Fails when the codec has no CUDA hwaccel here.
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
            tap: None,
            _stdin: stdin,
        })
    }

    /// Hand each packet of the video stream, unchanged, to `tap` (event clips).
    pub fn set_packet_tap(&mut self, tap: super::remux::PacketTap) {
        self.tap = Some(tap);
    }

    /// The video stream's codec parameters and time base, for a muxer of its packets.
    pub fn stream_params(&self) -> Option<super::remux::StreamParams> {
        let s = self.input.stream(self.stream_index)?;
        // A copy of its own: the stream's parameters would keep the whole input open.
        Some(super::remux::StreamParams { params: s.parameters().clone(), time_base: self.info.time_base, codec: self.info.codec.clone() })
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
                    if let Some(tap) = &mut self.tap {
                        tap(super::remux::TappedPacket(packet));
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
