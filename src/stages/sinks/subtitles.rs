//! `kind = "subtitles"`: SRT or WebVTT from timed results: recognised text
//! (a cue while a string stays on screen) and speech segments.
//! Cues are written as they close, so a stopped run leaves a valid file.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Diagnostic, PipelineConfig, SubtitleFormat, SubtitlesSinkConfig};
use crate::frame::{Frame, Payload};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Sink, StageError};

/// `HH:MM:SS,mmm` (SRT) or `HH:MM:SS.mmm` (WebVTT).
pub fn timestamp(seconds: f64, format: SubtitleFormat) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let sep = if format == SubtitleFormat::Srt { ',' } else { '.' };
    format!("{:02}:{:02}:{:02}{sep}{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

/// One open subtitle file and the cues written to it.
struct Out {
    w: BufWriter<File>,
    path: PathBuf,
    cues: u64,
}

impl Out {
    fn create(path: PathBuf, format: SubtitleFormat) -> std::io::Result<Out> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut w = BufWriter::new(File::create(&path)?);
        if format == SubtitleFormat::Vtt {
            w.write_all(b"WEBVTT\n\n")?;
            w.flush()?;
        }
        Ok(Out { w, path, cues: 0 })
    }

    fn close(&mut self) -> Result<(), String> {
        self.w.flush().and_then(|_| self.w.get_ref().sync_data()).map_err(|e| format!("closing {}: {e}", self.path.display()))
    }
}

pub struct Subtitles {
    /// The path, with `{stream}` in its file name for one file per stream.
    template: PathBuf,
    /// The one file; `None` with one file per stream (then in `open`).
    single: Option<Out>,
    open: HashMap<Arc<str>, Out>,
    format: SubtitleFormat,
    speech_text: String,
    /// Text on screen: (stream, text) → since when.
    showing: HashMap<(Arc<str>, String), f64>,
    /// Last pts and frame duration per stream (to close cues at the end).
    last: HashMap<Arc<str>, (f64, f64)>,
    /// Cues name their stream when one file holds several.
    streams: usize,
}

impl Subtitles {
    pub fn build(cfg: &PipelineConfig, c: &SubtitlesSinkConfig) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.path)?;
        let format =
            c.format.unwrap_or(if path.extension().is_some_and(|e| e == "vtt") { SubtitleFormat::Vtt } else { SubtitleFormat::Srt });
        let per_stream = c.path.get_ref().contains("{stream}");
        let single = if per_stream {
            super::make_stream_folder(cfg, &c.path, &path)?;
            None
        } else {
            Some(
                Out::create(path.clone(), format)
                    .map_err(|e| cfg.diag(c.path.span(), format!("cannot open {} for writing: {e}", path.display())))?,
            )
        };
        Ok(Subtitles {
            template: path,
            single,
            open: HashMap::new(),
            format,
            speech_text: c.speech_text.clone(),
            showing: HashMap::new(),
            last: HashMap::new(),
            // A `dir` source makes one stream per file.
            streams: if per_stream {
                1
            } else {
                cfg.nodes
                    .iter()
                    .map(|n| match n.kind {
                        crate::config::NodeKind::Dir(_) | crate::config::NodeKind::KafkaJobs(_) => 2,
                        _ => usize::from(n.role == crate::config::Role::Source),
                    })
                    .sum()
            },
        })
    }

    /// The file `stream`'s cues go to (opened on its first cue).
    fn out(&mut self, stream: &Arc<str>) -> std::io::Result<&mut Out> {
        if let Some(out) = self.single.as_mut() {
            return Ok(out);
        }
        if !self.open.contains_key(stream) {
            let out = Out::create(super::stream_path(&self.template, stream), self.format)?;
            self.open.insert(stream.clone(), out);
        }
        Ok(self.open.get_mut(stream).expect("inserted above"))
    }

    fn cue(&mut self, stream: &Arc<str>, start: f64, end: f64, text: &str) -> Result<(), String> {
        let text = if self.streams > 1 { format!("[{stream}] {text}") } else { text.to_string() };
        let format = self.format;
        let out = self.out(stream).map_err(|e| format!("writing subtitles of `{stream}`: {e}"))?;
        out.cues += 1;
        let mut cue = String::new();
        if format == SubtitleFormat::Srt {
            cue.push_str(&format!("{}\n", out.cues));
        }
        cue.push_str(&format!("{} --> {}\n{text}\n\n", timestamp(start, format), timestamp(end.max(start + 0.001), format)));
        out.w.write_all(cue.as_bytes()).and_then(|_| out.w.flush()).map_err(|e| format!("writing {}: {e}", out.path.display()))
    }

    /// Close the cues still open for `stream` (text on screen until its last frame).
    fn close_open_cues(&mut self, stream: Option<&str>) -> Result<(), String> {
        let mut open: Vec<((Arc<str>, String), f64)> = self.showing.extract_if(|(s, _), _| stream.is_none_or(|x| &**s == x)).collect();
        open.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.1.cmp(&b.0.1)));
        for ((stream, text), start) in open {
            let end = self.last.get(&stream).map_or(start, |(t, d)| t + d);
            self.cue(&stream, start, end, &text)?;
        }
        Ok(())
    }
}

