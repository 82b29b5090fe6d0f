//! Frame accounting: every decoded frame ends up processed, dropped or failed.
//!
//! Each source frame carries one [`Ticket`], shared (by `Arc`) with every
//! copy made at fan-out. Stages mark what happened; when the last copy is
//! gone the ticket settles into exactly one counter. A frame that vanished
//! without a mark is counted as `lost`, which the summary reports as a bug.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const SUNK: u8 = 1;
const DROPPED: u8 = 2;
const FAILED: u8 = 4;
const FILTERED: u8 = 8;

/// Pipeline-wide frame counters.
#[derive(Debug, Default)]
pub struct Accounting {
    pub decoded: AtomicU64,
    pub processed: AtomicU64,
    pub dropped: AtomicU64,
    pub failed: AtomicU64,
    /// Taken out on purpose by a stage (a `python` stage's `"drop": true`).
    pub filtered: AtomicU64,
    pub lost: AtomicU64,
}

/// A snapshot of [`Accounting`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub decoded: u64,
    pub processed: u64,
    pub dropped: u64,
    pub failed: u64,
    /// Taken out on purpose by a stage (`python`'s `"drop": true`).
    pub filtered: u64,
    pub lost: u64,
}

impl Counts {
    /// decoded = processed + dropped + failed + filtered, with nothing lost.
    pub fn balanced(&self) -> bool {
        self.lost == 0 && self.decoded == self.processed + self.dropped + self.failed + self.filtered
    }
    pub fn settled(&self) -> u64 {
        self.processed + self.dropped + self.failed + self.filtered + self.lost
    }
}

impl Accounting {
    pub fn snapshot(&self) -> Counts {
        Counts {
            decoded: self.decoded.load(Ordering::Acquire),
            processed: self.processed.load(Ordering::Acquire),
            dropped: self.dropped.load(Ordering::Acquire),
            failed: self.failed.load(Ordering::Acquire),
            filtered: self.filtered.load(Ordering::Acquire),
            lost: self.lost.load(Ordering::Acquire),
        }
    }

    /// A ticket for a newly decoded frame.
    pub fn issue(self: &Arc<Self>) -> Arc<Ticket> {
        self.issue_for(None)
    }

    /// A ticket for a newly decoded frame of one input of a multi-input source.
    pub fn issue_for(self: &Arc<Self>, input: Option<Arc<InputToken>>) -> Arc<Ticket> {
        self.decoded.fetch_add(1, Ordering::AcqRel);
        if let Some(i) = &input {
            i.decoded.fetch_add(1, Ordering::AcqRel);
        }
        Arc::new(Ticket { state: AtomicU8::new(0), acct: self.clone(), input })
    }
}

/// How one input (a file of a `dir` source) ended.
#[derive(Debug, Clone)]
pub struct InputEnd {
    /// The input's stream name.
    pub stream: Arc<str>,
    /// The source read it to its end (not stopped, not failed).
    pub read_to_end: bool,
    pub decoded: u64,
    pub processed: u64,
    pub dropped: u64,
    pub failed: u64,
}

impl InputEnd {
    /// An input that ended before its first frame (its source never started).
    pub fn nothing(stream: Arc<str>) -> Self {
        InputEnd { stream, read_to_end: false, decoded: 0, processed: 0, dropped: 0, failed: 0 }
    }
}

/// Called once when an input has ended.
pub type OnInputEnd = Box<dyn FnOnce(InputEnd) + Send>;

/// One input of a multi-input source. The source holds it while it reads the
/// input and every frame's ticket holds it, so it ends (drops) only when the
/// source is done with the input and every frame of it has settled: nothing
/// downstream holds any of its frames any more.
pub struct InputToken {
    pub stream: Arc<str>,
    read_to_end: AtomicBool,
    decoded: AtomicU64,
    processed: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    /// When a sink first took a frame of it (the input's first result).
    pub first_result: Arc<std::sync::OnceLock<std::time::Instant>>,
    on_end: Mutex<Option<OnInputEnd>>,
}

impl std::fmt::Debug for InputToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InputToken({})", self.stream)
    }
}

impl InputToken {
    pub fn new(stream: Arc<str>, on_end: OnInputEnd) -> Arc<Self> {
        Arc::new(InputToken {
            stream,
            read_to_end: AtomicBool::new(false),
            decoded: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_result: Arc::default(),
            on_end: Mutex::new(Some(on_end)),
        })
    }
    /// The source read the whole input successfully.
    pub fn read_to_end(&self) {
        self.read_to_end.store(true, Ordering::Release);
    }
}

