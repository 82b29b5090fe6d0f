//! Capacity, tuning and A/B answers on the user's own machine, pipeline and
//! media: `bench --capacity` (how many paced streams fit a latency budget),
//! `bench --sweep` (which setting is fastest, over interleaved rounds) and
//! `compare` (is pipeline B as fast as A, and does it give the same results).
//!
//! This module owns the pipeline-file edits these need (settings by key path,
//! a source replayed as N streams, sinks replaced by a capture), the measured
//! window of one run, the spread over rounds and the result agreement; the
//! runtime still owns threads, queues and accounting.

pub mod agreement;
pub mod compare;
pub mod edit;
pub mod measure;
pub mod plot;
pub mod streams;
pub mod sweep;

use serde::Serialize;

use crate::config::Diagnostics;

/// Why a capacity, sweep or compare run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pipeline file (or a variant of it) does not load: located diagnostics.
    #[error("{0}")]
    Pipeline(Diagnostics),
    /// A setting on the command line that cannot be applied.
    #[error("{0}")]
    Setting(String),
    /// A run failed (a source or stage error).
    #[error("{0}")]
    Run(String),
    #[error("{0}")]
    Io(String),
}

impl From<Diagnostics> for Error {
    fn from(d: Diagnostics) -> Self {
        Error::Pipeline(d)
    }
}

/// A figure over rounds: its median and its range.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Spread { median, min: v[0], max: v[n - 1] }
    }

    /// Half the range, the `±` printed beside the median.
    pub fn half_range(&self) -> f64 {
        (self.max - self.min) / 2.0
    }

    /// Whether `x` lies within the range.
    pub fn contains(&self, x: f64) -> bool {
        self.min <= x && x <= self.max
    }

    /// Whether two ranges overlap (neither is clearly better).
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }

    /// `12.3 (11.9–12.8)` with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        format!("{:.d$} ({:.d$}–{:.d$})", self.median, self.min, self.max, d = digits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_and_range() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!(s, Spread { median: 2.5, min: 1.0, max: 10.0 });
        assert_eq!(s.half_range(), 4.5);
        assert!(s.contains(1.0) && !s.contains(10.5));
        assert!(s.overlaps(&Spread { median: 11.0, min: 9.0, max: 12.0 }));
        assert!(!s.overlaps(&Spread { median: 11.0, min: 10.5, max: 12.0 }));
        assert_eq!(Spread::of(&[]), Spread::default());
    }
}
