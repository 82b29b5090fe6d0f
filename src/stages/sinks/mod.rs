//! Sinks: where results go.

pub mod draw;
pub mod images;
pub mod ndjson;
pub mod subtitles;
pub mod video;

use super::{Sink, StageError};
use crate::frame::Frame;

/// Discards every frame (benchmarks measure the pipeline without output cost).
pub struct NullSink;

impl Sink for NullSink {
    fn write(&mut self, _frame: &Frame) -> Result<(), StageError> {
        Ok(())
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn describe(&self) -> String {
        "null".into()
    }
}
