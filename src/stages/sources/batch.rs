//! Decoding for sources with many inputs, each its own stream (`dir`: one
//! per file; `kafka`: one per job): decoder threads that read one input at a
//! time and send its frames (or audio windows) to the source thread, and the
//! [`Feed`] there that opens each input's stream, emits its frames and ends it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::ffmpeg::{AudioDecoder, FfmpegError, VideoDecoder, copy_to_image, turn_picture};
use crate::frame::{AudioChunk, Frame, Image, InputEnd, Pool};
use crate::runtime::SourceCtx;

/// What a file gives.
#[derive(Debug, Clone, Copy)]
pub(super) enum Media {
    Video,
    /// Audio resampled to `rate` Hz mono, in windows of `window` samples every `hop`.
    Audio {
        rate: u32,
        window: usize,
        hop: usize,
    },
}

/// One input as the decoders see it.
pub(super) struct Input<'a> {
    pub path: &'a Path,
    /// Its size in bytes (0: an empty file, or not a file).
    pub size: u64,
    /// Set to stop reading this input alone (its stream ends incomplete).
    pub cancel: Option<&'a AtomicBool>,
}

impl Input<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c.load(Ordering::Acquire))
    }
}

/// A file being read: its input token, next sequence number, time base, and whether it failed.
type InProgress = (Arc<crate::frame::InputToken>, u64, (i32, i32), Arc<AtomicBool>);

/// Corrupt data a file's decoder skipped: frames (audio: packets) and the
/// stretches they came in (video; each ended by a keyframe or the end).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Corrupt {
    pub frames: u64,
    pub bursts: u64,
}

impl Corrupt {
    pub(super) fn add(&mut self, other: Corrupt) {
        self.frames += other.frames;
        self.bursts += other.bursts;
    }
}

/// What a decoding worker sends to the source thread.
pub(super) enum Msg {
    Opened {
        file: usize,
        time_base: (i32, i32),
    },
    Frame {
        file: usize,
        pts: Option<i64>,
        item: Item,
    },
    /// Read to the end (or to `max_frames`): `Err` says why the file is not
    /// usable. `corrupt`: what its decoder skipped (also when it failed).
    Done {
        file: usize,
        result: Result<u64, String>,
        corrupt: Corrupt,
    },
    /// The run is stopping: the file was not finished (`corrupt`: what its decoder skipped so far).
    Stopped {
        file: usize,
        corrupt: Corrupt,
    },
}

/// A decoded video frame or audio window.
pub(super) enum Item {
    Image(Image),
    Audio(AudioChunk),
}

/// Why a file cannot be opened, without its path (the report names it).
pub(super) fn open_reason(e: FfmpegError, size: u64) -> String {
    if size == 0 {
        return "empty file (0 bytes)".into();
    }
    match e {
        FfmpegError::Open { source, .. } => format!("not readable as media (not a media file, or truncated): {source}"),
        FfmpegError::NoVideo { .. } => "no video stream".into(),
        FfmpegError::NoAudio { .. } => "no audio stream".into(),
        FfmpegError::Decoder { codec, source, .. } => format!("no decoder for codec {codec}: {source}"),
        other => other.to_string(),
    }
}

/// The decoding side of a dir source: what each worker needs.
pub(super) struct Decode<'a> {
    pub media: Media,
    pub rotate: bool,
    pub threads: usize,
    pub max_frames: Option<u64>,
    pub pool: &'a Pool<u8>,
    pub audio_pool: &'a Pool<f32>,
    pub tx: crossbeam_channel::Sender<Msg>,
    pub stop: &'a AtomicBool,
}

