//! `kind = "detections"`: boxes read from a MOT Challenge text file
//! (`frame, id, x, y, w, h, score[, class, ...]`, frames numbered from 1)
//! instead of from a model: one frame per frame number, with no image and
//! the boxes attached as the source's detections. For trackers and
//! analytics fed by an external detector, and for scoring them offline.

use std::collections::BTreeMap;

use crate::config::{DetectionsSourceConfig, Diagnostic, PipelineConfig};
use crate::frame::{Object, Payload};
use crate::runtime::SourceCtx;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Source};

pub struct DetectionsSource {
    path: std::path::PathBuf,
    rate: f64,
    /// Boxes per frame number (from 1).
    frames: BTreeMap<u64, Vec<Object>>,
    count: u64,
}

/// Parse MOT text: `Err((line, message))` for the first bad line (1-based).
pub fn parse_mot(text: &str) -> Result<BTreeMap<u64, Vec<Object>>, (usize, String)> {
    let mut frames: BTreeMap<u64, Vec<Object>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 7 {
            return Err((n + 1, format!("expected at least 7 comma-separated fields (frame, id, x, y, w, h, score), got {}", f.len())));
        }
        let num = |i: usize, what: &str| -> Result<f64, (usize, String)> {
            f[i].parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| (n + 1, format!("{what} `{}` is not a number", f[i])))
        };
        let frame = num(0, "frame")?;
        if frame < 1.0 || frame.fract() != 0.0 || frame > 1e9 {
            return Err((n + 1, format!("frame `{}` must be a whole number from 1", f[0])));
        }
        let (x, y, w, h, score) = (num(2, "x")?, num(3, "y")?, num(4, "width")?, num(5, "height")?, num(6, "score")?);
        if w < 0.0 || h < 0.0 {
            return Err((n + 1, "width and height must not be negative".into()));
        }
        // MOT ground truth has the class in field 8; detection files put -1 (or 3D coordinates) there.
        let class =
            f.get(7).and_then(|c| c.parse::<f64>().ok()).filter(|c| *c >= 0.0 && c.fract() == 0.0 && *c < 1e6).map_or(0, |c| c as u32);
        frames.entry(frame as u64).or_default().push(Object {
            bbox: [x as f32, y as f32, (x + w) as f32, (y + h) as f32],
            score: score as f32,
            class,
            label: None,
            keypoints: vec![],
        });
    }
    Ok(frames)
}

impl DetectionsSource {
    pub fn build(cfg: &PipelineConfig, c: &DetectionsSourceConfig, max_frames: Option<u64>) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.uri)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| cfg.diag(c.uri.span(), format!("cannot read detections {}: {e}", path.display())))?;
        let frames = parse_mot(&text).map_err(|(line, msg)| cfg.diag(c.uri.span(), format!("{}:{line}: {msg}", path.display())))?;
        let last = frames.keys().next_back().copied().unwrap_or(0);
        let count = c.frames.unwrap_or(last);
        let count = max_frames.map_or(count, |m| count.min(m));
        Ok(DetectionsSource { path, rate: *c.rate.get_ref(), frames, count })
    }
}

impl Source for DetectionsSource {
    fn expected_frames(&self) -> Option<u64> {
        Some(self.count)
    }

    fn describe(&self) -> String {
        let boxes: usize = self.frames.values().map(Vec::len).sum();
        format!("detections from {}: {} frames, {boxes} boxes, {} fps", self.path.display(), self.count, self.rate)
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let name = ctx.name.clone();
        for seq in 0..self.count {
            if ctx.stopping() {
                break;
            }
            let pts_ms = (seq as f64 * 1000.0 / self.rate).round() as i64;
            let mut frame = ctx.new_frame(seq, Some(pts_ms), (1, 1000), None);
            let objects = self.frames.remove(&(seq + 1)).unwrap_or_default();
            frame.attach(&name, Payload::Objects(objects));
            if !ctx.emit(frame) {
                break;
            }
        }
        Ok(())
    }
}

impl Build for DetectionsSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        DetectionsSource::build(cx.cfg, self, cx.max_frames()).map(|s| Body::Source(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mot_lines() {
        let f = parse_mot("1,-1,10,20,30,40,0.9,-1,-1,-1\n# comment\n\n3, 2, 0, 0, 5, 5, 1, 2, 1\n").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[&1][0], Object { bbox: [10.0, 20.0, 40.0, 60.0], score: 0.9, class: 0, label: None, keypoints: vec![] });
        assert_eq!((f[&3][0].class, f[&3][0].bbox), (2, [0.0, 0.0, 5.0, 5.0]));
    }

    #[test]
    fn bad_lines_are_located() {
        assert_eq!(parse_mot("1,1,1,1,1,1,1\n1,1,x,1,1,1,1\n").unwrap_err(), (2, "x `x` is not a number".into()));
        assert_eq!(parse_mot("0,1,1,1,1,1,1\n").unwrap_err().0, 1);
        assert_eq!(parse_mot("1,1,1,1\n").unwrap_err().0, 1);
        assert!(parse_mot("1,1,1,1,-1,1,1\n").is_err());
        assert!(parse_mot("1.5,1,1,1,1,1,1\n").is_err());
    }
}
