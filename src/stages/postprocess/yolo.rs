//! `kind = "detection"`: YOLO-family outputs (v8/v11, v5, NMS-free end to
//! end) → confidence filter → class-aware NMS → boxes mapped back through the
//! letterbox to source pixels, with class names.

use std::sync::Arc;

use super::nms::{Detection, nms};
use crate::config::{DetectionConfig, Diagnostic, YoloFormat};
use crate::frame::{Frame, Letterbox, Object, Payload};
use crate::gating::carry::CarryCheck;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};

/// Which layout a `[B, a, b]` output has.
pub fn resolve_format(format: YoloFormat, dims: &[usize]) -> Result<YoloFormat, String> {
    let [_, a, b] = dims else { return Err(format!("detector output must be [B, A, N], got {dims:?}")) };
    Ok(match format {
        YoloFormat::Auto if *b == 6 => YoloFormat::End2end,
        YoloFormat::Auto if a < b => YoloFormat::Yolov8,
        YoloFormat::Auto => YoloFormat::Yolov5,
        f => f,
    })
}

/// Candidates above `confidence` from one image's output, boxes in model pixels.
pub fn candidates(data: &[f32], a: usize, b: usize, format: YoloFormat, confidence: f32) -> Result<Vec<Detection>, String> {
    let mut out = Vec::new();
    let xyxy = |cx: f32, cy: f32, w: f32, h: f32| [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0];
    match format {
        YoloFormat::Yolov8 => {
            if a < 5 {
                return Err(format!("yolov8 output needs 4 + classes rows, got {a}"));
            }
            let at = |row: usize, j: usize| data[row * b + j];
            for j in 0..b {
                let (class, score) = (4..a).map(|r| (r - 4, at(r, j))).fold((0, f32::MIN), |m, x| if x.1 > m.1 { x } else { m });
                if score >= confidence {
                    out.push(Detection { bbox: xyxy(at(0, j), at(1, j), at(2, j), at(3, j)), score, class: class as u32 });
                }
            }
        }
        YoloFormat::Yolov5 => {
            if b < 6 {
                return Err(format!("yolov5 output needs 5 + classes columns, got {b}"));
            }
            for row in data.chunks_exact(b).take(a) {
                let (class, cls) = row[5..].iter().enumerate().fold((0, f32::MIN), |m, (i, &v)| if v > m.1 { (i, v) } else { m });
                let score = row[4] * cls;
                if score >= confidence {
                    out.push(Detection { bbox: xyxy(row[0], row[1], row[2], row[3]), score, class: class as u32 });
                }
            }
        }
        YoloFormat::End2end => {
            if b != 6 {
                return Err(format!("end-to-end output needs 6 columns, got {b}"));
            }
            for row in data.chunks_exact(6).take(a) {
                if row[4] >= confidence {
                    out.push(Detection { bbox: [row[0], row[1], row[2], row[3]], score: row[4], class: row[5].max(0.0).round() as u32 });
                }
            }
        }
        YoloFormat::Auto => unreachable!("resolved before"),
        YoloFormat::Centerface => return Err("centerface outputs are decoded by their own stage".into()),
    }
    Ok(out)
}

pub struct Yolo {
    name: Arc<str>,
    cfg: DetectionConfig,
    labels: Vec<Arc<str>>,
    /// `motion` upstream: carried stretches whose boxes had moved.
    carry: CarryCheck,
}

impl Yolo {
    pub fn new(name: Arc<str>, cfg: DetectionConfig, labels: Vec<String>) -> Self {
        Yolo { name, cfg, labels: labels.into_iter().map(Arc::from).collect(), carry: CarryCheck::default() }
    }