impl Decode<'_> {
    /// Decode one file, sending its frames or windows; the result says whether it is whole.
    pub(super) fn file(&self, file: usize, e: &Input<'_>) {
        match self.media {
            Media::Video => self.video(file, e),
            Media::Audio { rate, window, hop } => self.audio(file, e, rate, window, hop),
        }
    }

    /// Decode one video file, sending its frames; the result says whether it is whole.
    fn video(&self, file: usize, e: &Input<'_>) {
        let (tx, stop, max_frames, pool) = (&self.tx, self.stop, self.max_frames, self.pool);
        let mut dec = match VideoDecoder::open(e.path, self.threads) {
            Ok(d) => d,
            Err(err) => {
                // Not opened, nothing decoded: the file is failed (and named), no frame is counted.
                let _ = tx.send(Msg::Done { file, result: Err(open_reason(err, e.size)), corrupt: Corrupt::default() });
                return;
            }
        };
        let _ = tx.send(Msg::Opened { file, time_base: dec.info.time_base });
        let turn = dec.info.quarter_turn().filter(|_| self.rotate);
        match (turn, dec.info.turn_note()) {
            (Some(d), _) => tracing::info!("{}: frames turned {d}° clockwise, as the container's display matrix asks", e.path.display()),
            (None, Some(note)) => tracing::warn!("{}: {note}", e.path.display()),
            _ => {}
        }
        let (mut n, mut bad) = (0u64, 0u64);
        // As the `file` source counts: frames skipped (rejected, damaged, or
        // unusable once decoded) and the stretches of corrupt data.
        let corrupt = |dec: &VideoDecoder, bad: u64| Corrupt { frames: dec.skipped_frames + bad, bursts: dec.corrupt_bursts };
        let mut hit_limit = false;
        loop {
            if stop.load(Ordering::Acquire) || e.cancelled() {
                let _ = tx.send(Msg::Stopped { file, corrupt: corrupt(&dec, bad) });
                return;
            }
            if max_frames.is_some_and(|m| n >= m) {
                hit_limit = true;
                break;
            }
            let frame = match dec.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(err) => {
                    let _ = tx.send(Msg::Done { file, result: Err(err.to_string()), corrupt: corrupt(&dec, bad) });
                    return;
                }
            };
            let pts = frame.timestamp().or(frame.pts());
            let image = match (copy_to_image(frame, pool), turn) {
                (Ok(i), Some(d)) => turn_picture(&i, d, pool),
                (image, _) => image,
            };
            match image {
                Ok(image) => {
                    n += 1;
                    if tx.send(Msg::Frame { file, pts, item: Item::Image(image) }).is_err() {
                        return;
                    }
                }
                Err(err) => {
                    bad += 1;
                    tracing::debug!("{}: frame {n}: {err}", e.path.display());
                }
            }
        }
        let skipped = corrupt(&dec, bad);
        let result = if let Some(t) = dec.truncated.filter(|_| !hit_limit) {
            Err(t.describe(n))
        } else if let Some(err) = &dec.read_error {
            Err(format!("read error after {n} frame(s): {err} (truncated?)"))
        } else if skipped.frames > 0 {
            Err(format!("corrupt data: {} frame(s) skipped in {} stretch(es) ({n} frame(s) decoded)", skipped.frames, skipped.bursts))
        } else if let Some(d) = dec.info.declared_frames.filter(|d| !hit_limit && n < *d) {
            Err(format!("decoded {n} of the {d} frames the container lists (truncated?)"))
        } else if n == 0 {
            Err("no video frames decoded".into())
        } else {
            Ok(n)
        };
        let _ = tx.send(Msg::Done { file, result, corrupt: skipped });
    }

    fn audio(&self, file: usize, e: &Input<'_>, rate: u32, window: usize, hop: usize) {
        let tx = &self.tx;
        let mut dec = match AudioDecoder::open(e.path, rate) {
            Ok(d) => d,
            Err(err) => {
                let _ = tx.send(Msg::Done { file, result: Err(open_reason(err, e.size)), corrupt: Corrupt::default() });
                return;
            }
        };
        // As the `audio` source counts: packets the decoder rejected.
        let corrupt = |dec: &AudioDecoder| Corrupt { frames: dec.corrupt_packets, bursts: 0 };
        let _ = tx.send(Msg::Opened { file, time_base: (1, rate as i32) });
        let mut windows = super::audio::Windows::new(window, hop);
        let (mut n, mut hit_limit) = (0u64, false);
        loop {
            if self.stop.load(Ordering::Acquire) || e.cancelled() {
                let _ = tx.send(Msg::Stopped { file, corrupt: corrupt(&dec) });
                return;
            }
            if self.max_frames.is_some_and(|m| n >= m) {
                hit_limit = true;
                break;
            }
            match windows.next(&mut dec, self.audio_pool, rate) {
                Ok(Some(chunk)) => {
                    n += 1;
                    if tx.send(Msg::Frame { file, pts: Some(chunk.start as i64), item: Item::Audio(chunk) }).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let result = Err(format!("read error after {n} window(s): {err}"));
                    let _ = tx.send(Msg::Done { file, result, corrupt: corrupt(&dec) });
                    return;
                }
            }
        }
        let seconds = windows.consumed() as f64 / rate as f64;
        let result = if let Some(err) = &dec.read_error {
            Err(format!("read error after {n} window(s): {err} (truncated?)"))
        } else if dec.corrupt_packets > 0 {
            Err(format!("corrupt data: {} packet(s) could not be decoded ({n} window(s) decoded)", dec.corrupt_packets))
        } else if n == 0 {
            Err("no audio decoded".into())
        } else if let Some(d) = dec.duration.filter(|d| !hit_limit && seconds < d - 0.5) {
            Err(format!("decoded {seconds:.1} s of the {d:.1} s the container declares (truncated?)"))
        } else {
            Ok(n)
        };
        let _ = tx.send(Msg::Done { file, result, corrupt: corrupt(&dec) });
    }
}

