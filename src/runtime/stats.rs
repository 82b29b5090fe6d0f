//! Per-node counters and latency histograms, shared by the progress bar,
//! the end-of-run summary and the metrics endpoint.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
pub type StreamCounts = Vec<(Arc<str>, [u64; 4])>;

/// Per-stream counts in one infer stage: inferred, predicted, carried (the
/// [`crate::frame::WorkMode`] order), then carried while the boxes moved
/// ([`WORK_CARRIED_MOVED`]) and regions read again once wholly inside ([`WORK_REREAD`]).
pub type WorkCounts = Vec<(Arc<str>, [u64; 5])>;

/// Index in a [`WorkCounts`] row: frames carried in stretches after which the boxes had moved.
pub const WORK_CARRIED_MOVED: usize = 3;
/// Index in a [`WorkCounts`] row: regions cropped again because their track came wholly inside the picture.
pub const WORK_REREAD: usize = 4;

/// Ended streams still listed one by one (the most recent ones); older ended
/// streams are folded into [`FoldedStreams`]. A `dir` batch makes one stream
/// per file: without a bound, 100,000 files would mean 100,000 entries, and as
/// many metric series, for the whole run.
pub const LISTED_ENDED_STREAMS: usize = 256;

/// Streams that ended and were folded together: how many, and their counts summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldedStreams {
    pub streams: u64,
    pub counts: [u64; 4],
}

/// One node's per-stream counts: found by name in O(1); live streams are all
/// kept, ended ones beyond [`LISTED_ENDED_STREAMS`] are folded, oldest first.
#[derive(Debug, Default)]
pub struct StreamTable {
    /// Counts, and the mark of the stream's end (`None`: live).
    rows: HashMap<Arc<str>, ([u64; 4], Option<u64>)>,
    /// Ended streams in the order they ended, with their mark; a stream that
    /// came back to life (a late count, or a source starting it again) keeps
    /// its stale entry here, which is skipped when its turn comes.
    ended: VecDeque<(Arc<str>, u64)>,
    next_mark: u64,
    folded: FoldedStreams,
}

impl StreamTable {
    fn count(&mut self, stream: &Arc<str>, event: StreamEvent) {
        match self.rows.get_mut(stream) {
            Some((counts, end)) => {
                counts[event as usize] += 1;
                *end = None;
            }
            None => {
                let mut counts = [0; 4];
                counts[event as usize] = 1;
                self.rows.insert(stream.clone(), (counts, None));
            }
        }
    }

    fn end(&mut self, stream: &Arc<str>) {
        let Some(row) = self.rows.get_mut(stream) else { return };
        let mark = self.next_mark;
        self.next_mark += 1;
        row.1 = Some(mark);
        self.ended.push_back((stream.clone(), mark));
        while self.ended.len() > LISTED_ENDED_STREAMS {
            let (name, mark) = self.ended.pop_front().expect("longer than the limit");
            if self.rows.get(&name).is_some_and(|r| r.1 == Some(mark)) {
                let (counts, _) = self.rows.remove(&name).expect("present above");
                self.folded.streams += 1;
                for (sum, n) in self.folded.counts.iter_mut().zip(counts) {
                    *sum += n;
                }
            }
        }
    }
}

