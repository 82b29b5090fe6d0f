//! DB text detection postprocess (PP-OCR det): probability map → threshold →
//! connected regions → minimum-area boxes with a score → unclip → source pixels.

use std::sync::Arc;

use super::geometry::{Pt, convex_hull, in_convex, min_area_rect};
use crate::config::{Diagnostic, TextDetectionConfig};
use crate::frame::{Frame, Letterbox, Payload, TextBox};
use crate::gating::carry::CarryCheck;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};

/// Reusable scratch space so steady-state frames do not allocate maps.
#[derive(Default)]
pub struct DbScratch {
    labels: Vec<u32>,
    stack: Vec<u32>,
    points: Vec<Pt>,
}

/// Find text boxes in a `w` × `h` probability map. Boxes come out in model
/// pixels mapped through `lb` to source pixels, sorted top to bottom, left to right.
pub fn detect(prob: &[f32], w: usize, h: usize, p: &TextDetectionConfig, lb: &Letterbox, s: &mut DbScratch) -> Vec<TextBox> {
    assert_eq!(prob.len(), w * h);
    s.labels.clear();
    s.labels.resize(w * h, 0);
    let on = |i: usize| prob[i] > p.threshold;
    let mut boxes = Vec::new();
    let mut next_label = 0u32;
    for start in 0..w * h {
        if s.labels[start] != 0 || !on(start) {
            continue;
        }
        next_label += 1;
        if next_label as usize > p.max_candidates {
            break;
        }
        // Flood fill (8-connected), collecting boundary pixel centres.
        s.points.clear();
        s.stack.clear();
        s.stack.push(start as u32);
        s.labels[start] = next_label;
        while let Some(i) = s.stack.pop() {
            let i = i as usize;
            let (x, y) = (i % w, i / w);
            let mut boundary = x == 0 || y == 0 || x + 1 == w || y + 1 == h;
            for (dx, dy) in [(-1i32, -1i32), (0, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (0, 1), (1, 1)] {
                let (nx, ny) = (x as i32 + dx, y as i32 + dy);
                if nx < 0 || ny < 0 || nx >= w as i32 || ny >= h as i32 {
                    continue;
                }
                let j = ny as usize * w + nx as usize;
                if !on(j) {
                    if dx == 0 || dy == 0 {
                        boundary = true;
                    }
                    continue;
                }
                if s.labels[j] == 0 {
                    s.labels[j] = next_label;
                    s.stack.push(j as u32);
                }
            }
            if boundary {
                s.points.push([x as f32, y as f32]);
            }
        }
        let hull = convex_hull(&mut s.points);
        let rect = min_area_rect(&hull);
        if rect.short_side() < p.min_size {
            continue;
        }
        let score = mean_inside(prob, w, h, &rect.corners());
        if score < p.box_threshold {
            continue;
        }
        // Unclip: grow by area × ratio / perimeter (a polygon offset; for a rectangle, every side moves out by d).
        let (rw, rh) = (rect.w, rect.h);
        let d = rw * rh * p.unclip_ratio / (2.0 * (rw + rh));
        let grown = rect.grow(d);
        if grown.short_side() < p.min_size + 2.0 {
            continue;
        }
        // Pixel (i) covers [i, i+1): its centre is i + 0.5 in tensor coordinates.
        let quad = grown.corners().map(|[x, y]| {
            let (sx, sy) = lb.unmap(x + 0.5, y + 0.5);
            [sx, sy]
        });
        let (mut x0, mut y0, mut x1, mut y1) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
        for [x, y] in quad {
            x0 = x0.min(x);
            y0 = y0.min(y);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if x1 - x0 < 1.0 || y1 - y0 < 1.0 {
            continue; // entirely in the padding
        }
        boxes.push(TextBox { quad, bbox: [x0, y0, x1, y1], score });
    }
    boxes.sort_by(|a, b| (a.bbox[1] as i32 / 10, a.bbox[0] as i32).cmp(&(b.bbox[1] as i32 / 10, b.bbox[0] as i32)));
    boxes
}

/// Mean probability over the pixels whose centres lie in `quad`.
fn mean_inside(prob: &[f32], w: usize, h: usize, quad: &[Pt; 4]) -> f32 {
    let xs = quad.iter().map(|p| p[0]);
    let ys = quad.iter().map(|p| p[1]);
    let x0 = xs.clone().fold(f32::MAX, f32::min).floor().max(0.0) as usize;
    let x1 = (xs.fold(f32::MIN, f32::max).ceil() as usize).min(w - 1);
    let y0 = ys.clone().fold(f32::MAX, f32::min).floor().max(0.0) as usize;
    let y1 = (ys.fold(f32::MIN, f32::max).ceil() as usize).min(h - 1);
    let (mut sum, mut n) = (0.0f64, 0u32);
    for y in y0..=y1 {
        for x in x0..=x1 {
            if in_convex(quad, [x as f32, y as f32]) {
                sum += prob[y * w + x] as f64;
                n += 1;
            }
        }
    }
    if n == 0 { 0.0 } else { (sum / n as f64) as f32 }
}

/// `kind = "text_detection"`.
pub struct TextDetection {
    name: Arc<str>,
    cfg: TextDetectionConfig,
    scratch: DbScratch,
    /// `motion` upstream: carried stretches whose boxes had moved.
    carry: CarryCheck,
}

impl TextDetection {
    pub fn new(name: Arc<str>, cfg: TextDetectionConfig) -> Self {
        TextDetection { name, cfg, scratch: DbScratch::default(), carry: CarryCheck::default() }
    }
}

impl Stage for TextDetection {
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!("DB threshold {} box_threshold {} unclip_ratio {}", c.threshold, c.box_threshold, c.unclip_ratio)
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        // Not inferred (`interval`): no outputs to read; the tracker downstream predicts.
        if frame.predicted() {
            return Ok(());
        }
        let out = super::outputs(frame)?;
        let want = self.cfg.output.as_ref().map(|s| s.get_ref().as_str());
        let t = super::output(out, want)?;
        let (h, w) = match t.shape.as_slice() {
            [1, 1, h, w] => (*h, *w),
            s => {
                return Err(StageError::Frame(format!("probability map must be [1, 1, H, W], got {s:?}")));
            }
        };
        let lb = out
            .letterbox
            .ok_or_else(|| StageError::Frame("model outputs carry no letterbox (the model ran on crops, not on the frame)".into()))?;
        let boxes = detect(&t.data, w, h, &self.cfg, &lb, &mut self.scratch);
        let found: Vec<[f32; 4]> = boxes.iter().map(|b| b.bbox).collect();
        if let Some((node, frames)) = self.carry.check(frame, &found) {
            frame.attach(&self.name, Payload::CarriedMoved { node, frames });
        }
        frame.attach(&self.name, Payload::TextBoxes(boxes));
        Ok(())
    }
}

impl Build for TextDetectionConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Stage(Box::new(TextDetection::new(cx.name.clone(), self.clone()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_with(w: usize, h: usize, rects: &[(usize, usize, usize, usize, f32)]) -> Vec<f32> {
        let mut m = vec![0.05f32; w * h];
        for &(x0, y0, x1, y1, v) in rects {
            for y in y0..y1 {
                for x in x0..x1 {
                    m[y * w + x] = v;
                }
            }
        }
        m
    }

    fn params() -> TextDetectionConfig {
        TextDetectionConfig::default()
    }

    #[test]
    fn one_region_one_box_with_unclip() {
        let (w, h) = (64, 32);
        let prob = map_with(w, h, &[(10, 10, 50, 20, 0.9)]);
        let lb = Letterbox::stretch(64, 32, 64, 32);
        let boxes = detect(&prob, w, h, &params(), &lb, &mut DbScratch::default());
        assert_eq!(boxes.len(), 1);
        let b = &boxes[0];
        // Pixel centres 10..=49 x 10..=19 → 39 x 9, d = 39*9*1.6/(2*48) = 5.85.
        let d = 39.0 * 9.0 * 1.6 / 96.0;
        assert!((b.bbox[0] - (10.5 - d)).abs() < 1e-3, "{b:?}");
        assert!((b.bbox[2] - (49.5 + d)).abs() < 1e-3, "{b:?}");
        assert!((b.bbox[1] - (10.5 - d)).abs() < 1e-3, "{b:?}");
        assert!((b.score - 0.9).abs() < 1e-3);
    }

    #[test]
    fn low_score_and_tiny_regions_are_dropped() {
        let (w, h) = (64, 32);
        // 0.4 passes the pixel threshold but not the box threshold; 2x2 is below min_size.
        let prob = map_with(w, h, &[(5, 5, 30, 15, 0.4), (40, 20, 42, 22, 0.95)]);
        let lb = Letterbox::stretch(64, 32, 64, 32);
        assert!(detect(&prob, w, h, &params(), &lb, &mut DbScratch::default()).is_empty());
    }

    #[test]
    fn maps_back_through_letterbox() {
        // Model input 64x64 letterboxed from 128x64 source: scale 0.5, pad_y 16.
        let lb = Letterbox::fit(128, 64, 64, 64);
        assert_eq!((lb.pad_y, lb.new_h), (16, 32));
        let prob = map_with(64, 64, &[(10, 26, 50, 36, 0.9)]);
        let boxes = detect(&prob, 64, 64, &params(), &lb, &mut DbScratch::default());
        assert_eq!(boxes.len(), 1);
        let b = &boxes[0].bbox;
        let cy = (b[1] + b[3]) / 2.0;
        let cx = (b[0] + b[2]) / 2.0;
        // The region covers [10, 50) x [26, 36) in the tensor: centre (30, 31) → source (60, (31 - 16) * 2 = 30).
        assert!((cx - 60.0).abs() < 1e-3 && (cy - 30.0).abs() < 1e-3, "{b:?}");
    }

    #[test]
    fn separate_regions_sorted_in_reading_order() {
        let prob = map_with(100, 60, &[(60, 5, 90, 15, 0.9), (5, 5, 40, 15, 0.9), (5, 35, 60, 50, 0.9)]);
        let lb = Letterbox::stretch(100, 60, 100, 60);
        let boxes = detect(&prob, 100, 60, &params(), &lb, &mut DbScratch::default());
        assert_eq!(boxes.len(), 3);
        assert!(boxes[0].bbox[0] < boxes[1].bbox[0]);
        assert!(boxes[2].bbox[1] > boxes[0].bbox[3]);
    }

    #[test]
    fn diagonal_pixels_join_one_region() {
        let mut prob = vec![0.0f32; 20 * 20];
        for i in 2..18 {
            for t in 0..8 {
                prob[i * 20 + (i + t).min(19)] = 0.9;
            }
        }
        let lb = Letterbox::stretch(20, 20, 20, 20);
        let boxes = detect(&prob, 20, 20, &params(), &lb, &mut DbScratch::default());
        assert_eq!(boxes.len(), 1, "{boxes:?}");
    }
}