/// The source thread's side: the inputs being read, each with its stream's
/// token, and what their decoders skipped, summed.
#[derive(Default)]
pub(super) struct Feed {
    open: HashMap<usize, InProgress>,
    corrupt: Corrupt,
    /// Frames emitted, over every input.
    pub emitted: u64,
}

impl Feed {
    /// Input `file` was opened: its stream `stream` starts. `on_flushed` runs
    /// once the stream has ended and every sink closed it (see
    /// [`SourceCtx::open_input`]), unless the input failed (then [`Feed::done`] said why).
    pub fn opened(
        &mut self,
        ctx: &SourceCtx<'_>,
        file: usize,
        time_base: (i32, i32),
        stream: Arc<str>,
        on_flushed: impl FnOnce(InputEnd, bool) + Send + 'static,
    ) {
        let failed = Arc::new(AtomicBool::new(false));
        let f2 = failed.clone();
        let token = ctx.open_input(stream, move |end: InputEnd, flushed: bool| {
            if !f2.load(Ordering::Acquire) {
                on_flushed(end, flushed);
            }
        });
        self.open.insert(file, (token, 0, time_base, failed));
    }

    /// A frame of input `file`: emitted (with `decorate` applied) unless
    /// `skip`; `false` when nobody downstream listens any more.
    pub fn frame(
        &mut self,
        ctx: &mut SourceCtx<'_>,
        file: usize,
        pts: Option<i64>,
        item: Item,
        skip: bool,
        decorate: impl FnOnce(&mut Frame),
    ) -> bool {
        let Some((token, seq, tb, _)) = self.open.get_mut(&file) else { return true };
        if skip {
            return true;
        }
        let mut frame = match item {
            Item::Image(image) => ctx.new_frame_of(token, *seq, pts, *tb, Some(Arc::new(image))),
            Item::Audio(chunk) => {
                let mut f = ctx.new_frame_of(token, *seq, pts, *tb, None);
                f.audio = Some(Arc::new(chunk));
                f
            }
        };
        decorate(&mut frame);
        *seq += 1;
        self.emitted += 1;
        ctx.emit(frame)
    }

    /// Input `file` was read to its end: `Err` (the reason) when it failed, and
    /// then its stream's `on_flushed` does not run. The stream ends once its
    /// last frame has settled downstream.
    pub fn done(&mut self, ctx: &SourceCtx<'_>, file: usize, result: Result<u64, String>, corrupt: Corrupt) -> Result<(), String> {
        self.corrupt.add(corrupt);
        ctx.set_decode_errors(self.corrupt.frames, self.corrupt.bursts);
        let entry = self.open.remove(&file);
        match result {
            Ok(sent) => {
                // Complete only if every frame it decoded went downstream (none left behind by a stop).
                if let Some((token, emitted, ..)) = &entry
                    && *emitted == sent
                {
                    token.read_to_end();
                }
                Ok(())
            }
            Err(reason) => {
                if let Some((_, _, _, failed)) = &entry {
                    failed.store(true, Ordering::Release);
                }
                Err(reason)
            }
        }
    }

    /// Input `file` was stopped before its end: its stream ends incomplete.
    pub fn stopped(&mut self, ctx: &SourceCtx<'_>, file: usize, corrupt: Corrupt) {
        self.corrupt.add(corrupt);
        ctx.set_decode_errors(self.corrupt.frames, self.corrupt.bursts);
        self.open.remove(&file);
    }
}
