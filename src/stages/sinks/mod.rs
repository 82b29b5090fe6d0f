//! Sinks: where results go.

pub mod draw;
pub mod images;
pub mod ndjson;
pub mod overlay;
pub mod subtitles;
pub mod video;

use super::{Sink, StageError};

/// A stream name as one file-name component: letters, digits, `-`, `_` and
/// `.` are kept, anything else (`/`, `\`, spaces, ...) becomes `_`, and a
/// leading `.` becomes `_`, so the result can never name a folder above
/// (`..`), a hidden file, or a path in another folder.
pub fn stream_file_name(stream: &str) -> String {
    let mut n: String =
        stream.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect();
    if n.is_empty() || n.starts_with('.') {
        n.replace_range(..n.chars().next().map_or(0, char::len_utf8), "_");
    }
    n
}

use crate::frame::Frame;

/// Check a `{stream}` path template (the placeholder only in the file name;
/// `example` is shown in the help) and create its folder now, so a bad path
/// fails before the run.
pub fn prepare_stream_template(
    cfg: &crate::config::PipelineConfig,
    value: &toml::Spanned<String>,
    path: &std::path::Path,
    example: &str,
) -> Result<(), crate::config::Diagnostic> {
    if path.file_name().is_none_or(|n| !n.to_string_lossy().contains("{stream}")) {
        return Err(cfg.diag(value.span(), "`{stream}` may only appear in the file name").with_help(format!("e.g. path = \"{example}\"")));
    }
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

#[cfg(test)]
mod tests {
    use super::stream_file_name;

    #[test]
    fn stream_file_names_stay_in_their_folder() {
        assert_eq!(stream_file_name("clip-1.mp4"), "clip-1.mp4");
        assert_eq!(stream_file_name("day 1/cam.mp4"), "day_1_cam.mp4");
        assert_eq!(stream_file_name("../../etc/passwd"), "_._.._etc_passwd");
        assert_eq!(stream_file_name(".."), "_.");
        assert_eq!(stream_file_name(".hidden"), "_hidden");
        assert_eq!(stream_file_name("a\\b"), "a_b");
        assert_eq!(stream_file_name(""), "_");
        for s in ["..", "../x", "a/../../b", "/abs"] {
            let n = stream_file_name(s);
            assert!(!n.contains('/') && n != ".." && n != "." && !n.starts_with('.'), "{s} -> {n}");
        }
    }
}
