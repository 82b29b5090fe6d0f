//! Live results for subscribers (the API's server-sent events, gRPC streams).
//!
//! The runtime publishes each frame's and each event's JSON (the same JSON the
//! `ndjson` sink writes) as it reaches the first sink; every subscriber has its
//! own bounded buffer, filtered by stream. A subscriber that reads slowly never
//! slows the pipeline: when its buffer is full the oldest item goes, and the
//! drops are counted and handed to that subscriber before its next item.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What was published: a frame's results or a stream event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultKind {
    Frame,
    Event,
}

impl ResultKind {
    pub fn name(self) -> &'static str {
        match self {
            ResultKind::Frame => "frame",
            ResultKind::Event => "event",
        }
    }
}

/// One published item.
#[derive(Debug, Clone)]
pub struct Published {
    pub stream: Arc<str>,
    pub kind: ResultKind,
    /// The JSON text (one line).
    pub json: Arc<str>,
}

/// What a subscriber receives next.
#[derive(Debug, Clone)]
pub enum Delivery {
    Item(Published),
    /// This many items were dropped for this subscriber since the last report (its buffer was full).
    Dropped(u64),
}

struct Shared {
    /// Streams wanted (`None`: all).
    filter: Option<HashSet<String>>,
    /// Stream events only, no frames.
    events_only: bool,
    capacity: usize,
    queue: Mutex<VecDeque<Published>>,
    /// Items offered to this subscriber (all it would have had with room enough).
    offered: AtomicU64,
    /// Dropped for this subscriber, in all and already reported.
    dropped: AtomicU64,
    reported: AtomicU64,
    notify: tokio::sync::Notify,
}

impl Shared {
    fn wants(&self, stream: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| f.contains(stream))
    }

    fn takes(&self, stream: &str, kind: ResultKind) -> bool {
        self.wants(stream) && (kind == ResultKind::Event || !self.events_only)
    }
}

/// Where results are published and subscribed to.
pub struct ResultsHub {
    subs: Mutex<Vec<Weak<Shared>>>,
    capacity: usize,
    published: AtomicU64,
    /// Items dropped for slow subscribers, over all of them.
    dropped: AtomicU64,
}

impl std::fmt::Debug for ResultsHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResultsHub({} subscribers)", self.subscribers())
    }
}

/// Default per-subscriber buffer.
pub const DEFAULT_BUFFER: usize = 256;

