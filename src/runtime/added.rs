//! What became of the streams added at run time (`infer-stream serve`), for
//! the end-of-run summary: how many were added, which failed and why, and how
//! long each took from its `POST` to its first result. Streams removed during
//! the run are recorded when they go; the ones still listed, at the end.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use super::report::Latency;

/// A day, in µs: the longest wait for a first result recorded as such.
const MAX_US: u64 = 86_400_000_000;

/// Failed streams named one by one in the summary (the most recent); older ones are only counted.
pub const LISTED_FAILED_STREAMS: usize = 64;

/// A stream that failed, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FailedStream {
    pub id: String,
    /// Its template.
    pub source: String,
    /// Why (credentials masked).
    pub error: String,
}

/// The added streams of a run, in the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamsReport {
    /// Streams added over the run (removed ones included).
    pub added: u64,
    /// Of them, failed (their source could not start, gave up, or the camera refused the credentials).
    pub failed: u64,
    /// Of them, no result ever reached a sink.
    pub without_result: u64,
    /// The failed streams, the most recent [`LISTED_FAILED_STREAMS`], in the order they were recorded.
    pub failed_streams: Vec<FailedStream>,
    /// From each stream's `POST` to its first result, over the streams that had one.
    pub first_result_ms: Option<Latency>,
}

impl StreamsReport {
    /// The summary's lines (none when no stream was added).
    pub fn lines(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        if self.added == 0 {
            return s;
        }
        let _ = write!(s, "added streams: {}, failed {}, without a result {}", self.added, self.failed, self.without_result);
        if let Some(l) = &self.first_result_ms {
            let _ = write!(
                s,
                "; first result after adding: p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms ({} stream(s))",
                l.p50, l.p95, l.max, l.count
            );
        }
        s.push('\n');
        let unlisted = self.failed.saturating_sub(self.failed_streams.len() as u64);
        if unlisted > 0 {
            let _ = writeln!(s, "  failed: {unlisted} earlier stream(s) not listed");
        }
        for f in &self.failed_streams {
            let _ = writeln!(s, "  failed: `{}` ({}): {}", f.id, f.source, f.error);
        }
        s
    }
}

/// Collects [`StreamsReport`] while the pipeline runs.
#[derive(Debug)]
pub struct AddedLog {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    added: u64,
    failed: u64,
    without_result: u64,
    failed_streams: VecDeque<FailedStream>,
    /// µs from adding to the first result.
    first_result: hdrhistogram::Histogram<u64>,
}

impl Default for AddedLog {
    fn default() -> Self {
        let first_result = hdrhistogram::Histogram::new_with_bounds(1, MAX_US, 2).expect("valid histogram bounds");
        AddedLog { state: Mutex::new(State { added: 0, failed: 0, without_result: 0, failed_streams: VecDeque::new(), first_result }) }
    }
}

impl AddedLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One stream's outcome: `error` when it failed, `first_result` after adding when it had one.
    pub fn record(&self, id: &str, source: &str, error: Option<String>, first_result: Option<Duration>) {
        let mut s = self.lock();
        s.added += 1;
        if let Some(error) = error {
            s.failed += 1;
            s.failed_streams.push_back(FailedStream { id: id.into(), source: source.into(), error });
            if s.failed_streams.len() > LISTED_FAILED_STREAMS {
                s.failed_streams.pop_front();
            }
        }
        match first_result {
            Some(d) => {
                let _ = s.first_result.record((d.as_micros() as u64).clamp(1, MAX_US));
            }
            None => s.without_result += 1,
        }
    }

    /// Everything recorded so far.
    pub fn report(&self) -> StreamsReport {
        let s = self.lock();
        StreamsReport {
            added: s.added,
            failed: s.failed,
            without_result: s.without_result,
            failed_streams: s.failed_streams.iter().cloned().collect(),
            first_result_ms: (!s.first_result.is_empty()).then(|| Latency::of(&s.first_result)),
        }
    }
}
