//! Event clips, the runtime's side: each stream's ring of compressed video
//! packets ([`PacketRing`]: the last seconds of the source's own packets,
//! purged by whole GOPs so it always starts on a keyframe, bounded in bytes),
//! and the [`ClipHub`] the sources and `clips` sinks of one pipeline share:
//! the rings by stream, the clips written (for `/v1/clips`), the counters for
//! `/metrics`, and the way a closed clip's event reaches every other sink.
//! Rings exist only when the pipeline has a `clips` sink.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crossbeam_channel::Sender;

use super::Msg;
use super::results::{ResultKind, ResultsHub};
use crate::backend::ffmpeg::{StreamParams, TappedPacket};
use crate::frame::Event;

/// The most bytes one stream's ring holds, whatever its `pre_s` asks: a
/// stream past it loses its oldest GOPs (counted) rather than memory growing.
pub const RING_MAX_BYTES: usize = 64 << 20;

/// Seconds of slack on top of `pre_s` and one GOP: the frames queued between
/// the source and the clips sink (the sink sees an event that much later).
const LAG_S: f64 = 1.0;

/// One packet in a ring, with its times on the stream's timeline (the time
/// base of the stream's frames, so that a frame's `pts` finds its packets).
pub struct RingPacket {
    pub packet: TappedPacket,
    pub pts: i64,
    pub dts: i64,
    pub duration: i64,
    pub key: bool,
    /// The connection this packet came over (a camera that came back starts a new one).
    pub epoch: u64,
    /// The demuxer gave no presentation timestamp (`pts` is the dts): an AVI's B-frames.
    pub no_pts: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct RingInner {
    packets: VecDeque<Arc<RingPacket>>,
    /// The absolute index of `packets[0]` (indices never repeat).
    first: u64,
    /// Absolute indices of the keyframes held.
    keys: VecDeque<u64>,
    bytes: usize,
    params: Option<StreamParams>,
    /// The timeline's time base.
    time_base: (i32, i32),
    epoch: u64,
    /// The newest frame time each clips sink has seen (by sink number).
    seen: BTreeMap<usize, i64>,
    /// The oldest packet each clips sink's open clip still needs (absolute index).
    holds: BTreeMap<usize, u64>,
}

/// One stream's packets for the last `keep_s` seconds (and the GOP reaching
/// back past them), up to [`RING_MAX_BYTES`].
pub struct PacketRing {
    pub stream: Arc<str>,
    keep_s: f64,
    max_bytes: usize,
    inner: Mutex<RingInner>,
    /// Bytes held now (for `/metrics`).
    pub bytes: AtomicU64,
    /// GOPs dropped to stay within the byte bound while a clip or the pre-roll needed them.
    pub overflows: AtomicU64,
}

/// Packets taken from a ring for a clip.
pub struct Taken {
    pub packets: Vec<Arc<RingPacket>>,
    /// The absolute index after the last one taken.
    pub next: u64,
    /// Packets that were purged before they could be taken (the ring overflowed).
    pub missed: u64,
}

impl PacketRing {
    /// A ring of a clips sink's own (annotated clips: the packets it encodes), outside the hub.
    pub fn standalone(stream: Arc<str>, keep_s: f64) -> Self {
        Self::new(stream, keep_s, RING_MAX_BYTES)
    }

    fn new(stream: Arc<str>, keep_s: f64, max_bytes: usize) -> Self {
        PacketRing {
            stream,
            keep_s,
            max_bytes,
            inner: Mutex::new(RingInner {
                packets: VecDeque::new(),
                first: 0,
                keys: VecDeque::new(),
                bytes: 0,
                params: None,
                time_base: (1, 1000),
                epoch: 0,
                seen: BTreeMap::new(),
                holds: BTreeMap::new(),
            }),
            bytes: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
        }
    }

    /// A (new) connection or input: its codec parameters and the timeline's
    /// time base. Packets after it belong to a new epoch.
    pub fn start(&self, params: Option<StreamParams>, time_base: (i32, i32)) {
        let mut r = lock(&self.inner);
        r.params = params;
        r.time_base = time_base;
        r.epoch += 1;
    }

    /// The current epoch (packets pushed now carry it).
    pub fn epoch(&self) -> u64 {
        lock(&self.inner).epoch
    }

    /// The codec parameters and the timeline's time base.
    pub fn params(&self) -> (Option<StreamParams>, (i32, i32)) {
        let r = lock(&self.inner);
        (r.params.clone(), r.time_base)
    }

