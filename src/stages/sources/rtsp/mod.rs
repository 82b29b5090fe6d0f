//! `kind = "rtsp"`: a live RTSP camera, decoded by FFmpeg, that survives the
//! camera going away.
//!
//! FFmpeg polls an interrupt callback while it connects and while it waits for
//! data; ours aborts the blocked call when the pipeline stops, when a connect
//! takes longer than `connect_timeout_ms`, or when no frame has arrived for
//! `watchdog_ms` (a camera that hangs keeps its socket open and sends nothing).
//! A lost stream is reported as a `lost` event; the source then reconnects
//! (attempts on an exponential backoff, and between them a cheap probe of the
//! camera's port that starts an attempt as soon as the camera answers again:
//! see [`Retry`]) and reports `reconnected` with the gap and the attempts.
//! Frames are stamped in milliseconds since the source started, following the
//! camera's clock within a connection and never going backwards. With
//! `media = "audio"` the stream's audio is read instead, in timed windows
//! numbered by sample since the source started (across reconnections too).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::backend::ffmpeg::{AudioDecoder, InputOptions, Interrupt, VideoDecoder, copy_to_image};
use crate::config::{Diagnostic, NodeConfig, PipelineConfig, RtspSourceConfig, RtspTransport, mask_credentials};
use crate::frame::{EventKind, Pool};
use crate::runtime::SourceCtx;
use crate::stages::{Body, Source};

mod retry;
mod watch;
use crate::stages::build::{Build, BuildCtx};
use retry::*;
use watch::*;

/// How a refusal of the credentials (RTSP 401) starts its error.
const UNAUTHORIZED: &str = "unauthorized";

/// One connection's decoder: the stream's video, or its audio.
enum Conn {
    Video(VideoDecoder),
    Audio(AudioDecoder),
}

impl Conn {
    /// Why reading stopped, when it was not the end of the stream.
    fn read_error(&self) -> Option<&str> {
        match self {
            Conn::Video(d) => d.read_error(),
            Conn::Audio(d) => d.read_error.as_deref(),
        }
    }

    /// Frames (video) or packets (audio) lost to corrupt data.
    fn corrupt(&self) -> u64 {
        match self {
            Conn::Video(d) => d.skipped_frames,
            Conn::Audio(d) => d.corrupt_packets,
        }
    }
}

pub struct RtspSource {
    /// The URL with its credentials: handed to FFmpeg, never printed.
    url: String,
    /// The URL as printed (password masked).
    shown: String,
    transport: RtspTransport,
    connect_timeout: Duration,
    watchdog: Duration,
    reconnect: bool,
    max_retries: Option<u32>,
    /// Refused credentials (RTSP 401) in a row before the stream shows as failed, and so far.
    max_auth_failures: u32,
    auth_failures: u32,
    /// `/readyz` waits for this stream while it is lost.
    required: bool,
    /// Why the camera did not answer at start (`wait_at_start`): the run
    /// starts with the stream lost.
    start_error: Option<String>,
    retry: Retry,
    /// The camera's host:port for the probes (`None`: no probing).
    probe_at: Option<(String, u16)>,
    threads: usize,
    decoder: Option<Conn>,
    /// Event clips: where this stream's compressed packets are kept (a `clips` sink is in the pipeline).
    ring: Option<Arc<crate::runtime::clips::PacketRing>>,
    /// `media = "audio"`: (sample rate, window, hop).
    audio: Option<super::AudioWindows>,
    audio_pool: Pool<f32>,
    watch: Arc<Watch>,
    pool: Pool<u8>,
    max_frames: Option<u64>,
}

