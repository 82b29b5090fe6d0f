//! Non-maximum suppression for detectors: greedy, class-aware.

/// An axis-aligned detection in any coordinate space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    /// x0, y0, x1, y1.
    pub bbox: [f32; 4],
    pub score: f32,
    pub class: u32,
}

/// Intersection over union of two boxes (0 when either is empty).
pub fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let area = |r: &[f32; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let union = area(a) + area(b) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

/// Keep the best-scoring detections: a detection is dropped when a kept one
/// of the same class overlaps it by more than `iou_threshold`. Returns at most
/// `max` detections, best first. `dets` is reordered.
pub fn nms(dets: &mut [Detection], iou_threshold: f32, max: usize) -> Vec<Detection> {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::with_capacity(max.min(dets.len()));
    for d in dets.iter() {
        if kept.len() >= max {
            break;
        }
        if kept.iter().all(|k| k.class != d.class || iou(&k.bbox, &d.bbox) <= iou_threshold) {
            kept.push(*d);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(x0: f32, y0: f32, x1: f32, y1: f32, score: f32, class: u32) -> Detection {
        Detection { bbox: [x0, y0, x1, y1], score, class }
    }

    #[test]
    fn iou_cases() {
        assert_eq!(iou(&[0.0, 0.0, 2.0, 2.0], &[0.0, 0.0, 2.0, 2.0]), 1.0);
        assert_eq!(iou(&[0.0, 0.0, 2.0, 2.0], &[2.0, 2.0, 4.0, 4.0]), 0.0);
        assert!((iou(&[0.0, 0.0, 2.0, 2.0], &[1.0, 0.0, 3.0, 2.0]) - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(iou(&[1.0, 1.0, 1.0, 1.0], &[1.0, 1.0, 1.0, 1.0]), 0.0, "empty boxes");
    }

    #[test]
    fn suppresses_overlaps_within_a_class_only() {
        let mut v = vec![
            d(0.0, 0.0, 10.0, 10.0, 0.8, 0),
            d(1.0, 1.0, 11.0, 11.0, 0.9, 0), // best of class 0
            d(1.0, 1.0, 11.0, 11.0, 0.7, 1), // same place, other class: kept
            d(50.0, 50.0, 60.0, 60.0, 0.6, 0),
        ];
        let k = nms(&mut v, 0.5, 100);
        assert_eq!(k, vec![d(1.0, 1.0, 11.0, 11.0, 0.9, 0), d(1.0, 1.0, 11.0, 11.0, 0.7, 1), d(50.0, 50.0, 60.0, 60.0, 0.6, 0)]);
    }

    #[test]
    fn threshold_is_exclusive_and_max_caps() {
        // IoU exactly 1/3: kept at threshold 1/3, dropped below it.
        let base = vec![d(0.0, 0.0, 2.0, 2.0, 0.9, 0), d(1.0, 0.0, 3.0, 2.0, 0.8, 0)];
        assert_eq!(nms(&mut base.clone(), 1.0 / 3.0, 10).len(), 2);
        assert_eq!(nms(&mut base.clone(), 0.3, 10).len(), 1);
        let mut many: Vec<_> = (0..20).map(|i| d(i as f32 * 10.0, 0.0, i as f32 * 10.0 + 5.0, 5.0, i as f32 / 20.0, 0)).collect();
        let k = nms(&mut many, 0.5, 5);
        assert_eq!(k.len(), 5);
        assert_eq!(k[0].score, 19.0 / 20.0);
    }
}
