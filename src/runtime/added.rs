//! What became of the streams added at run time (`infer-stream serve`), for
//! the end-of-run summary: how many were added, which failed and why, and how
//! long each took from its `POST` to its first result. Streams removed during
//! the run are recorded when they go; the ones still listed, at the end.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use super::report::{FailedStream, LISTED_FAILED_STREAMS, Latency, StreamsReport};

/// A day, in µs: the longest wait for a first result recorded as such.
const MAX_US: u64 = 86_400_000_000;

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
