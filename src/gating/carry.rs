//! Whether a stretch of carried frames (`motion`) was stale: the boxes a
//! detection postprocess finds on the first inferred frame after it, against
//! the boxes it carried. Owns that comparison and its per-stream memory; the
//! postprocess (`text_detection`, `detection`) attaches what it found
//! ([`crate::frame::Payload::CarriedMoved`]) and the runtime counts it for
//! the infer stage (`carried_moved`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::frame::{Frame, WorkMode};
use crate::track::iou;

/// A box and its carried self are "the same" at this IoU and above.
pub const SAME_BOX_IOU: f64 = 0.8;

/// Per stream: the boxes of the last inferred frame and how many frames carried them since.
#[derive(Default)]
pub struct CarryCheck {
    streams: HashMap<Arc<str>, (Vec<[f32; 4]>, u32)>,
}

impl CarryCheck {
    /// `boxes`: what the postprocess found on `frame`. On an inferred frame
    /// after carried ones: the infer stage and the number of frames carried,
    /// when the boxes had moved meanwhile (a box with no partner at
    /// [`SAME_BOX_IOU`] on either side: it moved, appeared or vanished).
    pub fn check(&mut self, frame: &Frame, boxes: &[[f32; 4]]) -> Option<(Arc<str>, u32)> {
        let (node, mode) = frame.latest_work()?;
        if self.streams.len() >= 4096 && !self.streams.contains_key(&frame.stream) {
            self.streams.clear();
        }
        let s = self.streams.entry(frame.stream.clone()).or_default();
        match mode {
            WorkMode::Carried => {
                s.1 += 1;
                None
            }
            WorkMode::Predicted => None,
            WorkMode::Inferred => {
                let carried = std::mem::take(&mut s.1);
                let moved = carried > 0 && !same(&s.0, boxes);
                s.0 = boxes.to_vec();
                moved.then_some((node, carried))
            }
        }
    }
}

/// Every box of each set has a partner in the other at [`SAME_BOX_IOU`] or more.
fn same(a: &[[f32; 4]], b: &[[f32; 4]]) -> bool {
    let covered = |x: &[[f32; 4]], y: &[[f32; 4]]| x.iter().all(|p| y.iter().any(|q| iou(*p, *q) >= SAME_BOX_IOU));
    covered(a, b) && covered(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_that_moved_beyond_jitter_are_not_the_same() {
        let a = [[100.0, 100.0, 300.0, 160.0]];
        assert!(same(&a, &[[102.0, 101.0, 302.0, 161.0]]), "jitter");
        assert!(!same(&a, &[[130.0, 100.0, 330.0, 160.0]]), "30 px along: IoU 0.74");
        assert!(!same(&a, &[]), "vanished");
        assert!(!same(&[], &a), "appeared");
        assert!(same(&[], &[]));
    }
}
