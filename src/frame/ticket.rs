//! Frame accounting: every decoded frame ends up processed, dropped or failed.
//!
//! Each source frame carries one [`Ticket`], shared (by `Arc`) with every
//! copy made at fan-out. Stages mark what happened; when the last copy is
//! gone the ticket settles into exactly one counter. A frame that vanished
//! without a mark is counted as `lost`, which the summary reports as a bug.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const SUNK: u8 = 1;
const DROPPED: u8 = 2;
const FAILED: u8 = 4;

/// Pipeline-wide frame counters.
#[derive(Debug, Default)]
pub struct Accounting {
    pub decoded: AtomicU64,
    pub processed: AtomicU64,
    pub dropped: AtomicU64,
    pub failed: AtomicU64,
    pub lost: AtomicU64,
}

/// A snapshot of [`Accounting`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub decoded: u64,
    pub processed: u64,
    pub dropped: u64,
    pub failed: u64,
    pub lost: u64,
}

impl Counts {
    /// decoded = processed + dropped + failed, with nothing lost.
    pub fn balanced(&self) -> bool {
        self.lost == 0 && self.decoded == self.processed + self.dropped + self.failed
    }
    pub fn settled(&self) -> u64 {
        self.processed + self.dropped + self.failed + self.lost
    }
}

impl Accounting {
    pub fn snapshot(&self) -> Counts {
        Counts {
            decoded: self.decoded.load(Ordering::Acquire),
            processed: self.processed.load(Ordering::Acquire),
            dropped: self.dropped.load(Ordering::Acquire),
            failed: self.failed.load(Ordering::Acquire),
            lost: self.lost.load(Ordering::Acquire),
        }
    }

    /// A ticket for a newly decoded frame.
    pub fn issue(self: &Arc<Self>) -> Arc<Ticket> {
        self.decoded.fetch_add(1, Ordering::AcqRel);
        Arc::new(Ticket { state: AtomicU8::new(0), acct: self.clone() })
    }
}

/// The fate of one source frame; settles on drop.
#[derive(Debug)]
pub struct Ticket {
    state: AtomicU8,
    acct: Arc<Accounting>,
}

impl Ticket {
    /// The frame reached a sink.
    pub fn sunk(&self) {
        self.state.fetch_or(SUNK, Ordering::AcqRel);
    }
    /// A queue dropped the frame.
    pub fn dropped(&self) {
        self.state.fetch_or(DROPPED, Ordering::AcqRel);
    }
    /// A stage failed on the frame.
    pub fn failed(&self) {
        self.state.fetch_or(FAILED, Ordering::AcqRel);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let s = *self.state.get_mut();
        // A frame that reached any sink was delivered, even if another branch lost it.
        let counter = if s & SUNK != 0 {
            &self.acct.processed
        } else if s & FAILED != 0 {
            &self.acct.failed
        } else if s & DROPPED != 0 {
            &self.acct.dropped
        } else {
            &self.acct.lost
        };
        counter.fetch_add(1, Ordering::AcqRel);
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
        let n = acct.snapshot();
        assert_eq!((n.decoded, n.processed, n.dropped, n.failed, n.lost), (3, 1, 1, 1, 0));
        assert!(n.balanced());
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