impl RtspSource {
    /// Connect now, so a wrong URL, a wrong password or an unreachable camera
    /// is reported before anything runs (with `wait_at_start`, an unreachable
    /// camera is a warning and the source keeps trying once the run starts).
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &RtspSourceConfig,
        index: u32,
        pool_size: usize,
        max_frames: Option<u64>,
    ) -> Result<Self, Diagnostic> {
        let url = cfg.expand(&c.uri)?;
        let audio = super::audio_windows(cfg, node, c.media, c.sample_rate.as_ref(), c.window.as_ref(), c.hop.as_ref())?;
        let ms = |v: &toml::Spanned<u64>| Duration::from_millis(*v.get_ref());
        // Each source (and each run) jitters differently.
        let seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), (index, &node.name));
        let probe_at = probe_address(&url).filter(|_| *c.probe_interval_ms.get_ref() > 0);
        let mut src = RtspSource {
            shown: mask_credentials(&url).into_owned(),
            url,
            transport: c.transport,
            connect_timeout: ms(&c.connect_timeout_ms),
            watchdog: ms(&c.watchdog_ms),
            reconnect: c.reconnect,
            max_retries: c.max_retries,
            max_auth_failures: *c.max_auth_failures.get_ref(),
            auth_failures: 0,
            required: c.required,
            start_error: None,
            retry: Retry::new(
                Backoff::new(ms(&c.backoff_initial_ms), ms(&c.backoff_max_ms), seed),
                Some(ms(&c.probe_interval_ms)),
                ms(&c.probe_window_ms),
            ),
            probe_at,
            threads: c.decoder_threads,
            decoder: None,
            ring: None,
            audio,
            audio_pool: Pool::new(pool_size),
            watch: Arc::new(Watch::new()),
            pool: Pool::new(pool_size),
            max_frames: match (c.max_frames, max_frames) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        };
        if src.probe_at.is_none() {
            src.retry.probe = None;
        }
        match src.connect() {
            Ok(decoder) => src.decoder = Some(decoder),
            Err(e) if c.wait_at_start => {
                src.auth_failures = u32::from(e.starts_with(UNAUTHORIZED));
                tracing::warn!(
                    "source `{}`: camera not reachable at start: {e}; the run starts and the source keeps trying (wait_at_start)",
                    node.name
                );
                src.start_error = Some(e);
            }
            Err(e) => {
                return Err(cfg.diag(c.uri.span(), format!("source `{}`: {e}", node.name)).with_help(format!(
                    "check the URL, the credentials and that the camera answers (ffprobe -rtsp_transport {} URL), or set wait_at_start = true",
                    c.transport.as_str()
                )));
            }
        }
        Ok(src)
    }

    /// One connection attempt, bounded by the connect timeout.
    fn connect(&self) -> Result<Conn, String> {
        self.watch.arm(self.connect_timeout);
        // The socket timeout is a backstop behind our own limits, which fire first with a clearer reason.
        let socket_us = (self.connect_timeout.max(self.watchdog) + Duration::from_secs(1)).as_micros();
        let watch = self.watch.clone();
        let mut opts = InputOptions {
            options: vec![("rtsp_transport".into(), self.transport.as_str().into()), ("timeout".into(), socket_us.to_string())],
            interrupt: Some(Interrupt(Arc::new(move || watch.interrupted()))),
            ..Default::default()
        };
        let url = std::path::Path::new(&self.url);
        let r = match self.audio {
            None => {
                // The frame rate comes from the SDP; probing it from 20 frames would delay every (re)connect by over a second.
                opts.options.push(("fpsprobesize".into(), "0".into()));
                VideoDecoder::open_with(url, self.threads, &opts).map(Conn::Video)
            }
            Some((rate, ..)) => AudioDecoder::open_with(url, rate, &opts).map(Conn::Audio),
        };
        match r {
            Ok(d) => Ok(d),
            Err(_) if self.watch.fired.load(Ordering::Relaxed) => {
                Err(format!("{}: no answer within {} ms (connect_timeout_ms)", self.shown, self.connect_timeout.as_millis()))
            }
            Err(e) if e.is_unauthorized() => {
                Err(format!("{UNAUTHORIZED}: {} refused the credentials (RTSP 401): check the user and password in `uri`", self.shown))
            }
            Err(e) => Err(mask_credentials(&e.to_string()).into_owned()),
        }
    }

    /// Drop the connection without waiting on a camera that may hang.
    fn close(&mut self) -> u64 {
        self.watch.closing.store(true, Ordering::Relaxed);
        let corrupt = self.decoder.take().map_or(0, |d| d.corrupt());
        self.watch.closing.store(false, Ordering::Relaxed);
        corrupt
    }

    /// Wait `d`, or less if the pipeline stops; `false` when it stops.
    fn pause(ctx: &SourceCtx<'_>, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !ctx.stopping() {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
        false
    }

    /// Reconnect after a loss (or a camera down at start): on success the new
    /// connection is in place and a `reconnected` event sent (`verb` says how
    /// in the log); `Ok(false)` when the pipeline stopped meanwhile.
    fn reconnect(&mut self, ctx: &mut SourceCtx<'_>, lost_at: Instant, what: &str, verb: &str) -> Result<bool, String> {
        let Some((conn, attempts)) = self.connect_with_backoff(ctx, lost_at, what)? else { return Ok(false) };
        let gap = lost_at.elapsed();
        tracing::info!("source `{}`: {verb} to {} after {:.1} s ({attempts} attempt(s))", ctx.name, self.shown, gap.as_secs_f64());
        self.decoder = Some(conn);
        ctx.event(EventKind::Reconnected { gap_ms: gap.as_millis() as u64, attempts });
        Ok(true)
    }

    /// Count refused credentials in a row (`error`: the attempt's, `None`: it
    /// connected): after `max_auth_failures` of them the stream shows as failed,
    /// until an attempt ends otherwise.
    fn count_refusals(&mut self, ctx: &SourceCtx<'_>, error: Option<&String>) {
        match error {
            Some(e) if e.starts_with(UNAUTHORIZED) => {
                self.auth_failures = self.auth_failures.saturating_add(1);
                if self.auth_failures == self.max_auth_failures {
                    tracing::warn!(
                        "source `{}`: {e} ({} times in a row); shown as failed, still trying on the backoff in case they change",
                        ctx.name,
                        self.auth_failures
                    );
                }
                if self.auth_failures >= self.max_auth_failures {
                    ctx.refused(Some(format!("{e} ({} times in a row; still trying)", self.auth_failures)));
                }
            }
            _ => {
                if self.auth_failures >= self.max_auth_failures {
                    tracing::info!("source `{}`: no longer refused ({} refusal(s) in a row before)", ctx.name, self.auth_failures);
                }
                self.auth_failures = 0;
                ctx.refused(None);
            }
        }
    }

    /// Connection attempts on the [`Retry`] schedule until one succeeds;
    /// `Ok(None)` when the pipeline stopped meanwhile.
    fn connect_with_backoff(&mut self, ctx: &mut SourceCtx<'_>, lost_at: Instant, what: &str) -> Result<Option<(Conn, u32)>, String> {
        let mut attempts = 0u32;
        self.retry.start();
        // A probe waits at most this long for the camera (a camera whose packets vanish).
        let probe_timeout = self.connect_timeout.min(Duration::from_millis(500));
        loop {
            if ctx.stopping() {
                return Ok(None);
            }
            match self.retry.next(lost_at.elapsed()) {
                Step::Wait(d) => {
                    if !Self::pause(ctx, d) {
                        return Ok(None);
                    }
                    continue;
                }
                Step::Probe => {
                    let answering = self.probe_at.as_ref().is_some_and(|a| port_answers(a, probe_timeout));
                    tracing::trace!("source `{}`: probe: camera port {}", ctx.name, if answering { "answers" } else { "silent" });
                    self.retry.probed(lost_at.elapsed(), answering);
                    continue;
                }
                Step::Open => {}
            }
            attempts += 1;
            let r = self.connect();
            self.count_refusals(ctx, r.as_ref().err());
            match r {
                Ok(d) => return Ok(Some((d, attempts))),
                Err(_) if ctx.stopping() => return Ok(None),
                Err(e) => {
                    if self.max_retries.is_some_and(|m| attempts >= m) {
                        return Err(format!(
                            "{what} {attempts} reconnect attempt(s) over {:.1} s (max_retries = {}); last error: {e}",
                            lost_at.elapsed().as_secs_f64(),
                            attempts
                        ));
                    }
                    self.retry.open_failed(lost_at.elapsed());
                    if attempts.is_power_of_two() {
                        tracing::warn!("source `{}`: reconnect attempt {attempts} failed: {e}; retrying", ctx.name);
                    } else {
                        tracing::debug!("source `{}`: reconnect attempt {attempts} failed: {e}", ctx.name);
                    }
                }
            }
        }
    }
}