    /// Add the newest packet, then drop the GOPs no longer needed.
    pub fn push(&self, p: RingPacket) {
        let mut r = lock(&self.inner);
        let size = p.packet.size();
        let abs = r.first + r.packets.len() as u64;
        if p.key {
            r.keys.push_back(abs);
        }
        r.bytes += size;
        let newest = p.pts;
        r.packets.push_back(Arc::new(p));
        self.purge(&mut r, newest);
        self.bytes.store(r.bytes as u64, Ordering::Relaxed);
    }

    fn purge(&self, r: &mut RingInner, newest: i64) {
        let (num, den) = r.time_base;
        let keep = (self.keep_s + LAG_S) * den as f64 / num.max(1) as f64;
        // Up to where the pre-roll of an event now or still to come at the sinks reaches.
        let reached = r.seen.values().copied().min().map_or(newest, |s| s.min(newest));
        let horizon = reached as f64 - keep;
        let hold = r.holds.values().copied().min();
        loop {
            // The GOP at the front ends where the next keyframe starts.
            let next_key = r.keys.iter().copied().find(|&k| k > r.first);
            let Some(k2) = next_key else { break };
            let k2_pts = r.packets[(k2 - r.first) as usize].pts;
            let over = r.bytes > self.max_bytes;
            let old = (k2_pts as f64) <= horizon && hold.is_none_or(|h| h >= k2);
            if !(over || old) {
                break;
            }
            if over && !old {
                self.overflows.fetch_add(1, Ordering::Relaxed);
            }
            while r.first < k2 {
                if let Some(p) = r.packets.pop_front() {
                    r.bytes -= p.packet.size();
                }
                r.first += 1;
            }
            while r.keys.front().is_some_and(|&k| k < r.first) {
                r.keys.pop_front();
            }
        }
    }

    /// Clips sink `sink` has seen frames up to `pts` of this stream.
    pub fn seen(&self, sink: usize, pts: i64) {
        lock(&self.inner).seen.insert(sink, pts);
    }

    /// Where a clip starting at `t` starts: the last keyframe at or before
    /// `t` (else the oldest keyframe held). Its absolute index and pts.
    pub fn start_at(&self, t: i64) -> Option<(u64, i64)> {
        let r = lock(&self.inner);
        let pts_of = |k: u64| r.packets[(k - r.first) as usize].pts;
        let at = r.keys.iter().rev().copied().find(|&k| pts_of(k) <= t).or_else(|| r.keys.front().copied())?;
        Some((at, pts_of(at)))
    }

    /// Keep packets from `from` on for clips sink `sink` (`None`: it needs none now).
    pub fn hold(&self, sink: usize, from: Option<u64>) {
        let mut r = lock(&self.inner);
        match from {
            Some(f) => r.holds.insert(sink, f),
            None => r.holds.remove(&sink),
        };
    }

    /// The packets from absolute index `from` on, in decode order, up to the
    /// first whose dts is past `until` (all held when `None`).
    pub fn take(&self, from: u64, until: Option<i64>) -> Taken {
        let r = lock(&self.inner);
        let missed = r.first.saturating_sub(from);
        let start = from.max(r.first);
        let mut packets = Vec::new();
        let mut next = start;
        for p in r.packets.iter().skip((start - r.first) as usize) {
            if until.is_some_and(|u| p.dts > u) {
                break;
            }
            packets.push(p.clone());
            next += 1;
        }
        Taken { packets, next, missed }
    }

    /// The newest packet's dts, when any is held.
    pub fn newest_dts(&self) -> Option<i64> {
        lock(&self.inner).packets.back().map(|p| p.dts)
    }
}

/// A clip written (listed by `/v1/clips`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClipRecord {
    pub id: u64,
    pub sink: String,
    pub stream: String,
    #[serde(skip)]
    pub path: PathBuf,
    /// The path as the pipeline named it.
    #[serde(rename = "path")]
    pub shown: String,
    pub start_pts: f64,
    pub end_pts: f64,
    pub frames: u64,
    pub bytes: u64,
    pub at_ms: u64,
}

/// Counters of one `clips` sink (`/metrics`).
#[derive(Debug, Default)]
pub struct ClipCounts {
    pub written: AtomicU64,
    pub failed: AtomicU64,
    pub deleted: AtomicU64,
    pub deleted_bytes: AtomicU64,
    /// Bytes of this sink's clips on disk now.
    pub bytes: AtomicU64,
}

