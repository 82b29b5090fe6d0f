//! Sinks: where results go.

#[cfg(feature = "bus")]
pub mod bus;
pub mod clip_annotate;
pub mod clip_files;
pub mod clips;
pub mod draw;
pub mod images;
#[cfg(feature = "bus")]
pub mod kafka;
#[cfg(feature = "bus")]
pub mod mqtt;
pub mod ndjson;
pub mod overlay;
pub mod subtitles;
pub mod video;

use super::{Sink, StageError};

pub use crate::config::paths::{stream_file_name, stream_path};

use crate::config::{Diagnostic, NullSinkConfig};
use crate::frame::Frame;
use crate::stages::Body;
use crate::stages::build::{Build, BuildCtx};

/// Create the folder of a `{stream}` path template now, so an unwritable one
/// fails before the run (the graph check has made sure `{stream}` is only in
/// the file name).
pub fn make_stream_folder(
    cfg: &crate::config::PipelineConfig,
    value: &toml::Spanned<String>,
    path: &std::path::Path,
) -> Result<(), crate::config::Diagnostic> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| cfg.diag(value.span(), format!("cannot create folder {}: {e}", dir.display())))?;
    }
    Ok(())
}

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

impl Build for NullSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let _ = cx;
        Ok(Body::Sink(Box::new(NullSink)))
    }
}
