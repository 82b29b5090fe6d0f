//! One stream as the control handle keeps it ([`StreamSlot`]): its identity,
//! restart policy and stop flag, and the state the API shows
//! ([`StreamState`]), read from the stream's counters and what its worker
//! recorded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{NodeStats, Shutdown};
use crate::config::Restart;
use crate::frame::InputEnd;

/// A stream's state, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    /// Added, not delivering yet (connecting).
    Starting,
    Running,
    /// Down for less than a second.
    Lost,
    /// Down, trying again.
    Reconnecting,
    /// Asked to stop: its frames in flight drain.
    Stopping,
    Ended,
    Failed,
}

#[derive(Debug, Default)]
pub(crate) struct SlotState {
    /// Set once the stream's worker is done (`ended` or `failed`).
    pub(crate) terminal: Option<StreamState>,
    pub(crate) last_error: Option<String>,
    /// Every frame of it settled and every sink closed it (`complete`: without error).
    pub(crate) flushed: Option<(InputEnd, bool)>,
    /// (when, frames) of the last rate sample, and the rate.
    pub(crate) rate: Option<(Instant, u64, f64)>,
}

/// One stream (added, or a source of the file) as the control handle keeps it.
pub struct StreamSlot {
    pub id: Arc<str>,
    pub source: String,
    pub dynamic: bool,
    /// The input, credentials masked.
    pub shown: String,
    pub required: bool,
    pub stats: Arc<NodeStats>,
    pub(crate) restart: (Restart, Option<u32>, Duration),
    pub(crate) stop: Arc<Shutdown>,
    pub(crate) removing: AtomicBool,
    /// Its worker thread is done and its source (decoder, threads, pools) dropped.
    pub(crate) exited: AtomicBool,
    pub(crate) state: Mutex<SlotState>,
    pub(crate) added: Instant,
    /// When its first result reached a sink (set once its input is open).
    pub(crate) first_result: std::sync::OnceLock<Arc<std::sync::OnceLock<Instant>>>,
}

impl StreamSlot {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn stop(&self) {
        self.stop.stop();
    }
    pub(crate) fn stop_flag(&self) -> Arc<Shutdown> {
        self.stop.clone()
    }
    pub(crate) fn failed(&self, reason: String) {
        let mut s = self.lock();
        s.terminal = Some(StreamState::Failed);
        s.last_error = Some(crate::config::mask_credentials(&reason).into_owned());
    }
    pub(crate) fn exited(&self) {
        self.exited.store(true, Ordering::Release);
    }
    pub(crate) fn worker_done(&self) {
        self.lock().terminal.get_or_insert(StreamState::Ended);
    }
    pub(crate) fn flushed(&self, end: &InputEnd, ok: bool) {
        let mut s = self.lock();
        s.terminal.get_or_insert(StreamState::Ended);
        s.flushed = Some((end.clone(), ok));
    }
    /// Every frame of the stream settled and its outputs closed.
    pub fn is_flushed(&self) -> bool {
        self.lock().flushed.is_some()
    }

    pub(crate) fn state(&self) -> StreamState {
        // Refused (a camera refusing the credentials): failed, while the source goes on trying (and when it stopped so).
        if self.stats.refused.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            return StreamState::Failed;
        }
        let s = self.lock();
        if let Some(t) = s.terminal {
            return t;
        }
        drop(s);
        if !self.dynamic && self.stats.done.load(Ordering::Acquire) {
            // A source of the file: `failed` when its input failed for good, `ended` at a clean end.
            let failed = self.stats.failure.lock().unwrap_or_else(|e| e.into_inner()).is_some();
            return if failed { StreamState::Failed } else { StreamState::Ended };
        }
        if self.removing.load(Ordering::Acquire) {
            return StreamState::Stopping;
        }
        if let Some((at, _)) = &*self.stats.lost_now.lock().unwrap_or_else(|e| e.into_inner()) {
            return if at.elapsed() < Duration::from_secs(1) { StreamState::Lost } else { StreamState::Reconnecting };
        }
        if self.stats.frames_out.load(Ordering::Relaxed) == 0 { StreamState::Starting } else { StreamState::Running }
    }

    /// Frames per second over the last second or so (since it started, at first).
    pub(crate) fn fps(&self) -> f64 {
        let frames = self.stats.frames_out.load(Ordering::Relaxed);
        let now = Instant::now();
        let mut s = self.lock();
        match s.rate {
            Some((t, _, fps)) if now - t < Duration::from_secs(1) => fps,
            Some((t, n, _)) => {
                let fps = (frames - n.min(frames)) as f64 / (now - t).as_secs_f64();
                s.rate = Some((now, frames, fps));
                fps
            }
            None => {
                let fps = frames as f64 / (now - self.added).as_secs_f64().max(1e-3);
                s.rate = Some((now, frames, fps));
                fps
            }
        }
    }
}