    /// Objects in source pixels for one image's output.
    pub fn objects(&self, data: &[f32], dims: &[usize], lb: &Letterbox) -> Result<Vec<Object>, String> {
        let format = resolve_format(self.cfg.format, dims)?;
        let (a, b) = (dims[1], dims[2]);
        let mut cands = candidates(&data[..a * b], a, b, format, self.cfg.confidence)?;
        if self.cfg.class_agnostic {
            cands.iter_mut().for_each(|d| d.class = 0);
        }
        let kept = if format == YoloFormat::End2end {
            cands.sort_by(|x, y| y.score.total_cmp(&x.score));
            cands.truncate(self.cfg.max_detections);
            cands
        } else {
            nms(&mut cands, self.cfg.iou, self.cfg.max_detections)
        };
        // Class ids were flattened for class-agnostic NMS; take them again from the data.
        let originals = candidates(&data[..a * b], a, b, format, self.cfg.confidence)?;
        Ok(kept
            .into_iter()
            .map(|d| {
                let class = if self.cfg.class_agnostic {
                    originals.iter().find(|o| o.bbox == d.bbox && o.score == d.score).map_or(0, |o| o.class)
                } else {
                    d.class
                };
                let (x0, y0) = lb.unmap(d.bbox[0], d.bbox[1]);
                let (x1, y1) = lb.unmap(d.bbox[2], d.bbox[3]);
                Object { bbox: [x0, y0, x1, y1], score: d.score, class, label: self.labels.get(class as usize).cloned(), keypoints: vec![] }
            })
            .filter(|o| o.bbox[2] > o.bbox[0] && o.bbox[3] > o.bbox[1])
            .collect())
    }
}

impl Stage for Yolo {
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!("{:?} confidence {} iou {} max {}, {} class names", c.format, c.confidence, c.iou, c.max_detections, self.labels.len())
            .to_lowercase()
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        // Not inferred (`interval`): no outputs to read; the tracker downstream predicts.
        if frame.predicted() {
            return Ok(());
        }
        let out = super::outputs(frame)?;
        let want = self.cfg.output.as_ref().map(|s| s.get_ref().as_str());
        let t = super::output(out, want)?;
        let lb = out.letterbox.ok_or_else(|| StageError::Frame("model outputs carry no letterbox (the model ran on crops)".into()))?;
        let objects = self.objects(&t.data, &t.shape, &lb).map_err(StageError::Frame)?;
        let found: Vec<[f32; 4]> = objects.iter().map(|o| o.bbox).collect();
        if let Some((node, frames)) = self.carry.check(frame, &found) {
            frame.attach(&self.name, Payload::CarriedMoved { node, frames });
        }
        frame.attach(&self.name, Payload::Objects(objects));
        Ok(())
    }
}

impl Build for DetectionConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        // CenterFace is a detection format of its own (faces and landmarks).
        if self.format == crate::config::YoloFormat::Centerface {
            return Ok(Body::Stage(Box::new(super::centerface::CenterFace::new(cx.name.clone(), self.clone()))));
        }
        let names = cx.labels(self.labels.as_ref())?;
        Ok(Body::Stage(Box::new(Yolo::new(cx.name.clone(), self.clone(), names))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::postprocess::parse_names;

    #[test]
    fn parses_ultralytics_names() {
        assert_eq!(parse_names("{0: 'person', 1: 'bicycle', 2: \"traffic light\"}"), vec!["person", "bicycle", "traffic light"]);
        assert_eq!(parse_names("{1: 'b', 0: 'a'}"), vec!["a", "b"]);
        assert!(parse_names("").is_empty());
    }

    #[test]
    fn auto_format_from_shape() {
        assert_eq!(resolve_format(YoloFormat::Auto, &[1, 84, 8400]).unwrap(), YoloFormat::Yolov8);
        assert_eq!(resolve_format(YoloFormat::Auto, &[1, 25200, 85]).unwrap(), YoloFormat::Yolov5);
        assert_eq!(resolve_format(YoloFormat::Auto, &[1, 300, 6]).unwrap(), YoloFormat::End2end);
        assert_eq!(resolve_format(YoloFormat::Yolov5, &[1, 300, 6]).unwrap(), YoloFormat::Yolov5);
        assert!(resolve_format(YoloFormat::Auto, &[1, 2, 3, 4]).is_err());
    }

    #[test]
    fn v8_layout_is_channels_first() {
        // Two anchors, two classes: rows cx, cy, w, h, c0, c1.
        let data = [10.0, 30.0, 10.0, 30.0, 4.0, 4.0, 4.0, 4.0, 0.1, 0.2, 0.8, 0.6];
        let c = candidates(&data, 6, 2, YoloFormat::Yolov8, 0.5).unwrap();
        assert_eq!(
            c,
            vec![
                Detection { bbox: [8.0, 8.0, 12.0, 12.0], score: 0.8, class: 1 },
                Detection { bbox: [28.0, 28.0, 32.0, 32.0], score: 0.6, class: 1 }
            ]
        );
    }
}