impl ResultsHub {
    /// A hub whose subscribers each keep at most `capacity` items.
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(ResultsHub {
            subs: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
            published: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Shared>>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribe to `streams` (empty: every stream); dropping the [`Subscription`] ends it.
    pub fn subscribe(&self, streams: impl IntoIterator<Item = String>) -> Subscription {
        self.subscribe_to(streams, false)
    }

    /// [`ResultsHub::subscribe`], to stream events only when `events_only`.
    pub fn subscribe_to(&self, streams: impl IntoIterator<Item = String>, events_only: bool) -> Subscription {
        let filter: HashSet<String> = streams.into_iter().collect();
        let shared = Arc::new(Shared {
            filter: (!filter.is_empty()).then_some(filter),
            events_only,
            capacity: self.capacity,
            queue: Mutex::new(VecDeque::new()),
            offered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            reported: AtomicU64::new(0),
            notify: tokio::sync::Notify::new(),
        });
        let mut subs = self.lock();
        subs.retain(|w| w.strong_count() > 0);
        subs.push(Arc::downgrade(&shared));
        Subscription { shared }
    }

    /// Subscribers now.
    pub fn subscribers(&self) -> usize {
        self.lock().iter().filter(|w| w.strong_count() > 0).count()
    }

    /// Whether anyone wants `stream` (so that JSON is made only when it is read).
    pub fn wanted(&self, stream: &str) -> bool {
        self.lock().iter().filter_map(Weak::upgrade).any(|s| s.wants(stream))
    }

    /// Publish `json` (made only when a subscriber wants `stream`); never blocks on a subscriber.
    pub fn publish(&self, stream: &Arc<str>, kind: ResultKind, json: impl FnOnce() -> String) {
        let targets: Vec<Arc<Shared>> = self.lock().iter().filter_map(Weak::upgrade).filter(|s| s.takes(stream, kind)).collect();
        if targets.is_empty() {
            return;
        }
        self.published.fetch_add(1, Ordering::Relaxed);
        let item = Published { stream: stream.clone(), kind, json: Arc::from(json()) };
        for s in targets {
            s.offered.fetch_add(1, Ordering::Relaxed);
            let mut q = s.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() >= s.capacity {
                q.pop_front();
                s.dropped.fetch_add(1, Ordering::Relaxed);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            q.push_back(item.clone());
            drop(q);
            s.notify.notify_one();
        }
    }

    /// Each subscriber and the hub's totals, for the pipeline view.
    pub fn view(&self) -> ResultsView {
        let subscribers = self
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|s| SubscriberView {
                streams: s.filter.as_ref().map(|f| {
                    let mut v: Vec<String> = f.iter().cloned().collect();
                    v.sort();
                    v
                }),
                offered: s.offered.load(Ordering::Relaxed),
                dropped: s.dropped.load(Ordering::Relaxed),
                queued: s.queue.lock().unwrap_or_else(|e| e.into_inner()).len() as u64,
            })
            .collect();
        let (published, dropped) = self.counts();
        ResultsView { subscribers, published, dropped, buffer: self.capacity as u64 }
    }

    /// Items published (to at least one subscriber) and items dropped for slow subscribers, so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.published.load(Ordering::Relaxed), self.dropped.load(Ordering::Relaxed))
    }
}

/// One subscriber, as the pipeline view shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SubscriberView {
    /// The streams it asked for (`null`: all).
    pub streams: Option<Vec<String>>,
    /// Items meant for it, dropped for it (its buffer was full), and waiting in its buffer.
    pub offered: u64,
    pub dropped: u64,
    pub queued: u64,
}

/// The results hub, as the pipeline view shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ResultsView {
    pub subscribers: Vec<SubscriberView>,
    /// Items published to at least one subscriber, and dropped for slow ones, since the start.
    pub published: u64,
    pub dropped: u64,
    /// Each subscriber's buffer (`[pipeline] api.results_buffer`).
    pub buffer: u64,
}

/// One subscriber's end.
pub struct Subscription {
    shared: Arc<Shared>,
}

impl Subscription {
    /// The next delivery without waiting: drops not yet reported come first.
    pub fn try_next(&self) -> Option<Delivery> {
        let dropped = self.shared.dropped.load(Ordering::Relaxed);
        let reported = self.shared.reported.swap(dropped, Ordering::Relaxed);
        if dropped > reported {
            return Some(Delivery::Dropped(dropped - reported));
        }
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front().map(Delivery::Item)
    }

    /// The next delivery, waiting for one.
    pub async fn next(&self) -> Delivery {
        loop {
            let notified = self.shared.notify.notified();
            if let Some(d) = self.try_next() {
                return d;
            }
            notified.await;
        }
    }

    /// Items dropped for this subscriber so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_buffer_drops_the_oldest_and_reports_the_count() {
        let hub = ResultsHub::new(3);
        let sub = hub.subscribe(["a".to_string()]);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        for i in 0..5 {
            hub.publish(&a, ResultKind::Frame, || format!("{{\"seq\":{i}}}"));
            hub.publish(&b, ResultKind::Frame, || unreachable!("nobody wants b"));
        }
        assert!(matches!(sub.try_next(), Some(Delivery::Dropped(2))));
        let seqs: Vec<String> = std::iter::from_fn(|| sub.try_next())
            .map(|d| match d {
                Delivery::Item(p) => p.json.to_string(),
                Delivery::Dropped(n) => format!("dropped {n}"),
            })
            .collect();
        assert_eq!(seqs, ["{\"seq\":2}", "{\"seq\":3}", "{\"seq\":4}"]);
        assert_eq!(hub.counts(), (5, 2));
        drop(sub);
        assert_eq!(hub.subscribers(), 0);
    }
}
