//! Sources: where frames come from.

pub mod audio;
pub mod audiotest;
pub mod dir;
pub mod file;
#[cfg(feature = "gstreamer")]
pub mod gst;
pub mod rtsp;
pub mod testsrc;

use std::sync::{Arc, OnceLock};

use crate::backend::ffmpeg::Interrupt;
use crate::runtime::Shutdown;

/// The pipeline's stop, for FFmpeg's waits on a network input opened before
/// the run starts: armed when the source runs, it lets a stop abort a read
/// from a stalled stream (which would otherwise wait for ever).
#[derive(Clone, Default)]
pub struct StopCell(Arc<OnceLock<Arc<Shutdown>>>);

impl StopCell {
    /// The question FFmpeg asks while it waits: is the pipeline stopping?
    pub fn interrupt(&self) -> Interrupt {
        let cell = self.0.clone();
        Interrupt(Arc::new(move || cell.get().is_some_and(|s| s.stopping())))
    }

    /// From now on a stop of `shutdown` aborts the waits.
    pub fn arm(&self, shutdown: Arc<Shutdown>) {
        let _ = self.0.set(shutdown);
    }
}