/// What one count of a line or zone is of: stream, line or zone, class
/// (its label when known), and `in` / `out` (lines) or `entered` / `left` (zones).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct CountKey {
    pub stream: Arc<str>,
    /// `line` or `zone`.
    pub kind: &'static str,
    pub name: Arc<str>,
    pub class: String,
    pub what: &'static str,
}

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
    /// `redact` stages: boxes redacted, and frames redacted whole (a detector failed or skipped them).
    pub redacted: [AtomicU64; 2],
    /// Frames the stage took out on purpose (a `python` stage's `"drop": true`).
    pub filtered: AtomicU64,
    pub decode_errors: AtomicU64,
    /// Stretches of corrupt input a source skipped (each logged once).
    pub corrupt_bursts: AtomicU64,
    pub busy_ns: AtomicU64,
    pub capacity: AtomicUsize,
    /// Frames put into its input queue (less those `drop_oldest` took back out).
    pub queued: AtomicU64,
    pub max_depth: AtomicUsize,
    pub done: AtomicBool,
    /// The same counts split by stream (bounded: see [`StreamTable`]).
    pub streams: Mutex<StreamTable>,
    /// Sources: times the stream was lost, reconnected, and the longest gap (ms).
    pub losses: AtomicU64,
    pub reconnects: AtomicU64,
    pub longest_gap_ms: AtomicU64,
    /// Sources: times a `restart = "always"` source played its input again.
    pub loops: AtomicU64,
    /// Sources: `/readyz` is not ready while this one's stream is lost.
    pub required: AtomicBool,
    /// A template of streams added at run time: no stream of its own.
    pub dynamic: AtomicBool,
    /// Sources: since when and why the stream is lost now (`None`: not lost).
    pub lost_now: Mutex<Option<(std::time::Instant, String)>>,
    /// Sources: the error its input failed with for good (set before `done`; `None`: a clean end).
    pub failure: Mutex<Option<String>>,
    /// Sources: why the input refuses this source for now (a camera refusing the
    /// credentials), while it goes on trying; shown as `failed` (`None`: not refused).
    pub refused: Mutex<Option<String>>,
    /// Sinks: frames a server output could not take (it was unreachable).
    pub undelivered: AtomicU64,
    /// Message-bus sinks: delivered, retried, spooled, spool bytes, latency, errors.
    pub delivery: std::sync::OnceLock<Arc<crate::bus::Delivery>>,
    /// `clips` sinks: the hub of packet rings and clips (`/metrics`, `/v1/clips`).
    pub clips: std::sync::OnceLock<Arc<super::clips::ClipHub>>,
    /// When this sink wrote its first frame.
    pub first_out: std::sync::OnceLock<std::time::Instant>,
    /// Batches formed, by size (index = size; batching stages only).
    pub batch_sizes: Mutex<Vec<u64>>,
    /// Stages: line crossings and zone entries and exits it raised, by line or zone, class and direction.
    pub counts: Mutex<std::collections::BTreeMap<CountKey, u64>>,
    /// Stages: tracks that ended (`track_ended` events it raised).
    pub tracks_ended: AtomicU64,
    /// Infer stages: frames per stream by what the model did (a [`WorkCounts`] row).
    pub work: Mutex<HashMap<Arc<str>, [u64; 5]>>,
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
            redacted: [AtomicU64::new(0), AtomicU64::new(0)],
            filtered: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            longest_gap_ms: AtomicU64::new(0),
            lost_now: Mutex::new(None),
            failure: Mutex::new(None),
            refused: Mutex::new(None),
            required: AtomicBool::new(true),
            dynamic: AtomicBool::new(false),
            loops: AtomicU64::new(0),
            undelivered: AtomicU64::new(0),
            delivery: std::sync::OnceLock::new(),
            clips: std::sync::OnceLock::new(),
            corrupt_bursts: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            capacity: AtomicUsize::new(0),
            queued: AtomicU64::new(0),
            max_depth: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            batch_sizes: Mutex::new(Vec::new()),
            first_out: std::sync::OnceLock::new(),
            streams: Mutex::new(StreamTable::default()),
            counts: Mutex::new(Default::default()),
            tracks_ended: AtomicU64::new(0),
            work: Mutex::new(HashMap::new()),
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
    pub fn stream(&self, stream: &Arc<str>, event: StreamEvent) {
        self.streams.lock().unwrap_or_else(|e| e.into_inner()).count(stream, event);
    }

    /// `stream` has ended (no frame of it is left anywhere): once more than
    /// [`LISTED_ENDED_STREAMS`] ended streams are listed, the oldest is folded.
    pub fn stream_ended(&self, stream: &Arc<str>) {
        self.streams.lock().unwrap_or_else(|e| e.into_inner()).end(stream);
    }

    /// A source's stream was lost or came back.
    pub fn stream_event(&self, kind: &crate::frame::EventKind) {
        let mut lost_now = self.lost_now.lock().unwrap_or_else(|e| e.into_inner());
        match kind {
            crate::frame::EventKind::Lost { reason } => {
                *lost_now = Some((std::time::Instant::now(), reason.clone()));
                self.losses.fetch_add(1, Ordering::Relaxed)
            }
            crate::frame::EventKind::Reconnected { gap_ms, .. } => {
                *lost_now = None;
                self.longest_gap_ms.fetch_max(*gap_ms, Ordering::Relaxed);
                self.reconnects.fetch_add(1, Ordering::Relaxed)
            }
            _ => 0,
        };
    }

    /// An event this stage raised: counted by line or zone, class and direction.
    pub fn stage_event(&self, e: &crate::frame::Event) {
        use crate::frame::EventKind;
        let (kind, name, track, what) = match &e.kind {
            EventKind::TrackEnded { .. } => {
                self.tracks_ended.fetch_add(1, Ordering::Relaxed);
                return;
            }
            EventKind::Crossed { line, track, direction, .. } => ("line", line, track, direction.name()),
            EventKind::Entered { zone, track, .. } => ("zone", zone, track, "entered"),
            EventKind::Left { zone, track, .. } => ("zone", zone, track, "left"),
            EventKind::Lost { .. } | EventKind::Reconnected { .. } | EventKind::Clip(_) | EventKind::Custom { .. } => return,
        };
        let key = CountKey { stream: e.stream.clone(), kind, name: name.clone(), class: track.class_name(), what };
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(0) += 1;
    }

    /// A snapshot of the line and zone counts, in key order.
    pub fn count_rows(&self) -> Vec<(CountKey, u64)> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// A snapshot of the per-stream counts still listed, by stream name.
    pub fn stream_counts(&self) -> StreamCounts {
        let t = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: StreamCounts = t.rows.iter().map(|(s, (c, _))| (s.clone(), *c)).collect();
        drop(t);
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The ended streams folded together (no longer in [`Self::stream_counts`]).
    pub fn folded_streams(&self) -> FoldedStreams {
        self.streams.lock().unwrap_or_else(|e| e.into_inner()).folded
    }

    /// An infer stage ran its model on a frame of `stream`, or skipped it.
    /// Streams beyond [`Self::WORK_STREAMS`] (a long `dir` batch) are summed under `*`.
    pub fn worked(&self, stream: &Arc<str>, mode: crate::frame::WorkMode) {
        self.add_work(stream, mode as usize, 1);
    }

    /// Add `n` to count `index` of a [`WorkCounts`] row of `stream`.
    pub fn add_work(&self, stream: &Arc<str>, index: usize, n: u64) {
        let mut w = self.work.lock().unwrap_or_else(|e| e.into_inner());
        let key = if w.len() >= Self::WORK_STREAMS && !w.contains_key(stream) { Arc::from("*") } else { stream.clone() };
        w.entry(key).or_default()[index] += n;
    }

    pub const WORK_STREAMS: usize = 1024;

    /// Frames per stream by what the model did, in stream order.
    pub fn work_counts(&self) -> WorkCounts {
        let mut v: Vec<_> = self.work.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(s, c)| (s.clone(), *c)).collect();
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        v
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeStats {
        NodeStats::new("det", "infer", Role::Stage)
    }

    fn total(n: &NodeStats) -> [u64; 4] {
        let mut t = n.folded_streams().counts;
        for (_, c) in n.stream_counts() {
            for (t, c) in t.iter_mut().zip(c) {
                *t += c;
            }
        }
        t
    }

    /// A long batch (one stream per file): the table stays bounded, the most
    /// recently ended streams stay listed, and no frame is lost from the sums.
    #[test]
    fn ended_streams_beyond_the_limit_are_folded_oldest_first() {
        let n = node();
        let files = 10_000u64;
        for i in 0..files {
            let s: Arc<str> = format!("file-{i:05}.mp4").into();
            for _ in 0..3 {
                n.stream(&s, StreamEvent::In);
                n.stream(&s, StreamEvent::Out);
            }
            n.stream(&s, StreamEvent::Failed);
            n.stream_ended(&s);
        }
        let listed = n.stream_counts();
        assert_eq!(listed.len(), LISTED_ENDED_STREAMS);
        let first_listed = files as usize - LISTED_ENDED_STREAMS;
        assert_eq!(&*listed[0].0, format!("file-{first_listed:05}.mp4"), "the most recent ones, in name order");
        assert!(listed.iter().all(|(_, c)| *c == [3, 3, 0, 1]));
        assert_eq!(
            n.folded_streams(),
            FoldedStreams { streams: files - LISTED_ENDED_STREAMS as u64, counts: [3 * 9744, 3 * 9744, 0, 9744] }
        );
        assert_eq!(total(&n), [3 * files, 3 * files, 0, files], "listed + folded = every count");
        assert!(n.streams.lock().unwrap().ended.len() <= LISTED_ENDED_STREAMS);
    }

    /// Streams that have not ended (cameras, a batch's files in progress) are
    /// never folded, however many ended streams pass by.
    #[test]
    fn live_streams_stay_listed() {
        let n = node();
        let cams: Vec<Arc<str>> = (0..300).map(|i| format!("cam{i}").into()).collect();
        for i in 0..2_000 {
            let s: Arc<str> = format!("file{i}").into();
            n.stream(&s, StreamEvent::In);
            n.stream_ended(&s);
            n.stream(&cams[i % cams.len()], StreamEvent::In);
        }
        let listed = n.stream_counts();
        assert_eq!(listed.len(), 300 + LISTED_ENDED_STREAMS);
        for c in &cams {
            assert!(listed.iter().any(|(s, _)| s == c), "{c} listed");
        }
        assert_eq!(total(&n)[0], 4_000);
    }

    /// A stream that counts again after its end (started again) is live again:
    /// its stale end is skipped, and it is folded only after it ends anew.
    #[test]
    fn a_stream_counted_after_its_end_is_live_again() {
        let n = node();
        let again: Arc<str> = "again".into();
        n.stream(&again, StreamEvent::In);
        n.stream_ended(&again);
        n.stream(&again, StreamEvent::In);
        for i in 0..LISTED_ENDED_STREAMS + 10 {
            let s: Arc<str> = format!("f{i}").into();
            n.stream(&s, StreamEvent::Out);
            n.stream_ended(&s);
        }
        assert!(n.stream_counts().iter().any(|(s, c)| *s == again && *c == [2, 0, 0, 0]), "still listed with both counts");
        assert_eq!(n.folded_streams().streams, 10);
        // An end of a stream never counted changes nothing.
        n.stream_ended(&Arc::from("never"));
        assert_eq!(n.folded_streams().streams, 10);
    }
}
