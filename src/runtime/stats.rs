//! Per-node counters and latency histograms, shared by the progress bar,
//! the end-of-run summary and the metrics endpoint.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::config::Role;

/// What happened to frames of one stream in one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    In,
    Out,
    Dropped,
    Failed,
}

/// Per-stream counts in one node: in, out, dropped, failed.
pub type StreamCounts = Vec<(std::sync::Arc<str>, [u64; 4])>;

/// Live statistics of one node.
#[derive(Debug)]
pub struct NodeStats {
    pub name: String,
    pub kind: &'static str,
    pub role: Role,
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    /// Frames its input queue dropped (drop_oldest / drop_newest).
    pub dropped: AtomicU64,
    pub failed: AtomicU64,
    pub decode_errors: AtomicU64,
    /// Stretches of corrupt input a source skipped (each logged once).
    pub corrupt_bursts: AtomicU64,
    pub busy_ns: AtomicU64,
    pub capacity: AtomicUsize,
    /// Frames put into its input queue (less those `drop_oldest` took back out).
    pub queued: AtomicU64,
    pub max_depth: AtomicUsize,
    pub done: AtomicBool,
    /// The same counts split by stream (a few streams: a short list).
    pub streams: Mutex<StreamCounts>,
    /// Sources: times the stream was lost, reconnected, and the longest gap (ms).
    pub losses: AtomicU64,
    pub reconnects: AtomicU64,
    pub longest_gap_ms: AtomicU64,
    /// When this sink wrote its first frame.
    pub first_out: std::sync::OnceLock<std::time::Instant>,
    /// Batches formed, by size (index = size; batching stages only).
    pub batch_sizes: Mutex<Vec<u64>>,
    /// Time spent on each frame, µs.
    pub service: Mutex<Histogram<u64>>,
    /// Source to this sink, µs (sinks only).
    pub end_to_end: Mutex<Histogram<u64>>,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl NodeStats {
    pub fn new(name: &str, kind: &'static str, role: Role) -> Self {
        NodeStats {
            name: name.to_string(),
            kind,
            role,
            frames_in: AtomicU64::new(0),
            frames_out: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            longest_gap_ms: AtomicU64::new(0),
            corrupt_bursts: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            capacity: AtomicUsize::new(0),
            queued: AtomicU64::new(0),
            max_depth: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            batch_sizes: Mutex::new(Vec::new()),
            first_out: std::sync::OnceLock::new(),
            streams: Mutex::new(Vec::new()),
            service: Mutex::new(hist()),
            end_to_end: Mutex::new(hist()),
        }
    }

    pub fn set_capacity(&self, cap: usize) {
        self.capacity.store(cap, Ordering::Relaxed);
    }

    /// A frame arrived; `depth` frames still wait behind it.
    pub fn frame_in(&self, depth: usize) {
        self.frames_in.fetch_add(1, Ordering::Relaxed);
        self.max_depth.fetch_max(depth, Ordering::Relaxed);
    }

    /// Frames in its input queue now: put in and not yet taken out. Exact when
    /// the queue is still; while frames move it may lag by the ones in hand-over.
    pub fn depth(&self) -> u64 {
        let taken = self.frames_in.load(Ordering::Relaxed);
        // Wrapping: with fan-in, `drop_oldest` may take a frame out before its producer counted it in.
        (self.queued.load(Ordering::Relaxed).wrapping_sub(taken) as i64).max(0) as u64
    }

    /// A frame taken from the input queue (`depth` still waiting).
    pub fn took(&self, frame: &crate::frame::Frame, depth: usize) {
        self.frame_in(depth);
        self.stream(&frame.stream, StreamEvent::In);
    }

    /// A frame passed on (sinks: written).
    pub fn passed(&self, frame: &crate::frame::Frame) {
        self.frames_out.fetch_add(1, Ordering::Relaxed);
        self.stream(&frame.stream, StreamEvent::Out);
    }

    /// A frame failed here; returns the node's failures so far.
    pub fn failed_on(&self, frame: &crate::frame::Frame) -> u64 {
        self.stream(&frame.stream, StreamEvent::Failed);
        self.failed.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Count one frame of `stream`.
    pub fn stream(&self, stream: &std::sync::Arc<str>, event: StreamEvent) {
        let mut v = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        // Newest streams last: a batch's current files are found first.
        let i = match v.iter().rposition(|(s, _)| std::sync::Arc::ptr_eq(s, stream) || s == stream) {
            Some(i) => i,
            None => {
                v.push((stream.clone(), [0; 4]));
                v.len() - 1
            }
        };
        v[i].1[event as usize] += 1;
    }

    /// A source's stream was lost or came back.
    pub fn stream_event(&self, kind: &crate::frame::EventKind) {
        match kind {
            crate::frame::EventKind::Lost { .. } => self.losses.fetch_add(1, Ordering::Relaxed),
            crate::frame::EventKind::Reconnected { gap_ms, .. } => {
                self.longest_gap_ms.fetch_max(*gap_ms, Ordering::Relaxed);
                self.reconnects.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    /// A snapshot of the per-stream counts.
    pub fn stream_counts(&self) -> StreamCounts {
        self.streams.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A batch of `n` frames was formed.
    pub fn batch_formed(&self, n: usize) {
        let mut b = self.batch_sizes.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() <= n {
            b.resize(n + 1, 0);
        }
        b[n] += 1;
    }

    pub fn add_busy(&self, d: Duration) {
        self.busy_ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// One frame handled in `service`; sinks also pass the end-to-end latency.
    pub fn record(&self, service: Duration, e2e: Option<Duration>) {
        self.add_busy(service);
        let us = |d: Duration| (d.as_micros() as u64).clamp(1, 3_600_000_000);
        if let Ok(mut h) = self.service.lock() {
            let _ = h.record(us(service));
        }
        if let Some(d) = e2e
            && let Ok(mut h) = self.end_to_end.lock()
        {
            let _ = h.record(us(d));
        }
    }

    pub fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }
}
