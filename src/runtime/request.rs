//! Request/response inference: the hand-off between a service (HTTP, gRPC)
//! and a `kind = "request"` source.
//!
//! A request waits in a bounded queue (full: refused as busy), becomes one
//! frame of the source's stream (its number is the frame's `seq`), goes
//! through the stages like any frame (batching stages batch concurrent
//! requests), and is answered when that frame has been written by a sink:
//! the runtime hands every written frame of a request source to its hub
//! ([`RequestHub::deliver`]). A frame that failed or was dropped on the way
//! is answered with that when its ticket settles. Each request has a
//! deadline; a request still queued past it is never run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use crate::frame::{Frame, InputEnd, Payload};

/// Why a request got no results.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("the picture is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("{0}")]
    BadImage(String),
    #[error("busy: {capacity} requests are already waiting; try again shortly")]
    Busy { capacity: usize },
    #[error("no results within the deadline of {0} ms")]
    Timeout(u64),
    #[error("{0}")]
    Failed(String),
    #[error("the pipeline is stopping")]
    Stopped,
}

impl RequestError {
    /// Seconds a client refused as busy is told to wait before trying again.
    pub const RETRY_AFTER_S: u64 = 1;
}

/// One box the stages found, typed (the JSON has them too).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyBox {
    /// The stage that found it.
    pub node: Arc<str>,
    /// x0, y0, x1, y1 in the picture's pixels.
    pub bbox: [f32; 4],
    pub score: f32,
    /// Object detectors: the class and its label.
    pub class: Option<u32>,
    pub label: Option<Arc<str>>,
    /// Text recognition: the text read.
    pub text: Option<String>,
}

/// A request's results.
#[derive(Debug, Clone)]
pub struct Reply {
    pub id: u64,
    /// The frame's JSON object, as the ndjson sink writes it.
    pub json: serde_json::Value,
    pub boxes: Vec<ReplyBox>,
    pub width: u32,
    pub height: u32,
}

impl Reply {
    fn of(frame: &Frame) -> Reply {
        let mut boxes = Vec::new();
        for a in &frame.results {
            let b = |bbox: [f32; 4], score: f32| ReplyBox { node: a.node.clone(), bbox, score, class: None, label: None, text: None };
            match &*a.payload {
                Payload::TextBoxes(v) => boxes.extend(v.iter().map(|t| b(t.bbox, t.score))),
                Payload::Texts(v) => boxes.extend(v.iter().map(|t| ReplyBox { text: Some(t.text.clone()), ..b(t.bbox, t.score) })),
                Payload::Objects(_) | Payload::Custom(_) => {
                    let v = a.payload.objects().unwrap_or_default();
                    boxes.extend(v.iter().map(|o| ReplyBox { class: Some(o.class), label: o.label.clone(), ..b(o.bbox, o.score) }))
                }
                _ => {}
            }
        }
        let (width, height) = frame.image.as_ref().map_or((0, 0), |i| (i.width, i.height));
        Reply { id: frame.seq, json: crate::frame::json::frame_json(frame), boxes, width, height }
    }
}

type Answer = Result<Reply, RequestError>;

/// A request in the queue, as the source takes it.
pub struct Request {
    pub id: u64,
    /// The encoded picture (JPEG or PNG).
    pub image: Vec<u8>,
    pub deadline: Instant,
}

/// Limits of a request source.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// Requests waiting to start at most.
    pub queue: usize,
    /// Deadline of a request that sets none.
    pub timeout: Duration,
    /// Largest encoded picture, in bytes.
    pub max_bytes: usize,
}

struct Inner {
    name: Arc<str>,
    limits: RequestLimits,
    tx: Sender<Request>,
    rx: Receiver<Request>,
    /// Requests not answered yet, by id.
    waiting: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<Answer>>>,
    next_id: AtomicU64,
    closed: AtomicBool,
}

/// The handle a service submits requests through and a request source takes
/// them from. Cheap to clone.
#[derive(Clone)]
pub struct RequestHub(Arc<Inner>);

impl std::fmt::Debug for RequestHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestHub({})", self.0.name)
    }
}

impl RequestHub {
    pub fn new(name: Arc<str>, limits: RequestLimits) -> Self {
        let (tx, rx) = bounded(limits.queue.max(1));
        RequestHub(Arc::new(Inner {
            name,
            limits,
            tx,
            rx,
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }))
    }

    /// The request source's name (the stream its frames belong to).
    pub fn name(&self) -> &Arc<str> {
        &self.0.name
    }

