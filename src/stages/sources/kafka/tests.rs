use super::ledger::{Part, Slot};

/// Offsets are committed up to the lowest job not yet done, never past it.
#[test]
fn the_commit_stops_at_the_lowest_job_not_done() {
    let mut p = Part::new(1, Vec::new());
    assert_eq!(p.frontier(), None, "nothing seen, nothing to commit");
    for o in 10..14 {
        p.jobs.insert(o, Slot::Running(1));
    }
    p.jobs.insert(11, Slot::Done(1));
    p.jobs.insert(12, Slot::Done(1));
    assert_eq!(p.frontier(), Some(10), "10 still runs: 11 and 12 wait behind it");
    p.jobs.insert(10, Slot::Done(1));
    assert_eq!(p.frontier(), Some(13));
    p.jobs.insert(13, Slot::Held(1));
    assert_eq!(p.frontier(), Some(13), "undelivered results hold the partition");
    p.jobs.insert(13, Slot::Done(1));
    assert_eq!(p.frontier(), Some(14), "all done: past the last one");
    assert!(p.jobs.is_empty());
}

/// A job below the offset recorded for attempt n was started n times.
#[test]
fn attempts_count_the_recorded_starts() {
    // Started once up to offset 9, twice up to offset 4.
    let p = Part::new(1, vec![10, 5]);
    assert_eq!(p.attempt(3), 3);
    assert_eq!(p.attempt(4), 3);
    assert_eq!(p.attempt(5), 2);
    assert_eq!(p.attempt(9), 2);
    assert_eq!(p.attempt(10), 1);
    assert_eq!(Part::new(1, Vec::new()).attempt(0), 1);
}
