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
use crate::stages::{Sink, StageError};

/// `HH:MM:SS,mmm` (SRT) or `HH:MM:SS.mmm` (WebVTT).
pub fn timestamp(seconds: f64, format: SubtitleFormat) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let sep = if format == SubtitleFormat::Srt { ',' } else { '.' };
    format!("{:02}:{:02}:{:02}{sep}{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

pub struct Subtitles {
    out: BufWriter<File>,
    path: PathBuf,
    format: SubtitleFormat,
    speech_text: String,
    cues: u64,
    /// Text on screen: (stream, text) → since when.
    showing: HashMap<(Arc<str>, String), f64>,
    /// Last pts and frame duration per stream (to close cues at the end).
    last: HashMap<Arc<str>, (f64, f64)>,
    streams: usize,
}

impl Subtitles {
    pub fn build(cfg: &PipelineConfig, c: &SubtitlesSinkConfig) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.path)?;
        let format =
            c.format.unwrap_or(if path.extension().is_some_and(|e| e == "vtt") { SubtitleFormat::Vtt } else { SubtitleFormat::Srt });
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| cfg.diag(c.path.span(), format!("cannot create folder {}: {e}", dir.display())))?;
        }
        let file = File::create(&path).map_err(|e| cfg.diag(c.path.span(), format!("cannot open {} for writing: {e}", path.display())))?;
        let mut s = Subtitles {
            out: BufWriter::new(file),
            path,
            format,
            speech_text: c.speech_text.clone(),
            cues: 0,
            showing: HashMap::new(),
            last: HashMap::new(),
            // A `dir` source makes one stream per file.
            streams: cfg
                .nodes
                .iter()
                .map(|n| match n.kind {
                    crate::config::NodeKind::Dir(_) => 2,
                    _ => usize::from(n.role == crate::config::Role::Source),
                })
                .sum(),
        };
        if format == SubtitleFormat::Vtt {
            s.out.write_all(b"WEBVTT\n\n").and_then(|_| s.out.flush()).map_err(|e| cfg.diag(c.path.span(), e.to_string()))?;
        }
        Ok(s)
    }

    fn cue(&mut self, stream: &str, start: f64, end: f64, text: &str) -> std::io::Result<()> {
        self.cues += 1;
        let text = if self.streams > 1 { format!("[{stream}] {text}") } else { text.to_string() };
        if self.format == SubtitleFormat::Srt {
            writeln!(self.out, "{}", self.cues)?;
        }
        write!(self.out, "{} --> {}\n{text}\n\n", timestamp(start, self.format), timestamp(end.max(start + 0.001), self.format))?;
        self.out.flush()
    }
}

impl Sink for Subtitles {
    fn describe(&self) -> String {
        format!("{} subtitles to {}", format!("{:?}", self.format).to_uppercase(), self.path.display())
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let pts = frame.pts_seconds().unwrap_or(0.0);
        let step = frame.audio.as_ref().map(|a| a.valid as f64 / a.sample_rate as f64);
        let prev = self.last.get(&frame.stream).copied();
        let dur = step.unwrap_or_else(|| prev.map_or(0.1, |(t, d)| if pts > t { pts - t } else { d }));
        self.last.insert(frame.stream.clone(), (pts, dur));
        let path = self.path.display().to_string();
        let io = |e: std::io::Error| StageError::Fatal(format!("writing {path}: {e}"));
        for a in &frame.results {
            match &*a.payload {
                Payload::Speech(s) => {
                    for seg in &s.ended {
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
        let mut open: Vec<((Arc<str>, String), f64)> = self.showing.extract_if(|(s, _), _| &**s == stream).collect();
        open.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.1.cmp(&b.0.1)));
        let last = self.last.remove(stream);
        for ((stream, text), start) in open {
            let end = last.map_or(start, |(t, d)| t + d);
            self.cue(&stream, start, end, &text).map_err(|e| format!("writing {}: {e}", self.path.display()))?;
        }
        self.out.flush().and_then(|_| self.out.get_ref().sync_data()).map_err(|e| format!("writing {}: {e}", self.path.display()))
    }

    fn finish(&mut self) -> Result<(), String> {
        let mut open: Vec<((Arc<str>, String), f64)> = self.showing.drain().collect();
        open.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.1.cmp(&b.0.1)));
        for ((stream, text), start) in open {
            let end = self.last.get(&stream).map_or(start, |(t, d)| t + d);
            self.cue(&stream, start, end, &text).map_err(|e| format!("writing {}: {e}", self.path.display()))?;
        }
        self.out.flush().and_then(|_| self.out.get_ref().sync_data()).map_err(|e| format!("closing {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(0.0, SubtitleFormat::Srt), "00:00:00,000");
        assert_eq!(timestamp(3725.0456, SubtitleFormat::Srt), "01:02:05,046");
        assert_eq!(timestamp(61.5, SubtitleFormat::Vtt), "00:01:01.500");
    }
}