    pub fn limits(&self) -> RequestLimits {
        self.0.limits
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, tokio::sync::oneshot::Sender<Answer>>> {
        self.0.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue one picture with a deadline of `timeout` (default: the source's).
    /// Refused at once when it is too large, the queue is full or the
    /// pipeline is stopping.
    pub fn submit(&self, image: Vec<u8>, timeout: Option<Duration>) -> Result<Pending, RequestError> {
        let limit = self.0.limits.max_bytes;
        if image.len() > limit {
            return Err(RequestError::TooLarge { size: image.len(), limit });
        }
        if self.0.closed.load(Ordering::Acquire) {
            return Err(RequestError::Stopped);
        }
        let timeout = timeout.unwrap_or(self.0.limits.timeout);
        let deadline = Instant::now() + timeout;
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.waiting().insert(id, tx);
        match self.0.tx.try_send(Request { id, image, deadline }) {
            Ok(()) => Ok(Pending { id, deadline, timeout, rx: Some(rx), hub: self.clone() }),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.waiting().remove(&id);
                Err(RequestError::Busy { capacity: self.0.limits.queue })
            }
        }
    }

    /// The next request to run, waiting at most `wait`. Requests whose
    /// client has gone (deadline passed, connection closed) are skipped.
    pub fn next(&self, wait: Duration) -> Option<Request> {
        let until = Instant::now() + wait;
        loop {
            let r = self.0.rx.recv_deadline(until).ok()?;
            if !self.waiting().contains_key(&r.id) {
                continue;
            }
            if Instant::now() >= r.deadline {
                self.answer(r.id, Err(RequestError::Timeout(0)));
                continue;
            }
            return Some(r);
        }
    }

    /// Answer request `id` (a no-op when it has been answered or given up).
    pub fn answer(&self, id: u64, answer: Answer) {
        if let Some(tx) = self.waiting().remove(&id) {
            let _ = tx.send(answer);
        }
    }

    /// Whether request `id` still waits for its answer.
    pub fn is_waiting(&self, id: u64) -> bool {
        self.waiting().contains_key(&id)
    }

    /// A sink wrote a frame of this source: answer its request with the
    /// frame's results (the first sink to write it answers).
    pub fn deliver(&self, frame: &Frame) {
        if self.is_waiting(frame.seq) {
            self.answer(frame.seq, Ok(Reply::of(frame)));
        }
    }

    /// The frame of request `id` settled (every copy of it gone): a request
    /// no sink answered failed or was dropped on the way.
    pub fn settled(&self, id: u64, end: &InputEnd) {
        let why = if end.failed > 0 {
            "a stage failed on this picture (the server log says why)"
        } else if end.dropped > 0 {
            "the picture was dropped by a full queue in the pipeline"
        } else {
            "the picture reached no sink"
        };
        self.answer(id, Err(RequestError::Failed(why.into())));
    }

    /// Requests waiting in the queue.
    pub fn queued(&self) -> usize {
        self.0.rx.len()
    }

    /// The source stopped: refuse new requests and answer the queued ones.
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        while let Ok(r) = self.0.rx.try_recv() {
            self.answer(r.id, Err(RequestError::Stopped));
        }
    }
}

/// A submitted request: wait for its answer with [`Pending::wait`]. Dropped
/// unanswered (the client went away), it is given up and never run.
pub struct Pending {
    pub id: u64,
    pub deadline: Instant,
    timeout: Duration,
    rx: Option<tokio::sync::oneshot::Receiver<Answer>>,
    hub: RequestHub,
}

impl Pending {
    /// The results, or why there are none (`Timeout` once the deadline passes).
    pub async fn wait(mut self) -> Result<Reply, RequestError> {
        let rx = self.rx.take().expect("waited once");
        match tokio::time::timeout_at(self.deadline.into(), rx).await {
            Ok(Ok(answer)) => answer.map_err(|e| match e {
                RequestError::Timeout(_) => RequestError::Timeout(self.timeout.as_millis() as u64),
                e => e,
            }),
            Ok(Err(_)) => Err(RequestError::Stopped),
            Err(_) => Err(RequestError::Timeout(self.timeout.as_millis() as u64)),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.hub.waiting().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(queue: usize) -> RequestHub {
        RequestHub::new("req".into(), RequestLimits { queue, timeout: Duration::from_millis(200), max_bytes: 8 })
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
    }

    #[test]
    fn a_full_queue_refuses_and_a_large_picture_is_refused_first() {
        let h = hub(2);
        let a = h.submit(vec![1], None).unwrap();
        let _b = h.submit(vec![2], None).unwrap();
        assert_eq!(h.submit(vec![3], None).err(), Some(RequestError::Busy { capacity: 2 }));
        assert_eq!(h.submit(vec![0; 9], None).err(), Some(RequestError::TooLarge { size: 9, limit: 8 }));
        // A request given up (its client gone) is skipped by the source.
        drop(a);
        let r = h.next(Duration::from_millis(10)).unwrap();
        assert_eq!(r.image, [2]);
        assert!(h.next(Duration::from_millis(10)).is_none());
    }

    #[test]
    fn the_deadline_answers_a_request_nobody_ran() {
        let h = hub(4);
        let p = h.submit(vec![1], Some(Duration::from_millis(30))).unwrap();
        assert_eq!(block_on(p.wait()).err(), Some(RequestError::Timeout(30)));
        assert!(h.next(Duration::from_millis(10)).is_none(), "a request past its deadline is not run");
    }

    #[test]
    fn stopping_answers_the_queued_requests() {
        let h = hub(4);
        let p = h.submit(vec![1], None).unwrap();
        h.close();
        assert_eq!(block_on(p.wait()).err(), Some(RequestError::Stopped));
        assert_eq!(h.submit(vec![1], None).err(), Some(RequestError::Stopped));
    }
}
