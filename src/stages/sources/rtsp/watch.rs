//! Watching a connection: the watchdog and connect deadline FFmpeg's interrupt
//! callback reads ([`Watch`]), and the source's clock ([`Clock`]): frames
//! stamped in milliseconds since the source started, following the camera's
//! clock within a connection and never going backwards.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::runtime::Shutdown;

/// Shared with FFmpeg's interrupt callback: when the last sign of life was and
/// how much silence is allowed now.
#[derive(Debug)]
pub(super) struct Watch {
    pub(super) origin: Instant,
    /// ms since `origin` of the last sign of life (a connect started, a frame arrived).
    pub(super) last: AtomicU64,
    /// ms of silence allowed (the connect timeout while connecting, the watchdog while streaming).
    pub(super) limit: AtomicU64,
    /// The limit was hit.
    pub(super) fired: AtomicBool,
    /// Abort any blocked call at once (closing a lost connection).
    pub(super) closing: AtomicBool,
    /// The pipeline's stop flag, once the source runs.
    pub(super) shutdown: OnceLock<Arc<Shutdown>>,
}

impl Watch {
    pub(super) fn new() -> Self {
        Watch {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            fired: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            shutdown: OnceLock::new(),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// A sign of life.
    pub(super) fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Relaxed);
    }

    /// From now on allow `limit` of silence.
    pub(super) fn arm(&self, limit: Duration) {
        self.fired.store(false, Ordering::Relaxed);
        self.touch();
        self.limit.store(limit.as_millis() as u64, Ordering::Relaxed);
    }

    /// FFmpeg's question: abort the blocked call?
    pub(super) fn interrupted(&self) -> bool {
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
pub(super) struct Clock {
    pub(super) origin: Instant,
    /// (camera ms, our ms) at the anchor.
    pub(super) anchor: Option<(i64, i64)>,
    pub(super) last: Option<i64>,
}

pub(super) const MAX_DRIFT_MS: i64 = 2000;

impl Clock {
    pub(super) fn new(origin: Instant) -> Self {
        Clock { origin, anchor: None, last: None }
    }

    /// A new connection: its pts start anywhere.
    pub(super) fn new_connection(&mut self) {
        self.anchor = None;
    }

    /// A packet's time on the frames' timeline (event clips): the camera's
    /// `pts` from the connection's anchor, which the first packet sets when
    /// no frame has yet. Frames and packets so share one timeline.
    pub(super) fn map(&mut self, pts: i64, time_base: (i32, i32), now: Instant) -> i64 {
        let wall = now.saturating_duration_since(self.origin).as_millis() as i64;
        let (num, den) = time_base;
        let c = (pts as i128 * num as i128 * 1000 / den.max(1) as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let (c0, w0) = *self.anchor.get_or_insert((c, wall));
        w0.saturating_add(c.saturating_sub(c0))
    }

    pub(super) fn stamp(&mut self, pts: Option<i64>, time_base: (i32, i32), now: Instant) -> i64 {
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