/// What the sources and clips sinks of one pipeline share.
pub struct ClipHub {
    keep_s: f64,
    /// Held by the sources (and the clips sinks, while their stream runs):
    /// a stream removed at run time takes its ring with it.
    rings: Mutex<BTreeMap<String, Weak<PacketRing>>>,
    /// Every sink's queue but the clips sinks': where a clip's event goes.
    announce: Mutex<Option<Vec<Sender<Msg>>>>,
    /// The live results feed, when a clips sink is the one that publishes it.
    results: Mutex<Option<Arc<ResultsHub>>>,
    /// Clips sinks still running: the queues are let go when the last is done.
    running: AtomicUsize,
    clips: Mutex<Vec<ClipRecord>>,
    next_id: AtomicU64,
    counts: Mutex<BTreeMap<String, Arc<ClipCounts>>>,
}

impl std::fmt::Debug for ClipHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClipHub({} rings)", lock(&self.rings).len())
    }
}

impl ClipHub {
    /// For a pipeline whose clips sinks need `keep_s` seconds before an event (their largest `pre_s`).
    pub fn new(keep_s: f64) -> Arc<Self> {
        Arc::new(ClipHub {
            keep_s,
            rings: Mutex::new(BTreeMap::new()),
            announce: Mutex::new(None),
            results: Mutex::new(None),
            running: AtomicUsize::new(0),
            clips: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            counts: Mutex::new(BTreeMap::new()),
        })
    }

    /// The ring of `stream` (made on first ask; again once the last holder
    /// let the old one go, as for a stream added again after its removal).
    pub fn ring(&self, stream: &str) -> Arc<PacketRing> {
        let mut rings = lock(&self.rings);
        if let Some(r) = rings.get(stream).and_then(Weak::upgrade) {
            return r;
        }
        let r = Arc::new(PacketRing::new(Arc::from(stream), self.keep_s, RING_MAX_BYTES));
        rings.insert(stream.to_string(), Arc::downgrade(&r));
        r
    }

    /// The ring of `stream`, if its source keeps one.
    pub fn find_ring(&self, stream: &str) -> Option<Arc<PacketRing>> {
        lock(&self.rings).get(stream).and_then(Weak::upgrade)
    }

    /// Every ring still held, by stream (the ones let go are forgotten).
    pub fn rings(&self) -> Vec<Arc<PacketRing>> {
        let mut rings = lock(&self.rings);
        rings.retain(|_, r| r.strong_count() > 0);
        rings.values().filter_map(Weak::upgrade).collect()
    }

    /// A clips sink's counters (made on first ask).
    pub fn counts(&self, sink: &str) -> Arc<ClipCounts> {
        lock(&self.counts).entry(sink.to_string()).or_default().clone()
    }

    /// Every clips sink's counters, by sink.
    pub fn all_counts(&self) -> Vec<(String, Arc<ClipCounts>)> {
        lock(&self.counts).iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// The run starts: where clip events go (the other sinks' queues), how
    /// many clips sinks run, and the live feed when a clips sink publishes it.
    pub(super) fn connect(&self, queues: Vec<Sender<Msg>>, clips_sinks: usize, results: Option<Arc<ResultsHub>>) {
        *lock(&self.announce) = Some(queues);
        *lock(&self.results) = results;
        self.running.store(clips_sinks, Ordering::Release);
    }

    /// A clips sink has finished: after the last, the other sinks' queues are let go (so they can end).
    pub(super) fn sink_done(&self) {
        if self.running.fetch_sub(1, Ordering::AcqRel) <= 1 {
            lock(&self.announce).take();
        }
    }

    /// Send a closed clip's event to every other sink (and the live feed), and list it.
    pub fn announce(&self, event: Event, record: ClipRecord) {
        let event = Arc::new(event);
        if let Some(queues) = lock(&self.announce).as_ref() {
            for q in queues {
                let _ = q.send(Msg::Event(event.clone()));
            }
        }
        if let Some(hub) = lock(&self.results).as_ref() {
            hub.publish(&event.stream, ResultKind::Event, || event.to_json().to_string());
        }
        lock(&self.clips).push(record);
    }

    /// The clips written and still on disk, oldest first.
    pub fn list(&self) -> Vec<ClipRecord> {
        lock(&self.clips).clone()
    }

    /// A new clip id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A clip was deleted (retention): no longer listed.
    pub fn forget(&self, path: &std::path::Path) {
        lock(&self.clips).retain(|c| c.path != path);
    }
}
