//! `kind = "ndjson"`: one JSON object per frame, one line each.
//!
//! Each line is formatted whole and written with a single `write`, so a
//! reader tailing the file never sees half a line from a live run, and a
//! killed process leaves at most a partial last line.
//!
//! With `{stream}` in the path, each stream gets its own file (the stream
//! name made file-name safe, so it cannot leave the folder), opened at the
//! stream's first frame (or when it ends with none) and closed when it ends.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::stream_path;
use crate::config::{Diagnostic, NdjsonSinkConfig, PipelineConfig};
use crate::frame::{Event, Frame};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Sink, StageError};

enum Out {
    File(File),
    Stdout(std::io::Stdout),
    /// One file per stream: the path with `{stream}` replaced.
    PerStream {
        open: HashMap<Arc<str>, File>,
        /// Streams whose file was opened by this run (reopened later: appended, not truncated).
        opened: HashSet<Arc<str>>,
    },
}

pub struct NdjsonSink {
    out: Out,
    path: PathBuf,
    append: bool,
    line: Vec<u8>,
    lines: u64,
}

/// Open `path` for writing, creating its folder.
fn open_file(path: &Path, append: bool) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).write(true).append(append).truncate(!append).open(path)
}

impl NdjsonSink {
    /// Open (create or truncate) the output now, so a bad path fails before the run.
    pub fn build(cfg: &PipelineConfig, c: &NdjsonSinkConfig) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.path)?;
        let per_stream = c.path.get_ref().contains("{stream}");
        let out = if path.as_os_str() == "-" {
            Out::Stdout(std::io::stdout())
        } else if per_stream {
            super::make_stream_folder(cfg, &c.path, &path)?;
            Out::PerStream { open: HashMap::new(), opened: HashSet::new() }
        } else {
            let f = open_file(&path, c.append)
                .map_err(|e| cfg.diag(c.path.span(), format!("cannot open {} for writing: {e}", path.display())))?;
            Out::File(f)
        };
        Ok(NdjsonSink { out, path, append: c.append, line: Vec::with_capacity(4096), lines: 0 })
    }
}

/// Open the file of `stream`: truncated the first time in this run (a file
/// redone replaces its old output), appended when reopened.
fn open_stream(template: &Path, append: bool, opened: &mut HashSet<Arc<str>>, stream: &Arc<str>) -> Result<File, String> {
    let p = stream_path(template, stream);
    let f = open_file(&p, append || opened.contains(stream)).map_err(|e| format!("cannot open {} for writing: {e}", p.display()))?;
    opened.insert(stream.clone());
    Ok(f)
}

/// Write `line` to `f`, or nothing: a write that fails part-way (a full
/// disk) is cut back, so the file ends with its last whole line.
fn write_whole(f: &mut File, line: &[u8]) -> std::io::Result<()> {
    use std::io::Seek;
    let at = f.stream_position()?;
    f.write_all(line).inspect_err(|_| {
        if f.set_len(at).is_ok() {
            let _ = f.seek(std::io::SeekFrom::Start(at));
        }
    })
}

pub use crate::frame::json::{FrameLine, frame_json, frame_json_string};

impl NdjsonSink {
    /// Write `self.line` plus a newline with one write, to `stream`'s output.
    fn write_line(&mut self, stream: &Arc<str>) -> Result<(), StageError> {
        self.line.push(b'\n');
        let r = match &mut self.out {
            Out::File(f) => write_whole(f, &self.line),
            Out::Stdout(s) => {
                let mut lock = s.lock();
                lock.write_all(&self.line).and_then(|_| lock.flush())
            }
            Out::PerStream { open, opened } => {
                if !open.contains_key(stream) {
                    let f = open_stream(&self.path, self.append, opened, stream).map_err(StageError::Fatal)?;
                    open.insert(stream.clone(), f);
                }
                write_whole(open.get_mut(stream).expect("opened above"), &self.line)
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
            Out::File(_) => format!("NDJSON to {}", crate::config::tidy_path(&self.path).display()),
            Out::PerStream { .. } => format!("NDJSON to {}, one file per stream", crate::config::tidy_path(&self.path).display()),
        }
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, &FrameLine::of(frame)).map_err(|e| StageError::Frame(e.to_string()))?;
        self.write_line(&frame.stream)
    }

