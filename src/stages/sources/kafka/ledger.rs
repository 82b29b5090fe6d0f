//! The offset ledger of one partition: where each job stands by its offset,
//! and the offset safe to commit (the lowest one not yet complete).

use std::collections::BTreeMap;

/// Where a job stands, by its offset in its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Consumed, not started yet.
    Queued,
    /// Started as this attempt.
    Running(u32),
    /// Its results are delivered (or it was dead-lettered).
    Done(u32),
    /// Its results could not be delivered: the partition's commits stop here.
    Held(u32),
}

/// A partition this worker is assigned.
pub(super) struct Part {
    /// Changes each time the partition is newly assigned: jobs of an older assignment never commit.
    pub(super) epoch: u64,
    pub(super) jobs: BTreeMap<i64, Slot>,
    /// Every offset below this is done (committed or about to be).
    pub(super) below: Option<i64>,
    /// Per attempt `n` (from 1): every job below this offset was started as attempt `n` at least.
    pub(super) started: Vec<i64>,
    /// What was last committed.
    pub(super) committed: Option<i64>,
}

impl Part {
    pub(super) fn new(epoch: u64, started: Vec<i64>) -> Self {
        Part { epoch, jobs: BTreeMap::new(), below: None, started, committed: None }
    }

    /// Drop the done jobs at the bottom; the offset to commit.
    pub(super) fn frontier(&mut self) -> Option<i64> {
        while let Some((&o, Slot::Done(_))) = self.jobs.first_key_value() {
            self.jobs.remove(&o);
            self.below = Some(o + 1);
        }
        self.jobs.first_key_value().map(|(&o, _)| o).or(self.below)
    }

    /// The attempt a start of the job at `offset` is: one more than the starts on record.
    pub(super) fn attempt(&self, offset: i64) -> u32 {
        1 + self.started.iter().take_while(|&&s| s > offset).count() as u32
    }
}
