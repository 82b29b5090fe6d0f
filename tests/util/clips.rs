//! Event clips' checks shared by tests/clips.rs and tests/clips_annotated.rs.

use std::path::Path;
use std::process::Command;

/// The whole file decodes without an error (the ffmpeg CLI).
pub fn decodes(file: &Path) {
    let o = Command::new("ffmpeg").args(["-v", "error", "-nostdin", "-i"]).arg(file).args(["-f", "null", "-"]).output().unwrap();
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{} does not decode cleanly: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The `clip` events among a run's lines.
pub fn clips_in(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines.iter().filter(|l| l["event"] == "clip").collect()
}