    /// `{"stream":"cam","event":"lost","reason":...,"at_ms":...}`, in order with the frame lines.
    fn event(&mut self, event: &Event) -> Result<(), String> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, &event.to_json()).map_err(|e| e.to_string())?;
        self.write_line(&event.stream).map_err(|e| e.to_string())
    }

    /// Written and synced counts as delivered: the stream's lines are on disk when this returns.
    fn end_stream(&mut self, stream: &str) -> Result<(), String> {
        let (open, opened) = match &mut self.out {
            Out::PerStream { open, opened } => (open, opened),
            Out::File(f) => return f.sync_data().map_err(|e| format!("syncing {}: {e}", self.path.display())),
            Out::Stdout(s) => return s.flush().map_err(|e| format!("flushing stdout: {e}")),
        };
        let file = match open.remove(stream) {
            Some(f) => f,
            // No frame reached this sink: the stream's output is an empty file.
            None if !opened.contains(stream) => open_stream(&self.path, self.append, opened, &Arc::from(stream))?,
            None => return Ok(()),
        };
        file.sync_data().map_err(|e| format!("closing {}: {e}", stream_path(&self.path, stream).display()))
    }

    fn finish(&mut self) -> Result<(), String> {
        match &mut self.out {
            Out::File(f) => f.flush().and_then(|_| f.sync_data()),
            Out::Stdout(s) => s.flush(),
            Out::PerStream { open, .. } => {
                let mut r = Ok(());
                for (stream, f) in open.drain() {
                    if let Err(e) = f.sync_data() {
                        r = Err(std::io::Error::other(format!("{}: {e}", stream_path(&self.path, &stream).display())));
                    }
                }
                r
            }
        }
        .map_err(|e| format!("closing {}: {e}", self.path.display()))?;
        tracing::debug!("{}: {} lines", self.path.display(), self.lines);
        Ok(())
    }
}

impl Build for NdjsonSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        NdjsonSink::build(cx.cfg, self).map(|s| Body::Sink(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Image, Object, Payload, PoolBuf, TextBox};

    /// The documented frame object, key for key, as text and as a value.
    #[test]
    fn a_frame_line_is_the_documented_object() {
        let acct = Arc::new(crate::frame::Accounting::default());
        let mut f = Frame {
            stream: "cam \"3\"".into(),
            stream_index: 0,
            seq: 41,
            pts: Some(123),
            time_base: (1, 30),
            created: std::time::Instant::now(),
            image: None,
            audio: None,
            results: Vec::new(),
            ticket: acct.issue(),
            queued_at: None,
            events: Vec::new(),
            filtered: false,
        };
        assert_eq!(frame_json_string(&f), r#"{"schema":1,"stream":"cam \"3\"","seq":41,"pts":4.1,"results":{}}"#);
        assert_eq!(frame_json(&f).to_string(), frame_json_string(&f));
        // A bus message: the same object with the run's id after `schema`.
        assert_eq!(
            serde_json::to_string(&FrameLine::of(&f).in_run("692e3a1f-9c04be12a7d3")).unwrap(),
            r#"{"schema":1,"run":"692e3a1f-9c04be12a7d3","stream":"cam \"3\"","seq":41,"pts":4.1,"results":{}}"#
        );
        f.image = Some(Arc::new(Image::rgb24(2, 2, PoolBuf::detached(vec![0; 12]))));
        let (det, text): (Arc<str>, Arc<str>) = ("det".into(), "text".into());
        f.attach(
            &det,
            Payload::Objects(vec![Object {
                bbox: [1.0, 2.5, 3.0, 4.0],
                score: 0.75,
                class: 2,
                label: Some("car".into()),
                keypoints: vec![],
            }]),
        );
        f.attach(
            &text,
            Payload::TextBoxes(vec![TextBox {
                bbox: [0.0, 0.0, 1.0, 1.0],
                quad: [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]],
                score: 0.5,
            }]),
        );
        // The same stage again: its later results replace the earlier, in their place.
        f.attach(&det, Payload::Objects(Vec::new()));
        f.pts = None;
        let want = r#"{"schema":1,"stream":"cam \"3\"","seq":41,"pts":null,"width":2,"height":2,"results":{"det":{"detections":[]},"text":{"text_boxes":[{"bbox":[0.0,0.0,1.0,1.0],"quad":[[0.0,0.0],[1.0,0.0],[1.0,1.0],[0.0,1.0]],"score":0.5}]}}}"#;
        assert_eq!(frame_json_string(&f), want);
        f.pts = Some(7);
        assert_eq!(frame_json(&f)["pts"], 7.0 / 30.0);
        assert_eq!(frame_json(&f).to_string(), frame_json_string(&f));
    }
}
