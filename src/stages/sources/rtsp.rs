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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::ffmpeg::{AudioDecoder, InputOptions, Interrupt, VideoDecoder, copy_to_image};
use crate::config::{Diagnostic, NodeConfig, PipelineConfig, RtspSourceConfig, RtspTransport, mask_credentials};
use crate::frame::{EventKind, Pool};
use crate::runtime::{Shutdown, SourceCtx};
use crate::stages::Source;

/// How a refusal of the credentials (RTSP 401) starts its error.
const UNAUTHORIZED: &str = "unauthorized";

/// A connection that delivered frames this long resets the backoff.
pub const HEALTHY: Duration = Duration::from_secs(60);

/// Waits between reconnection attempts: `initial` doubling after each failure
/// up to `max`, each jittered down by up to a quarter so that cameras lost
/// together do not all come back at the same instant.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
    rng: u64,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, seed: u64) -> Self {
        Backoff { initial, max: max.max(initial), failures: 0, rng: seed | 1 }
    }

    /// The wait before the next attempt without jitter: initial × 2^failures, at most `max`.
    pub fn base(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.initial.checked_mul(factor).unwrap_or(self.max).min(self.max)
    }

    /// The wait before the next attempt, in (¾ base, base]; the one after doubles.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.base();
        self.failures = self.failures.saturating_add(1);
        base.mul_f64(1.0 - 0.25 * self.unit())
    }

    /// Start again from `initial`.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The stream was lost after being up for `up`: a healthy connection resets the backoff.
    pub fn lost_after(&mut self, up: Duration) {
        if up >= HEALTHY {
            self.reset();
        }
    }

    /// Uniform in [0, 1) (xorshift64*: jitter needs no more).
    fn unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What a source whose stream is down does next (see [`Retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due for this long.
    Wait(Duration),
    /// Knock on the camera's port (a TCP connect), then report with [`Retry::probed`].
    Probe,
    /// A full reconnection attempt, then [`Retry::open_failed`] if it fails.
    Open,
}

/// When to retry a lost stream, in time since the loss: full reconnection
/// attempts after the backoff's waits (doubling, so a camera that stays down
/// is not hammered), and between them, for the first `window` of the outage,
/// a cheap probe of the camera's port every `probe` interval. A probe that
/// finds the port answering after it did not (the camera is back) brings the
/// next attempt forward to now and starts the backoff again; a port that
/// keeps answering (a hung camera) brings nothing forward, so attempts stay
/// on the backoff's schedule.
#[derive(Debug, Clone)]
pub struct Retry {
    backoff: Backoff,
    /// `None`: no probing (only the backoff's attempts).
    probe: Option<Duration>,
    window: Duration,
    next_open: Duration,
    next_probe: Duration,
    /// The last probe found the port answering.
    answering: bool,
}

impl Retry {
    pub fn new(backoff: Backoff, probe: Option<Duration>, window: Duration) -> Self {
        let probe = probe.filter(|p| !p.is_zero());
        Retry { backoff, probe, window, next_open: Duration::ZERO, next_probe: Duration::ZERO, answering: false }
    }

    /// A new outage: the first attempt after the backoff's wait, the first probe after one interval.
    pub fn start(&mut self) {
        self.next_open = self.backoff.next_delay();
        self.next_probe = self.probe.unwrap_or(Duration::ZERO);
        self.answering = false;
    }

    /// What to do at `t` since the loss.
    pub fn next(&self, t: Duration) -> Step {
        if t >= self.next_open {
            return Step::Open;
        }
        let due = match self.probe {
            Some(_) if self.next_probe < self.window => self.next_open.min(self.next_probe),
            _ => self.next_open,
        };
        if t >= due { Step::Probe } else { Step::Wait(due - t) }
    }

    /// The probe at `t` found the port answering or not.
    pub fn probed(&mut self, t: Duration, answering: bool) {
        self.next_probe = t + self.probe.unwrap_or(Duration::ZERO);
        if answering && !self.answering {
            self.backoff.reset();
            self.next_open = t;
        }
        self.answering = answering;
    }

    /// The attempt at `t` failed: the next one after the backoff's wait.
    pub fn open_failed(&mut self, t: Duration) {
        self.next_open = t + self.backoff.next_delay();
    }

    /// The stream was lost after being up for `up` (see [`Backoff::lost_after`]).
    pub fn lost_after(&mut self, up: Duration) {
        self.backoff.lost_after(up);
    }
}

/// `host:port` of an `rtsp://` or `rtsps://` URL (default ports 554 and 322),
/// credentials left out; `None` for anything else.
pub fn probe_address(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "rtsp" => 554,
        "rtsps" => 322,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None | Some("") => default,
        Some(p) => p.parse().ok()?,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Does anything accept a TCP connection at `addr` within `timeout`?
fn port_answers(addr: &(String, u16), timeout: Duration) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = (addr.0.as_str(), addr.1).to_socket_addrs() else { return false };
    addrs.into_iter().any(|a| std::net::TcpStream::connect_timeout(&a, timeout).is_ok())
}

/// Shared with FFmpeg's interrupt callback: when the last sign of life was and
/// how much silence is allowed now.
#[derive(Debug)]
struct Watch {
    origin: Instant,
    /// ms since `origin` of the last sign of life (a connect started, a frame arrived).
    last: AtomicU64,
    /// ms of silence allowed (the connect timeout while connecting, the watchdog while streaming).
    limit: AtomicU64,
    /// The limit was hit.
    fired: AtomicBool,
    /// Abort any blocked call at once (closing a lost connection).
    closing: AtomicBool,
    /// The pipeline's stop flag, once the source runs.
    shutdown: OnceLock<Arc<Shutdown>>,
}

impl Watch {
    fn new() -> Self {
        Watch {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            fired: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            shutdown: OnceLock::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// A sign of life.
    fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Relaxed);
    }

    /// From now on allow `limit` of silence.
    fn arm(&self, limit: Duration) {
        self.fired.store(false, Ordering::Relaxed);
        self.touch();
        self.limit.store(limit.as_millis() as u64, Ordering::Relaxed);
    }

    /// FFmpeg's question: abort the blocked call?
    fn interrupted(&self) -> bool {
        if self.closing.load(Ordering::Relaxed) || self.shutdown.get().is_some_and(|s| s.stopping()) {
            return true;
        }
        let silent = self.now_ms().saturating_sub(self.last.load(Ordering::Relaxed));
        if silent > self.limit.load(Ordering::Relaxed) {
            self.fired.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// Frame timestamps in ms since the source started: the camera's pts (any time
/// base) within one connection, anchored to the wall clock at the connection's
/// first frame and re-anchored when the two drift apart by more than
/// `MAX_DRIFT_MS` (a camera clock jump, an RTCP resync); strictly increasing;
/// a frame without pts gets the wall clock.
#[derive(Debug)]
struct Clock {
    origin: Instant,
    /// (camera ms, our ms) at the anchor.
    anchor: Option<(i64, i64)>,
    last: Option<i64>,
}

const MAX_DRIFT_MS: i64 = 2000;

impl Clock {
    fn new(origin: Instant) -> Self {
        Clock { origin, anchor: None, last: None }
    }

    /// A new connection: its pts start anywhere.
    fn new_connection(&mut self) {
        self.anchor = None;
    }

    fn stamp(&mut self, pts: Option<i64>, time_base: (i32, i32), now: Instant) -> i64 {
        let wall = now.saturating_duration_since(self.origin).as_millis() as i64;
        let (num, den) = time_base;
        let cam = pts
            .filter(|_| den != 0)
            .map(|p| (p as i128 * num as i128 * 1000 / den as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64);
        let t = match cam {
            Some(c) => {
                let (c0, w0) = *self.anchor.get_or_insert((c, wall));
                let t = w0.saturating_add(c.saturating_sub(c0));
                if (t - wall).abs() > MAX_DRIFT_MS {
                    self.anchor = Some((c, wall));
                    wall
                } else {
                    t
                }
            }
            None => wall,
        };
        let t = match self.last {
            Some(l) if t <= l => l + 1,
            _ => t,
        };
        self.last = Some(t);
        t
    }
}

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
        let mut clock = Clock::new(Instant::now());
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
            let Some(conn) = self.decoder.as_mut() else { break Ok(()) };
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
                        let f = ctx.new_frame(seq, Some(clock.stamp(pts, tb, now)), (1, 1000), Some(Arc::new(image)));
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
                    clock.new_connection();
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut b = Backoff::new(500 * MS, 30_000 * MS, 7);
        let mut bases = Vec::new();
        for _ in 0..10 {
            bases.push(b.base().as_millis());
            b.next_delay();
        }
        assert_eq!(bases, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]);
        // Far past the point where 2^n overflows: still the cap.
        for _ in 0..100 {
            b.next_delay();
        }
        assert_eq!(b.base(), 30_000 * MS);
    }

    #[test]
    fn jitter_stays_within_a_quarter_below_the_base() {
        let mut b = Backoff::new(400 * MS, 1600 * MS, 12345);
        let mut seen = Vec::new();
        for _ in 0..2000 {
            let base = b.base();
            let d = b.next_delay();
            assert!(d <= base && d > base.mul_f64(0.75) - MS, "{d:?} vs base {base:?}");
            seen.push(d.as_secs_f64() / base.as_secs_f64());
            if b.base() == 1600 * MS {
                b.reset();
            }
        }
        // Jittered, not constant: the ratios spread over most of (0.75, 1].
        let (lo, hi) = seen.iter().fold((1.0f64, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
        assert!(lo < 0.78 && hi > 0.97, "ratios {lo}..{hi}");
    }

    #[test]
    fn different_seeds_jitter_differently() {
        let mut a = Backoff::new(1000 * MS, 1000 * MS, 1);
        let mut b = Backoff::new(1000 * MS, 1000 * MS, 2);
        let (da, db): (Vec<_>, Vec<_>) = (0..8).map(|_| (a.next_delay(), b.next_delay())).unzip();
        assert_ne!(da, db);
    }

    #[test]
    fn backoff_resets_after_a_healthy_minute_only() {
        let mut b = Backoff::new(500 * MS, 30_000 * MS, 3);
        for _ in 0..4 {
            b.next_delay();
        }
        assert_eq!(b.base(), 8000 * MS);
        b.lost_after(Duration::from_secs(59));
        assert_eq!(b.base(), 8000 * MS, "a short connection keeps the backoff");
        b.lost_after(HEALTHY);
        assert_eq!(b.base(), 500 * MS);
        b.next_delay();
        b.reset();
        assert_eq!(b.base(), 500 * MS);
    }

    #[test]
    fn cap_below_initial_is_the_initial() {
        let b = Backoff::new(500 * MS, 100 * MS, 1);
        assert_eq!(b.base(), 500 * MS);
    }

    /// Drive a [`Retry`] against a camera whose port refuses until `back` and
    /// then answers (and whose stream opens from then on): when the stream
    /// reopens, and the (probes, attempts) made within the first `count_for`.
    fn simulate(r: &mut Retry, back: Duration, count_for: Duration) -> (Duration, u32, u32) {
        r.start();
        let (mut t, mut probes, mut opens) = (Duration::ZERO, 0, 0);
        loop {
            match r.next(t) {
                Step::Wait(d) => {
                    assert!(!d.is_zero());
                    t += d;
                }
                Step::Probe => {
                    probes += u32::from(t < count_for);
                    r.probed(t, t >= back);
                }
                Step::Open => {
                    opens += u32::from(t < count_for);
                    if t >= back {
                        return (t, probes, opens);
                    }
                    r.open_failed(t);
                }
            }
            assert!(t < Duration::from_secs(24 * 3600), "never reopened");
        }
    }

    fn retry(probe_ms: u64) -> Retry {
        Retry::new(Backoff::new(500 * MS, 30_000 * MS, 9), Some(Duration::from_millis(probe_ms)), 90_000 * MS)
    }

    #[test]
    fn a_camera_back_within_the_window_is_reopened_within_one_probe_interval() {
        for secs in [0.3, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 45.0, 60.0, 89.0] {
            let back = Duration::from_secs_f64(secs);
            let (at, ..) = simulate(&mut retry(250), back, Duration::ZERO);
            assert!(at >= back && at - back <= 250 * MS, "camera back at {back:?}, reopened at {at:?}");
        }
        // Without probes: only the backoff (a 5 s outage waits for the attempt at ~7.5 s).
        let mut r = Retry::new(Backoff::new(500 * MS, 30_000 * MS, 9), None, 90_000 * MS);
        let (at, probes, _) = simulate(&mut r, 5000 * MS, Duration::from_secs(3600));
        assert!(at - 5000 * MS > 500 * MS && probes == 0, "{at:?}, {probes} probes");
    }

    #[test]
    fn a_camera_that_stays_down_is_not_hammered() {
        let minute = Duration::from_secs(60);
        // Down for an hour: within the first minute one probe per interval and
        // the backoff's few attempts; after the window, no probes at all.
        let (_, probes, opens) = simulate(&mut retry(250), Duration::from_secs(3600), minute);
        assert!((235..=240).contains(&probes), "{probes} probes in the first minute");
        assert!(opens <= 8, "{opens} attempts in the first minute");
        let (_, probes_hour, opens_hour) = simulate(&mut retry(250), Duration::from_secs(3600), Duration::from_secs(3600));
        assert!(probes_hour <= 90 * 4 + 1, "{probes_hour} probes in an hour: probing ends with the window");
        // Attempts at most every 30 s (the cap, jittered down by a quarter) once the backoff is there.
        assert!(opens_hour <= 8 + 3600 / 22, "{opens_hour} attempts in an hour");
        // A camera back only after the window: the backoff's next attempt (at most the cap away).
        let back = Duration::from_secs(100);
        let (at, ..) = simulate(&mut retry(250), back, Duration::ZERO);
        assert!(at >= back && at - back <= 30_000 * MS, "{at:?}");
    }

    #[test]
    fn a_port_that_keeps_answering_keeps_attempts_on_the_backoff() {
        // A hung camera: its port accepts, its stream never opens.
        let mut r = retry(250);
        r.start();
        let (mut t, mut opens) = (Duration::ZERO, 0);
        while t < Duration::from_secs(60) {
            match r.next(t) {
                Step::Wait(d) => t += d,
                Step::Probe => r.probed(t, true),
                Step::Open => {
                    opens += 1;
                    // Each attempt waits out a 1 s connect timeout.
                    t += 1000 * MS;
                    r.open_failed(t);
                }
            }
        }
        assert!(opens <= 9, "{opens} attempts in a minute on a hung camera");
    }

    #[test]
    fn probe_address_takes_host_and_port_from_the_url() {
        let a = |u: &str| probe_address(u);
        assert_eq!(a("rtsp://127.0.0.1:18554/cam"), Some(("127.0.0.1".into(), 18554)));
        assert_eq!(a("rtsp://admin:p@ss:w0rd@cam.local/stream1"), Some(("cam.local".into(), 554)));
        assert_eq!(a("RTSPS://[fe80::1]:8322/x?y=1"), Some(("fe80::1".into(), 8322)));
        assert_eq!(a("rtsps://[::1]/x"), Some(("::1".into(), 322)));
        assert_eq!(a("rtsp://cam:/x"), Some(("cam".into(), 554)));
        assert_eq!(a("rtsp://cam:99999/x"), None);
        assert_eq!(a("http://cam/x"), None);
        assert_eq!(a("rtsp:///x"), None);
    }

    #[test]
    fn clock_follows_the_camera_and_never_goes_back() {
        let t0 = Instant::now();
        let mut c = Clock::new(t0);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // 90 kHz pts from an arbitrary start, frames every 66.7 ms.
        assert_eq!(c.stamp(Some(900_000), (1, 90_000), at(10)), 10);
        assert_eq!(c.stamp(Some(906_000), (1, 90_000), at(70)), 76);
        // Missing pts: the wall clock.
        assert_eq!(c.stamp(None, (1, 90_000), at(150)), 150);
        // A pts going back within the connection: still increasing.
        assert_eq!(c.stamp(Some(903_000), (1, 90_000), at(160)), 151);
        // A new connection starting at pts 0, 5 s later: anchored at the wall clock.
        c.new_connection();
        assert_eq!(c.stamp(Some(0), (1, 90_000), at(5160)), 5160);
        assert_eq!(c.stamp(Some(9000), (1, 90_000), at(5250)), 5260);
        // A camera clock jump (RTCP resync): re-anchored at the wall clock.
        assert_eq!(c.stamp(Some(9000 + 90_000 * 3600), (1, 90_000), at(5330)), 5330);
        // A zero time base does not divide by zero.
        assert_eq!(c.stamp(Some(5), (1, 0), at(5400)), 5400);
    }
}