impl Sink for Subtitles {
    fn describe(&self) -> String {
        let shown = crate::config::tidy_path(&self.template);
        let shown = shown.display();
        let kind = format!("{:?}", self.format).to_uppercase();
        if self.single.is_none() {
            format!("{kind} subtitles to {shown}, one file per stream")
        } else {
            format!("{kind} subtitles to {shown}")
        }
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let pts = frame.pts_seconds().unwrap_or(0.0);
        let step = frame.audio.as_ref().map(|a| a.valid as f64 / a.sample_rate as f64);
        let prev = self.last.get(&frame.stream).copied();
        let dur = step.unwrap_or_else(|| prev.map_or(0.1, |(t, d)| if pts > t { pts - t } else { d }));
        self.last.insert(frame.stream.clone(), (pts, dur));
        let io = StageError::Fatal;
        for a in &frame.results {
            match &*a.payload {
                Payload::Speech(s) => {
                    for seg in &s.spans.ended {
                        let text = self.speech_text.clone();
                        self.cue(&frame.stream, seg.start, seg.end.unwrap_or(pts), &text).map_err(io)?;
                    }
                }
                Payload::Texts(lines) => {
                    let now: Vec<String> = lines.iter().map(|l| l.text.clone()).collect();
                    let mut gone: Vec<(Arc<str>, String)> =
                        self.showing.keys().filter(|(s, t)| *s == frame.stream && !now.contains(t)).cloned().collect();
                    gone.sort_by(|a, b| self.showing[a].total_cmp(&self.showing[b]).then_with(|| a.1.cmp(&b.1)));
                    for key in gone {
                        let start = self.showing.remove(&key).expect("listed above");
                        self.cue(&key.0, start, pts, &key.1).map_err(io)?;
                    }
                    for t in now {
                        self.showing.entry((frame.stream.clone(), t)).or_insert(pts);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn end_stream(&mut self, stream: &str) -> Result<(), String> {
        self.close_open_cues(Some(stream))?;
        self.last.remove(stream);
        if self.single.is_none() {
            // A stream with no cue still gets its (empty) file: it was processed.
            let key: Arc<str> = Arc::from(stream);
            self.out(&key).map_err(|e| format!("writing subtitles of `{stream}`: {e}"))?;
            let mut out = self.open.remove(stream).expect("opened above");
            return out.close();
        }
        self.single.as_mut().expect("one file").close()
    }

    fn finish(&mut self) -> Result<(), String> {
        self.close_open_cues(None)?;
        let mut r = Ok(());
        for out in self.single.iter_mut().chain(self.open.values_mut()) {
            r = r.and(out.close());
        }
        r
    }
}

impl Build for SubtitlesSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Subtitles::build(cx.cfg, self).map(|s| Body::Sink(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{stream}` may only name files (an error at the path from the graph
    /// check, nothing created); in the file name, the folder is made before the run.
    #[test]
    fn stream_placeholder_only_in_the_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let build = |path: String| {
            let toml = format!("[sources.a]\nkind = \"testsrc\"\n[sinks.s]\nkind = \"subtitles\"\ninputs = [\"a\"]\npath = \"{path}\"\n");
            let cfg = crate::config::parse(std::path::Path::new("p.toml"), toml).unwrap();
            // (The testsrc feeding it is the wrong type: only the path's error matters here.)
            if let Some(e) = crate::graph::check(&cfg).err().and_then(|d| d.0.iter().map(|d| d.headline()).find(|h| h.contains("{stream}")))
            {
                return Err(e);
            }
            let crate::config::NodeKind::Subtitles(c) = &cfg.nodes[1].kind else { panic!("a subtitles sink") };
            Subtitles::build(&cfg, c).map(|s| s.single.is_none()).map_err(|d| d.headline())
        };
        let e = build(format!("{}/{{stream}}/cues.srt", dir.path().display())).expect_err("a folder named by the stream");
        assert!(e.starts_with("p.toml:6:8: sink `s`: `{stream}` may only appear in the file name, not in a folder"), "{e}");
        assert!(!dir.path().join("{stream}").exists());
        assert!(build(format!("{}/sub/{{stream}}.srt", dir.path().display())).unwrap());
        assert!(dir.path().join("sub").is_dir());
    }

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(0.0, SubtitleFormat::Srt), "00:00:00,000");
        assert_eq!(timestamp(3725.0456, SubtitleFormat::Srt), "01:02:05,046");
        assert_eq!(timestamp(61.5, SubtitleFormat::Vtt), "00:01:01.500");
    }
}
