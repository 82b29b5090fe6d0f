//! Live pictures for viewers (the API's MJPEG stream and snapshot): a tap on
//! one sink's frames, encoded to JPEG only while someone watches.
//!
//! The sink thread only [`LiveHub::offer`]s its frame: with no viewer of the
//! stream that is one atomic load; with viewers, and when the viewer rate's
//! interval has passed, the picture and its results (shared, not copied) are
//! left in the stream's one-place slot, replacing one not yet encoded. One
//! encoder thread (owned here) renders each picture once — by the renderer
//! handed in with [`LiveHub::set_renderer`], which draws the results and
//! makes the JPEG — and gives it to every viewer of that stream: 20 viewers
//! cost one encode; a viewer that has stopped reading (its buffer full for
//! [`STALLED_AFTER`]) costs none. The encoder thread runs at a lower priority than the
//! pipeline's (nice +10): when the CPU is short, viewers wait. Each viewer has a bounded buffer of [`VIEWER_BUFFER`]
//! pictures; a viewer that does not read loses its oldest, counted, and
//! never slows the pipeline or another viewer.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::frame::{Attached, Image};

/// Pictures kept for a viewer that is slow to read; beyond it the oldest go.
pub const VIEWER_BUFFER: usize = 2;
/// A viewer whose buffer has stayed full this long has stopped reading: no
/// picture is encoded for it alone (its missed pictures are counted as
/// dropped) until it reads again.
pub const STALLED_AFTER: Duration = Duration::from_secs(2);
/// The viewer rate when a viewer asks for none (frames a second).
pub const DEFAULT_FPS: f64 = 5.0;
/// How much lower the encoder thread's priority is than the pipeline's (a nice value).
pub const ENCODER_NICE: i32 = 10;
/// The highest viewer rate when the pipeline sets none (`api.live_fps`).
pub const DEFAULT_MAX_FPS: f64 = 15.0;

/// What the renderer draws: a frame's picture (redacted, when the pipeline redacts) and its results.
#[derive(Clone)]
pub struct Still {
    pub stream: Arc<str>,
    pub seq: u64,
    pub image: Arc<Image>,
    pub results: Vec<Attached>,
}

/// Draws a still's results and encodes it (JPEG bytes); runs on the encoder thread only.
pub type Renderer = Box<dyn FnMut(&Still) -> Result<Vec<u8>, String> + Send>;

/// One encoded picture.
#[derive(Debug, Clone)]
pub struct Picture {
    pub seq: u64,
    pub jpeg: Arc<[u8]>,
    pub at: Instant,
}

struct ViewerShared {
    /// The least time between two pictures this viewer gets.
    interval: Duration,
    queue: Mutex<VecDeque<Picture>>,
    last: Mutex<Option<Instant>>,
    dropped: AtomicU64,
    /// Since when its buffer has been full without a read (`None`: it reads).
    full_since: Mutex<Option<Instant>>,
    notify: tokio::sync::Notify,
}

impl ViewerShared {
    /// Full for longer than `after`: the viewer has stopped reading.
    fn stalled(&self, now: Instant, after: Duration) -> bool {
        self.full_since.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|t| now.duration_since(t) > after)
    }

    fn pop(&self) -> Option<Picture> {
        let p = self.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        if p.is_some() {
            *self.full_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        p
    }
}

#[derive(Default)]
struct Tap {
    viewers: Vec<Weak<ViewerShared>>,
    /// When a still was last taken (the rate is the fastest viewer's).
    last_taken: Option<Instant>,
    pending: Option<Still>,
    latest: Option<Picture>,
}

impl Tap {
    fn live(&mut self) -> Vec<Arc<ViewerShared>> {
        self.viewers.retain(|w| w.strong_count() > 0);
        self.viewers.iter().filter_map(Weak::upgrade).collect()
    }
}

struct Inner {
    taps: Mutex<HashMap<Arc<str>, Tap>>,
    wake: Condvar,
    /// Viewers of all streams (the no-viewer fast path reads only this).
    viewers: AtomicUsize,
    /// The highest viewer rate (an `f64`'s bits).
    max_fps: AtomicU64,
    encoded: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    renderer: Mutex<Option<Renderer>>,
    started: std::sync::Once,
    /// A viewer whose buffer stays full this long has stopped reading.
    stalled_after: Duration,
}

