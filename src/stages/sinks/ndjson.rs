//! `kind = "ndjson"`: one JSON object per frame, one line each.
//!
//! Each line is formatted whole and written with a single `write`, so a
//! reader tailing the file never sees half a line from a live run, and a
//! killed process leaves at most a partial last line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::config::{Diagnostic, NdjsonSinkConfig, PipelineConfig};
use crate::frame::{Event, Frame};
use crate::stages::{Sink, StageError};

enum Out {
    File(File),
    Stdout(std::io::Stdout),
}

pub struct NdjsonSink {
    out: Out,
    path: PathBuf,
    line: Vec<u8>,
    lines: u64,
}

impl NdjsonSink {
    /// Open (create or truncate) the output now, so a bad path fails before the run.
    pub fn build(cfg: &PipelineConfig, c: &NdjsonSinkConfig) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.path)?;
        let out = if path.as_os_str() == "-" {
            Out::Stdout(std::io::stdout())
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| cfg.diag(c.path.span(), format!("cannot create folder {}: {e}", dir.display())))?;
            }
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .append(c.append)
                .truncate(!c.append)
                .open(&path)
                .map_err(|e| cfg.diag(c.path.span(), format!("cannot open {} for writing: {e}", path.display())))?;
            Out::File(f)
        };
        Ok(NdjsonSink { out, path, line: Vec::with_capacity(4096), lines: 0 })
    }
}

/// The JSON object written for one frame.
pub fn frame_json(frame: &Frame) -> Value {
    let mut results = Map::new();
    for a in &frame.results {
        if let Some(v) = a.payload.to_json() {
            results.insert(a.node.to_string(), v);
        }
    }
    let mut obj = json!({
        "stream": &*frame.stream,
        "seq": frame.seq,
        "pts": frame.pts_seconds(),
    });
    if let Some(img) = &frame.image {
        obj["width"] = json!(img.width);
        obj["height"] = json!(img.height);
    }
    obj["results"] = Value::Object(results);
    obj
}

impl NdjsonSink {
    /// Write `self.line` plus a newline with one write.
    fn write_line(&mut self) -> Result<(), StageError> {
        self.line.push(b'\n');
        let r = match &mut self.out {
            Out::File(f) => f.write_all(&self.line),
            Out::Stdout(s) => {
                let mut lock = s.lock();
                lock.write_all(&self.line).and_then(|_| lock.flush())
            }
        };
        r.map_err(|e| StageError::Fatal(format!("writing {}: {e}", self.path.display())))?;
        self.lines += 1;
        Ok(())
    }
}

impl Sink for NdjsonSink {
    fn describe(&self) -> String {
        match self.out {
            Out::Stdout(_) => "NDJSON to stdout".into(),
            Out::File(_) => format!("NDJSON to {}", self.path.display()),
        }
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, &frame_json(frame)).map_err(|e| StageError::Frame(e.to_string()))?;
        self.write_line()
    }

    /// `{"stream":"cam","event":"lost","reason":...,"at_ms":...}`, in order with the frame lines.
    fn event(&mut self, event: &Event) -> Result<(), String> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, &event.to_json()).map_err(|e| e.to_string())?;
        self.write_line().map_err(|e| e.to_string())
    }

    fn finish(&mut self) -> Result<(), String> {
        match &mut self.out {
            Out::File(f) => f.flush().and_then(|_| f.sync_data()),
            Out::Stdout(s) => s.flush(),
        }
        .map_err(|e| format!("closing {}: {e}", self.path.display()))?;
        tracing::debug!("{}: {} lines", self.path.display(), self.lines);
        Ok(())
    }
}
