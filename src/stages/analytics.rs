//! `kind = "analytics"`: counting lines and zones over the tracks of the
//! `track` stage before it ([`crate::analytics`]). Raises `crossed`,
//! `entered` and `left` events on the frame they happen in (the runtime
//! sends them on after it and counts them), and attaches the running counts
//! with the lines and zones (drawn by the `video` and `images` sinks).

use std::sync::Arc;

use crate::analytics::{Analytics, Places, Seen};
use crate::config::{AnalyticsConfig, Diagnostic};
use crate::frame::{Event, Frame, Payload, PlacesView, TrackRef};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};
use crate::track::TrackState;

pub struct AnalyticsStage {
    name: Arc<str>,
    places: Arc<Places>,
    analytics: Analytics,
}

impl AnalyticsStage {
    pub fn new(name: Arc<str>, c: &AnalyticsConfig) -> Self {
        let places = Places::from_config(c);
        AnalyticsStage { name, places: Arc::new(places.clone()), analytics: Analytics::new(places) }
    }
}

impl Stage for AnalyticsStage {
    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let tracks = frame.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::Tracks(t) => Some(t),
            _ => None,
        });
        let (mut live, mut seen) = (Vec::new(), Vec::new());
        for t in tracks.map(|t| t.tracks.as_slice()).unwrap_or_default() {
            let Some(id) = t.track_id else { continue };
            live.push(id);
            // Lines and zones follow the box matched in this frame: a lost track changes nothing until it is seen again.
            if let (TrackState::Confirmed, Some(bbox)) = (t.state, t.bbox) {
                seen.push(Seen { track: TrackRef { id, class: t.class, label: t.label.clone() }, bbox });
            }
        }
        let pts_ms = frame.pts_seconds().map(|s| s * 1e3);
        let events = self.analytics.update(&frame.stream, frame.seq, pts_ms, &live, &seen);
        frame.events.extend(events.into_iter().map(|k| Event::new(frame.stream.clone(), k)));
        let view = PlacesView { places: self.places.clone(), counts: self.analytics.counts(&frame.stream), stream: frame.stream.clone() };
        frame.attach(&self.name, Payload::Places(view));
        Ok(())
    }

    fn finish(&mut self) -> Vec<Event> {
        self.analytics.finish().into_iter().map(|(stream, k)| Event::new(stream, k)).collect()
    }

    fn describe(&self) -> String {
        format!("{} line(s), {} zone(s), margin {} px", self.places.lines.len(), self.places.zones.len(), self.places.margin)
    }
}

impl Build for AnalyticsConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Stage(Box::new(AnalyticsStage::new(cx.name.clone(), self))))
    }
}
