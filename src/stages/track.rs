//! `kind = "track"`: follows the boxes of the detection stage before it
//! (`detection`, `text_detection`, a `detections` source) from frame to
//! frame with [`crate::track::ByteTracker`], one tracker per stream, and
//! attaches the frame's tracks (id, state, age, smoothed box) and the
//! tracks that ended with it. Each ended track is also a `track_ended`
//! event with its lifetime, raised on the frame it ended with; tracks still
//! alive when the input ends end with it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Diagnostic, TrackConfig};
use crate::frame::{Event, EventKind, Frame, Payload, TrackRef, TrackedObject, Tracks};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};
use crate::track::{ByteTracker, Detection, Params};

pub struct Track {
    name: Arc<str>,
    params: Params,
    streams: HashMap<Arc<str>, ByteTracker>,
    lives: HashMap<Arc<str>, Lifetimes>,
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
        Track { name, params, streams: HashMap::new(), lives: HashMap::new() }
    }
}

/// The boxes of the latest box-yielding result: detections (with their
/// labels) or text boxes (class 0).
fn boxes(frame: &Frame) -> (Vec<Detection>, Vec<Option<Arc<str>>>) {
    for a in frame.results.iter().rev() {
        match &*a.payload {
            Payload::Objects(_) | Payload::Custom(_) if a.payload.objects().is_some() => {
                let o = a.payload.objects().unwrap_or_default();
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
        let tracks: Vec<TrackedObject> = u
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
        let pts_ms = frame.pts_seconds().map(|s| s * 1e3);
        let ended = self.lives.entry(frame.stream.clone()).or_default().update(frame.seq, pts_ms, &tracks, &u.ended);
        frame.events.extend(ended.into_iter().map(|k| Event::new(frame.stream.clone(), k)));
        frame.attach(&self.name, Payload::Tracks(Tracks { tracks, ended: u.ended }));
        Ok(())
    }

    fn finish(&mut self) -> Vec<Event> {
        let mut streams: Vec<(Arc<str>, Lifetimes)> = self.lives.drain().collect();
        streams.sort_by(|a, b| a.0.cmp(&b.0));
        streams.into_iter().flat_map(|(s, l)| l.finish().into_iter().map(move |k| Event::new(s.clone(), k))).collect()
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

/// One confirmed track's lifetime so far: first and last match (frame
/// number, timestamp in ms), hits, class.
#[derive(Debug, Clone)]
struct Life {
    track: TrackRef,
    first: (u64, Option<f64>),
    last: (u64, Option<f64>),
    hits: u64,
}

/// The lifetimes of one stream's tracks, for their `track_ended` events.
#[derive(Debug, Default)]
struct Lifetimes {
    lives: HashMap<u64, Life>,
    /// Frame number and timestamp of the latest updates (a track's first
    /// match is `age` updates back when it gets its id).
    recent: std::collections::VecDeque<(u64, Option<f64>)>,
}

/// Updates remembered: a track gets its id within a few updates of its first match.
const RECENT: usize = 256;

impl Lifetimes {
    fn update(&mut self, seq: u64, pts_ms: Option<f64>, tracks: &[TrackedObject], ended: &[crate::track::EndedTrack]) -> Vec<EventKind> {
        self.recent.push_back((seq, pts_ms));
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
        for t in tracks {
            let Some(id) = t.track_id else { continue };
            let life = self.lives.entry(id).or_insert_with(|| {
                let back = (t.age as usize).clamp(1, self.recent.len());
                Life {
                    track: TrackRef { id, class: t.class, label: t.label.clone() },
                    first: self.recent[self.recent.len() - back],
                    last: (seq, pts_ms),
                    hits: t.hits,
                }
            });
            if t.bbox.is_some() {
                life.last = (seq, pts_ms);
                life.hits = t.hits;
            }
            if life.track.label.is_none() {
                life.track.label = t.label.clone();
            }
        }
        ended
            .iter()
            .map(|e| {
                let life = self.lives.remove(&e.track_id);
                let duration_ms = life.as_ref().and_then(|l| duration(l.first, l.last));
                let track = life.map_or_else(|| TrackRef { id: e.track_id, class: e.class, label: None }, |l| l.track);
                EventKind::TrackEnded { track, first_seq: e.first_seq, last_seq: e.last_seq, hits: e.hits, duration_ms, with_stream: false }
            })
            .collect()
    }

    /// The stream ended: every track still alive ends with it, in id order.
    fn finish(self) -> Vec<EventKind> {
        let mut lives: Vec<Life> = self.lives.into_values().collect();
        lives.sort_by_key(|l| l.track.id);
        lives
            .into_iter()
            .map(|l| EventKind::TrackEnded {
                duration_ms: duration(l.first, l.last),
                track: l.track,
                first_seq: l.first.0,
                last_seq: l.last.0,
                hits: l.hits,
                with_stream: true,
            })
            .collect()
    }
}

fn duration(first: (u64, Option<f64>), last: (u64, Option<f64>)) -> Option<u64> {
    Some((last.1? - first.1?).max(0.0).round() as u64)
}

impl Build for TrackConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Stage(Box::new(Track::new(cx.name.clone(), self))))
    }
}
