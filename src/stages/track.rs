//! `kind = "track"`: follows the boxes of the detection stage before it
//! (`detection`, `text_detection`, a `detections` source) from frame to
//! frame with [`crate::track::ByteTracker`], one tracker per stream, and
//! attaches the frame's tracks (id, state, age, smoothed box) and the
//! tracks that ended with it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::TrackConfig;
use crate::frame::{Frame, Payload, TrackedObject, Tracks};
use crate::stages::{Stage, StageError};
use crate::track::{ByteTracker, Detection, Params};

pub struct Track {
    name: Arc<str>,
    params: Params,
    streams: HashMap<Arc<str>, ByteTracker>,
}

impl Track {
    pub fn new(name: Arc<str>, c: &TrackConfig) -> Self {
        let params = Params {
            track_activation_threshold: *c.track_activation_threshold.get_ref(),
            lost_track_buffer: *c.lost_track_buffer.get_ref(),
            minimum_matching_threshold: *c.minimum_matching_threshold.get_ref(),
            frame_rate: *c.frame_rate.get_ref(),
            minimum_consecutive_frames: *c.minimum_consecutive_frames.get_ref(),
            ..Params::default()
        };
        Track { name, params, streams: HashMap::new() }
    }
}

/// The boxes of the latest box-yielding result: detections (with their
/// labels) or text boxes (class 0).
fn boxes(frame: &Frame) -> (Vec<Detection>, Vec<Option<Arc<str>>>) {
    for a in frame.results.iter().rev() {
        match &*a.payload {
            Payload::Objects(o) => {
                return (
                    o.iter().map(|o| Detection { bbox: o.bbox, score: o.score, class: o.class }).collect(),
                    o.iter().map(|o| o.label.clone()).collect(),
                );
            }
            Payload::TextBoxes(b) => {
                return (b.iter().map(|b| Detection { bbox: b.bbox, score: b.score, class: 0 }).collect(), vec![None; b.len()]);
            }
            _ => {}
        }
    }
    (Vec::new(), Vec::new())
}

impl Stage for Track {
    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let (dets, labels) = boxes(frame);
        let tracker = self.streams.entry(frame.stream.clone()).or_insert_with(|| ByteTracker::new(self.params.clone()));
        // A frame the detector skipped (`interval`): the boxes are predicted.
        let predicted = frame.predicted();
        let u = if predicted { tracker.predict(frame.seq) } else { tracker.update(&dets, frame.seq) };
        let label_of_class = |class: u32| labels.iter().zip(&dets).find(|(_, d)| d.class == class).and_then(|(l, _)| l.clone());
        let tracks = u
            .tracks
            .into_iter()
            .map(|t| TrackedObject {
                track_id: t.track_id,
                state: t.state,
                class: t.class,
                label: t.detection.and_then(|i| labels[i].clone()).or_else(|| label_of_class(t.class)),
                bbox: t.detection.map(|i| dets[i].bbox),
                smoothed: t.smoothed,
                score: t.score,
                age: t.age,
                hits: t.hits,
                predicted,
            })
            .collect();
        frame.attach(&self.name, Payload::Tracks(Tracks { tracks, ended: u.ended }));
        Ok(())
    }

    fn describe(&self) -> String {
        let p = &self.params;
        format!(
            "ByteTrack: activation {}, matching {}, lost buffer {} frames, confirmed after {}",
            p.track_activation_threshold,
            p.minimum_matching_threshold,
            p.max_time_lost(),
            p.minimum_consecutive_frames
        )
    }
}