impl Drop for InputToken {
    fn drop(&mut self) {
        let end = InputEnd {
            stream: self.stream.clone(),
            read_to_end: *self.read_to_end.get_mut(),
            decoded: *self.decoded.get_mut(),
            processed: *self.processed.get_mut(),
            dropped: *self.dropped.get_mut(),
            failed: *self.failed.get_mut(),
        };
        if let Some(f) = self.on_end.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            f(end);
        }
    }
}

/// The fate of one source frame; settles on drop.
#[derive(Debug)]
pub struct Ticket {
    state: AtomicU8,
    acct: Arc<Accounting>,
    /// The input this frame came from (multi-input sources): counted there too.
    input: Option<Arc<InputToken>>,
}

impl Ticket {
    /// The frame reached a sink.
    pub fn sunk(&self) {
        self.state.fetch_or(SUNK, Ordering::AcqRel);
        if let Some(i) = &self.input {
            i.first_result.get_or_init(std::time::Instant::now);
        }
    }
    /// A queue dropped the frame.
    pub fn dropped(&self) {
        self.state.fetch_or(DROPPED, Ordering::AcqRel);
    }
    /// A stage failed on the frame.
    pub fn failed(&self) {
        self.state.fetch_or(FAILED, Ordering::AcqRel);
    }
    /// A stage took the frame out on purpose.
    pub fn filtered(&self) {
        self.state.fetch_or(FILTERED, Ordering::AcqRel);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let s = *self.state.get_mut();
        // A frame that reached any sink was delivered, even if another branch lost it.
        let (counter, per_input) = if s & SUNK != 0 {
            (&self.acct.processed, self.input.as_ref().map(|i| &i.processed))
        } else if s & FAILED != 0 {
            (&self.acct.failed, self.input.as_ref().map(|i| &i.failed))
        } else if s & FILTERED != 0 {
            // Counted for the input as processed: its frames were all dealt with as asked.
            (&self.acct.filtered, self.input.as_ref().map(|i| &i.processed))
        } else if s & DROPPED != 0 {
            (&self.acct.dropped, self.input.as_ref().map(|i| &i.dropped))
        } else {
            (&self.acct.lost, None)
        };
        counter.fetch_add(1, Ordering::AcqRel);
        if let Some(c) = per_input {
            c.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_frame_settles_once() {
        let acct = Arc::new(Accounting::default());
        let a = acct.issue();
        let a2 = a.clone();
        a.dropped();
        a2.sunk();
        drop((a, a2));
        let b = acct.issue();
        b.failed();
        drop(b);
        let c = acct.issue();
        c.dropped();
        drop(c);
        // Taken out on purpose in one branch, delivered by another: delivered.
        let d = acct.issue();
        let d2 = d.clone();
        d.filtered();
        d2.sunk();
        drop((d, d2));
        let e = acct.issue();
        e.filtered();
        drop(e);
        let n = acct.snapshot();
        assert_eq!((n.decoded, n.processed, n.dropped, n.failed, n.filtered, n.lost), (5, 2, 1, 1, 1, 0));
        assert!(n.balanced());
    }

    #[test]
    fn an_input_ends_when_its_last_frame_settles() {
        let acct = Arc::new(Accounting::default());
        let ended = Arc::new(Mutex::new(None));
        let e2 = ended.clone();
        let input = InputToken::new("a.mp4".into(), Box::new(move |end| *e2.lock().unwrap() = Some(end)));
        let a = acct.issue_for(Some(input.clone()));
        let b = acct.issue_for(Some(input.clone()));
        input.read_to_end();
        drop(input);
        a.sunk();
        drop(a);
        assert!(ended.lock().unwrap().is_none(), "a frame is still in flight");
        b.failed();
        drop(b);
        let end = ended.lock().unwrap().take().expect("ended");
        assert_eq!((&*end.stream, end.read_to_end, end.decoded, end.processed, end.failed), ("a.mp4", true, 2, 1, 1));
    }

    #[test]
    fn unmarked_frame_is_lost() {
        let acct = Arc::new(Accounting::default());
        drop(acct.issue());
        let n = acct.snapshot();
        assert_eq!(n.lost, 1);
        assert!(!n.balanced());
    }
}
