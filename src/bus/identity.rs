//! The identity of a bus message across runs (docs/messages.md, "Identity
//! and de-duplication").
//!
//! `seq` restarts at 0 with every run, so `(stream, seq)` alone does not tell
//! a frame of this run from the same-numbered frame of an earlier run whose
//! messages are replayed from the spool. Every pipeline run therefore gets a
//! [`RunId`], made when it is built, written into each message (`"run"` in the
//! JSON, the Kafka headers `run` and `id`); a message keeps it in the spool,
//! so one replayed by a later run still carries the run that made it.

use std::fmt;
use std::sync::Arc;

/// A run's id: the start second (hex, so ids sort by start) and 48 random
/// bits, `692e3a1f-9c04be12a7d3`. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(Arc<str>);

impl RunId {
    /// A new id, from the clock and the operating system's random source
    /// (std's `RandomState` keys are seeded from it), mixed with the process
    /// id and the clock's nanoseconds.
    pub fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let secs = now.as_secs();
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u32(now.subsec_nanos());
        let rand = h.finish() & 0xffff_ffff_ffff;
        RunId(format!("{secs:08x}-{rand:012x}").into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for RunId {
    fn default() -> Self {
        RunId::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of a frame's message: `RUN/STREAM/SEQ`.
pub fn frame_id(run: &RunId, stream: &str, seq: u64) -> String {
    format!("{run}/{stream}/{seq}")
}

/// The id of a stream event's message: `RUN/STREAM/EVENT@AT_MS`.
pub fn event_id(run: &RunId, stream: &str, event: &str, at_ms: u64) -> String {
    format!("{run}/{stream}/{event}@{at_ms}")
}

/// The run part of a message id (everything before the first `/`).
pub fn run_of(id: &str) -> &str {
    id.split_once('/').map_or(id, |(r, _)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_differ_have_one_shape_and_sort_by_start() {
        let (a, b) = (RunId::new(), RunId::new());
        assert_ne!(a, b);
        for id in [&a, &b] {
            let (secs, rand) = id.as_str().split_once('-').unwrap();
            assert_eq!((secs.len(), rand.len()), (8, 12), "{id}");
            assert!(id.as_str().chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{id}");
        }
        let id = frame_id(&a, "dir/a.mp4", 7);
        assert_eq!(id, format!("{a}/dir/a.mp4/7"));
        assert_eq!(run_of(&id), a.as_str());
        assert_eq!(event_id(&a, "cam", "lost", 5), format!("{a}/cam/lost@5"));
    }
}