/// The live pictures of every stream; see the module's documentation.
#[derive(Clone)]
pub struct LiveHub(Arc<Inner>);

impl std::fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveHub({} viewers)", self.0.viewers.load(Ordering::Relaxed))
    }
}

/// Viewers, pictures encoded and dropped, for the pipeline view.
#[derive(Debug, Clone, Serialize)]
pub struct LiveView {
    pub viewers: usize,
    pub max_fps: f64,
    pub encoded: u64,
    /// Pictures the renderer failed on.
    pub failed: u64,
    /// Pictures dropped for viewers that read slowly, over all of them.
    pub dropped: u64,
}

/// One viewer's end: dropping it stops its pictures (and, with the last viewer of a stream, the encoding).
pub struct Viewer {
    shared: Arc<ViewerShared>,
    hub: Weak<Inner>,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        if let Some(h) = self.hub.upgrade() {
            h.viewers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Viewer {
    /// The next picture without waiting.
    pub fn try_next(&self) -> Option<Picture> {
        self.shared.pop()
    }

    /// The next picture, waiting for one.
    pub async fn next(&self) -> Picture {
        loop {
            let notified = self.shared.notify.notified();
            if let Some(p) = self.try_next() {
                return p;
            }
            notified.await;
        }
    }

    /// Pictures dropped for this viewer so far (its buffer was full).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl LiveHub {
    /// A hub whose viewers may ask for at most `max_fps` pictures a second.
    pub fn new(max_fps: f64) -> Self {
        Self::with_stall(max_fps, STALLED_AFTER)
    }

    fn with_stall(max_fps: f64, stalled_after: Duration) -> Self {
        let max_fps = if max_fps.is_finite() && max_fps > 0.0 { max_fps } else { DEFAULT_MAX_FPS };
        LiveHub(Arc::new(Inner {
            taps: Mutex::new(HashMap::new()),
            wake: Condvar::new(),
            viewers: AtomicUsize::new(0),
            max_fps: AtomicU64::new(max_fps.to_bits()),
            encoded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            renderer: Mutex::new(None),
            started: std::sync::Once::new(),
            stalled_after,
        }))
    }

    pub fn max_fps(&self) -> f64 {
        f64::from_bits(self.0.max_fps.load(Ordering::Relaxed))
    }

    /// The highest rate a viewer may ask for (`[pipeline] api.live_fps`).
    pub fn set_max_fps(&self, fps: f64) {
        if fps.is_finite() && fps > 0.0 {
            self.0.max_fps.store(fps.to_bits(), Ordering::Relaxed);
        }
    }

    /// What draws and encodes the pictures; until it is set, viewers get none.
    pub fn set_renderer(&self, r: Renderer) {
        *self.0.renderer.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        self.0.started.call_once(|| {
            let weak = Arc::downgrade(&self.0);
            let _ = std::thread::Builder::new().name("live-encode".into()).spawn(move || encode_loop(weak));
        });
    }

    fn taps(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Tap>> {
        self.0.taps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watch `stream` at `fps` pictures a second (capped at the hub's highest).
    pub fn watch(&self, stream: &str, fps: f64) -> Viewer {
        let max = self.max_fps();
        let fps = if fps.is_finite() && fps > 0.0 { fps.min(max) } else { DEFAULT_FPS.min(max) };
        let shared = Arc::new(ViewerShared {
            interval: Duration::from_secs_f64(1.0 / fps),
            queue: Mutex::new(VecDeque::with_capacity(VIEWER_BUFFER)),
            last: Mutex::new(None),
            dropped: AtomicU64::new(0),
            full_since: Mutex::new(None),
            notify: tokio::sync::Notify::new(),
        });
        let mut taps = self.taps();
        taps.retain(|_, t| t.viewers.iter().any(|w| w.strong_count() > 0) || t.latest.is_some());
        taps.entry(Arc::from(stream)).or_default().viewers.push(Arc::downgrade(&shared));
        self.0.viewers.fetch_add(1, Ordering::Relaxed);
        Viewer { shared, hub: Arc::downgrade(&self.0) }
    }

    /// The latest picture of `stream`, if one was encoded within `fresh`.
    pub fn latest(&self, stream: &str, fresh: Duration) -> Option<Picture> {
        self.taps().get(stream).and_then(|t| t.latest.clone()).filter(|p| p.at.elapsed() <= fresh)
    }

    /// Forget a stream that was removed (its last picture too).
    pub fn forget(&self, stream: &str) {
        self.taps().remove(stream);
    }

    /// A sink's frame: taken when someone watches its stream and the viewer rate allows; never waits for a viewer.
    pub fn offer(&self, stream: &Arc<str>, seq: u64, image: Option<&Arc<Image>>, results: &[Attached]) {
        if self.0.viewers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(image) = image else { return };
        let mut taps = self.taps();
        let Some(tap) = taps.get_mut(stream) else { return };
        let viewers = tap.live();
        let Some(fastest) = viewers.iter().map(|v| v.interval).min() else { return };
        let now = Instant::now();
        if tap.last_taken.is_some_and(|t| now.duration_since(t) < fastest) {
            return;
        }
        tap.last_taken = Some(now);
        // Viewers that stopped reading: no encode for them alone; what they miss is counted.
        if viewers.iter().all(|v| v.stalled(now, self.0.stalled_after)) {
            for v in &viewers {
                v.dropped.fetch_add(1, Ordering::Relaxed);
                self.0.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        tap.pending = Some(Still { stream: stream.clone(), seq, image: image.clone(), results: results.to_vec() });
        drop(taps);
        self.0.wake.notify_one();
    }

    pub fn view(&self) -> LiveView {
        LiveView {
            viewers: self.0.viewers.load(Ordering::Relaxed),
            max_fps: self.max_fps(),
            encoded: self.0.encoded.load(Ordering::Relaxed),
            failed: self.0.failed.load(Ordering::Relaxed),
            dropped: self.0.dropped.load(Ordering::Relaxed),
        }
    }
}

/// The encoder thread: each pending still rendered once, handed to every viewer of its stream.
fn encode_loop(hub: Weak<Inner>) {
    // Viewers get the CPU the pipeline leaves: on a saturated machine their
    // pictures come late or fewer, the pipeline's frames never.
    if let Err(e) = crate::backend::process::lower_thread_priority(ENCODER_NICE) {
        tracing::debug!("live pictures: the encoder thread keeps its priority ({e})");
    }
    loop {
        let Some(h) = hub.upgrade() else { return };
        let stills: Vec<Still> = {
            let mut taps = h.taps.lock().unwrap_or_else(|e| e.into_inner());
            let mut stills: Vec<Still> = taps.values_mut().filter_map(|t| t.pending.take()).collect();
            if stills.is_empty() {
                // Woken by an offer, or now and then to see whether the hub is gone.
                let (mut t, _) = h.wake.wait_timeout(taps, Duration::from_millis(500)).unwrap_or_else(|e| e.into_inner());
                stills = t.values_mut().filter_map(|t| t.pending.take()).collect();
            }
            stills
        };
        for still in stills {
            let r = {
                let mut renderer = h.renderer.lock().unwrap_or_else(|e| e.into_inner());
                match renderer.as_mut() {
                    Some(render) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| render(&still)))
                        .unwrap_or_else(|_| Err("the renderer panicked".into())),
                    None => continue,
                }
            };
            let jpeg = match r {
                Ok(j) => j,
                Err(e) => {
                    if h.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!("live picture of stream `{}` frame {}: {e}", still.stream, still.seq);
                    }
                    continue;
                }
            };
            h.encoded.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            let picture = Picture { seq: still.seq, jpeg: Arc::from(jpeg), at: now };
            let viewers = {
                let mut taps = h.taps.lock().unwrap_or_else(|e| e.into_inner());
                let Some(tap) = taps.get_mut(&still.stream) else { continue };
                tap.latest = Some(picture.clone());
                tap.live()
            };
            for v in viewers {
                {
                    let mut last = v.last.lock().unwrap_or_else(|e| e.into_inner());
                    // A little slack: pictures come at the frame rate's own beat.
                    if last.is_some_and(|l| now.duration_since(l) + v.interval / 4 < v.interval) {
                        continue;
                    }
                    *last = Some(now);
                }
                let mut q = v.queue.lock().unwrap_or_else(|e| e.into_inner());
                if q.len() >= VIEWER_BUFFER {
                    q.pop_front();
                    v.dropped.fetch_add(1, Ordering::Relaxed);
                    h.dropped.fetch_add(1, Ordering::Relaxed);
                }
                q.push_back(picture.clone());
                if q.len() >= VIEWER_BUFFER {
                    v.full_since.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(now);
                }
                drop(q);
                v.notify.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Arc<Image> {
        let pool = crate::frame::Pool::<u8>::new(1);
        let buf = pool.get(4 * 4 * 3);
        Arc::new(Image::rgb24(4, 4, buf))
    }

    /// A renderer that counts its pictures (each is its frame's seq).
    fn counting_renderer(hub: &LiveHub) -> Arc<AtomicU64> {
        let count = Arc::new(AtomicU64::new(0));
        let c = count.clone();
        hub.set_renderer(Box::new(move |s: &Still| {
            c.fetch_add(1, Ordering::Relaxed);
            Ok(s.seq.to_le_bytes().to_vec())
        }));
        count
    }

    #[test]
    fn no_viewer_no_encode_and_a_slow_viewer_loses_its_oldest_counted() {
        let hub = LiveHub::new(1e6);
        let count = counting_renderer(&hub);
        let s: Arc<str> = Arc::from("a");
        let img = image();
        for i in 0..5 {
            hub.offer(&s, i, Some(&img), &[]);
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(count.load(Ordering::Relaxed), 0, "nobody watched: nothing rendered");
        let slow = hub.watch("a", 1e6);
        let other = hub.watch("a", 1e6);
        for i in 0..10u64 {
            hub.offer(&s, i, Some(&img), &[]);
            let until = Instant::now() + Duration::from_secs(5);
            while other.try_next().is_none() {
                assert!(Instant::now() < until, "picture {i} not delivered");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // Ten pictures, each rendered once for two viewers; the one that never read kept the last two.
        assert_eq!(count.load(Ordering::Relaxed), 10);
        assert_eq!(slow.dropped(), 8);
        assert_eq!(slow.try_next().map(|p| p.seq), Some(8));
        assert_eq!(other.dropped(), 0);
        assert_eq!(hub.view().dropped, 8);
        drop((slow, other));
        assert_eq!(hub.view().viewers, 0);
    }

    #[test]
    fn a_viewer_that_stopped_reading_costs_no_encode_until_it_reads() {
        let hub = LiveHub::with_stall(1e6, Duration::from_millis(100));
        let count = counting_renderer(&hub);
        let s: Arc<str> = Arc::from("a");
        let img = image();
        let stalled = hub.watch("a", 1e6);
        let offer = |i: u64| {
            hub.offer(&s, i, Some(&img), &[]);
            std::thread::sleep(Duration::from_millis(20));
        };
        // Its buffer fills (two pictures), then it stays full past the stall time.
        for i in 0..3 {
            offer(i);
        }
        std::thread::sleep(Duration::from_millis(150));
        let encoded = count.load(Ordering::Relaxed);
        assert!(encoded >= 2, "{encoded}");
        let dropped = stalled.dropped();
        for i in 3..13 {
            offer(i);
        }
        assert_eq!(count.load(Ordering::Relaxed), encoded, "pictures encoded for a viewer that stopped reading");
        assert_eq!(stalled.dropped(), dropped + 10, "its missed pictures are counted");
        // It reads again: pictures again.
        while stalled.try_next().is_some() {}
        offer(13);
        let until = Instant::now() + Duration::from_secs(5);
        while stalled.try_next().is_none() {
            assert!(Instant::now() < until, "no picture after reading again");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(count.load(Ordering::Relaxed), encoded + 1);
    }
}