impl Source for RtspSource {
    fn expected_frames(&self) -> Option<u64> {
        self.max_frames
    }

    fn is_live(&self) -> bool {
        true
    }

    fn required(&self) -> bool {
        self.required
    }

    fn describe(&self) -> String {
        let (codec, size, fps) = match &self.decoder {
            Some(Conn::Video(d)) => {
                let i = &d.info;
                (i.codec.clone(), format!(" {}x{}", i.width, i.height), i.fps.map(|f| format!(" @ {f:.2} fps")).unwrap_or_default())
            }
            Some(Conn::Audio(d)) => (d.describe.clone(), String::new(), String::new()),
            None => ("?".into(), String::new(), String::new()),
        };
        let (codec, size, fps) = match self.audio {
            Some((rate, window, hop)) => {
                (format!("audio: {codec}"), format!(", windows of {window} samples every {hop} at {rate} Hz"), fps)
            }
            None => (codec, size, fps),
        };
        let reconnect = if !self.reconnect {
            "reconnect off".to_string()
        } else {
            let probe = match (self.retry.probe, &self.probe_at) {
                (Some(p), Some(_)) => format!(", probe every {} ms for {} s", p.as_millis(), self.retry.window.as_secs()),
                _ => String::new(),
            };
            format!(
                "reconnect with backoff {} ms → {} ms{probe}, {}",
                self.retry.backoff.initial.as_millis(),
                self.retry.backoff.max.as_millis(),
                self.max_retries.map_or("forever".to_string(), |m| format!("at most {m} attempt(s)"))
            )
        };
        format!(
            "{} over {} ({codec}{size}{fps}, decode: FFmpeg software; watchdog {} ms, {reconnect})",
            self.shown,
            self.transport.as_str(),
            self.watchdog.as_millis()
        )
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let _ = self.watch.shutdown.set(ctx.shutdown());
        let clock = Arc::new(std::sync::Mutex::new(Clock::new(Instant::now())));
        let mut seq = 0u64;
        let mut bad = 0u64;
        let mut connected_at = Instant::now();
        // A camera down at start (`wait_at_start`): lost from the first moment.
        if let Some(reason) = self.start_error.take() {
            let reason = format!("not reachable at start: {reason}");
            let lost_at = Instant::now();
            ctx.event(EventKind::Lost { reason });
            if !self.reconnect(ctx, lost_at, "camera not reachable at start, nor after", "connected")? {
                return Ok(());
            }
            connected_at = Instant::now();
        }
        // Audio: the sample index of the next window, and when the first connection started.
        let (mut audio_next, first_connect) = (0u64, Instant::now());
        let result = 'streams: loop {
            let ring = self.ring.clone();
            let Some(conn) = self.decoder.as_mut() else { break Ok(()) };
            // Event clips: this connection's packets into the ring, on the frames' timeline (ms).
            if let (Some(ring), Conn::Video(decoder)) = (ring, &mut *conn) {
                ring.start(decoder.stream_params(), (1, 1000));
                let (epoch, tb, clock) = (ring.epoch(), decoder.info.time_base, clock.clone());
                decoder.set_packet_tap(Box::new(move |p| {
                    let Some(dts) = p.dts().or(p.pts()) else { return };
                    let (pts, no_pts) = (p.pts().unwrap_or(dts), p.pts().is_none());
                    let now = Instant::now();
                    let (pts_ms, dts_ms, end_ms) = {
                        let mut c = lock_clock(&clock);
                        (c.map(pts, tb, now), c.map(dts, tb, now), c.map(pts + p.duration(), tb, now))
                    };
                    let key = p.is_key();
                    let duration = (end_ms - pts_ms).max(0);
                    ring.push(crate::runtime::clips::RingPacket { packet: p, pts: pts_ms, dts: dts_ms, duration, key, epoch, no_pts });
                }));
            }
            // Models may have loaded for a while since the connect: the watchdog counts from now.
            self.watch.arm(self.watchdog);
            let lost = match conn {
                Conn::Video(decoder) => {
                    let tb = decoder.info.time_base;
                    loop {
                        if ctx.stopping() || self.max_frames.is_some_and(|m| seq >= m) {
                            break None;
                        }
                        let frame = match decoder.next_frame() {
                            Ok(Some(f)) => f,
                            Ok(None) => break Some(()),
                            Err(e) => {
                                tracing::debug!("source `{}`: {e}", ctx.name);
                                break Some(());
                            }
                        };
                        self.watch.touch();
                        let pts = frame.timestamp().or(frame.pts());
                        let image = match copy_to_image(frame, &self.pool) {
                            Ok(i) => i,
                            Err(e) => {
                                bad += 1;
                                tracing::warn!("source `{}`: frame {seq}: {e}; skipped", ctx.name);
                                continue;
                            }
                        };
                        let now = Instant::now();
                        let f = ctx.new_frame(seq, Some(lock_clock(&clock).stamp(pts, tb, now)), (1, 1000), Some(Arc::new(image)));
                        seq += 1;
                        if !ctx.emit(f) {
                            break None;
                        }
                    }
                }
                Conn::Audio(decoder) => {
                    let (rate, window, hop) = self.audio.expect("an audio connection reads audio");
                    // Samples go on from where the last connection stopped, or from
                    // the wall clock when that is later (the time the stream was away).
                    let wall = (first_connect.elapsed().as_secs_f64() * rate as f64) as u64;
                    let offset = if seq == 0 { 0 } else { audio_next.max(wall) };
                    let mut windows = super::audio::Windows::new(window, hop);
                    loop {
                        if ctx.stopping() || self.max_frames.is_some_and(|m| seq >= m) {
                            break None;
                        }
                        let mut chunk = match windows.next(decoder, &self.audio_pool, rate) {
                            Ok(Some(c)) => c,
                            Ok(None) => break Some(()),
                            Err(e) => {
                                tracing::debug!("source `{}`: {e}", ctx.name);
                                break Some(());
                            }
                        };
                        self.watch.touch();
                        chunk.start += offset;
                        audio_next = offset + windows.consumed();
                        let mut f = ctx.new_frame(seq, Some(chunk.start as i64), (1, rate as i32), None);
                        f.audio = Some(Arc::new(chunk));
                        seq += 1;
                        if !ctx.emit(f) {
                            break None;
                        }
                    }
                }
            };
            let decoder = &*conn;
            // Why the stream ended, before the connection (and its error) goes.
            let reason = if self.watch.fired.load(Ordering::Relaxed) {
                format!("no frame for {} ms (watchdog_ms)", self.watchdog.as_millis())
            } else if let Some(e) = decoder.read_error() {
                mask_credentials(e).into_owned()
            } else {
                "end of stream".to_string()
            };
            let clean_end = !self.watch.fired.load(Ordering::Relaxed) && decoder.read_error().is_none();
            let t = Instant::now();
            ctx.note_decode_errors(self.close());
            tracing::debug!("source `{}`: input ended ({reason}), connection closed in {:?}", ctx.name, t.elapsed());
            if lost.is_none() || ctx.stopping() {
                break Ok(());
            }
            let lost_at = Instant::now();
            self.retry.lost_after(lost_at - connected_at);
            ctx.event(EventKind::Lost { reason: reason.clone() });
            if !self.reconnect {
                tracing::warn!("source `{}`: stream lost: {reason} (reconnect is off)", ctx.name);
                break if clean_end { Ok(()) } else { Err(format!("stream lost: {reason} (reconnect is off)")) };
            }
            tracing::warn!("source `{}`: stream lost: {reason}; reconnecting", ctx.name);
            match self.reconnect(ctx, lost_at, "stream lost and not back after", "reconnected") {
                Ok(true) => {
                    lock_clock(&clock).new_connection();
                    connected_at = Instant::now();
                    continue 'streams;
                }
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        ctx.note_decode_errors(bad);
        result
    }
}

/// The connection's clock, shared with the packet tap of event clips.
fn lock_clock(c: &std::sync::Mutex<Clock>) -> std::sync::MutexGuard<'_, Clock> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

impl Build for RtspSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let src = RtspSource::build(cx.cfg, cx.node, self, cx.index as u32, cx.pool_size, cx.max_frames())?;
        Ok(Body::Source(Box::new(src.with_ring(cx.clips.as_deref(), &cx.name))))
    }
}

impl RtspSource {
    /// Keep the camera's packets in `stream`'s ring of event clips (a video camera, with a `clips` sink).
    pub fn with_ring(mut self, clips: Option<&crate::runtime::clips::ClipHub>, stream: &str) -> Self {
        if self.audio.is_none() {
            self.ring = clips.map(|h| h.ring(stream));
        }
        self
    }
}

#[cfg(test)]
mod tests;
