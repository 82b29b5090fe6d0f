//! Line and zone analytics over tracks: which side of each counting line a
//! track's anchor point is on, whether it is inside each zone, and the
//! events when that changes (`crossed` in / out, `entered`, `left` with the
//! dwell time). Owns the geometry and the rules only (docs/analytics.md);
//! the `analytics` stage (src/stages/analytics.rs) applies them per stream
//! to the tracks the `track` stage attached, and the runtime delivers and
//! counts the events.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

pub mod places;

use crate::config::{AnalyticsConfig, PipelineConfig};
use crate::frame::{Direction, EventKind, TrackRef};

pub use places::{Counts, Filter, Line, Places, Streams, Zone, anchor_point};

/// Problems with an `analytics` stage's settings: (where, what).
pub fn check(cfg: &PipelineConfig, c: &AnalyticsConfig) -> Vec<(Range<usize>, String)> {
    let mut out = Vec::new();
    let m = *c.margin.get_ref();
    if !(m.is_finite() && m >= 0.0) {
        out.push((c.margin.span(), format!("margin must be a distance in pixels, 0 or more, got {m}")));
    }
    if c.lines.is_empty() && c.zones.is_empty() {
        out.push((0..0, "no lines and no zones: add a `[[stages.NAME.lines]]` or `[[stages.NAME.zones]]` table".into()));
    }
    let sources: Vec<&str> = cfg.nodes.iter().filter(|n| n.role == crate::config::Role::Source).map(|n| n.name.as_str()).collect();
    let mut names: std::collections::HashSet<(&str, String)> = Default::default();
    let mut name = |what: &'static str, n: &toml::Spanned<String>, out: &mut Vec<(Range<usize>, String)>| {
        if n.get_ref().is_empty() {
            out.push((n.span(), format!("a {what} needs a name")));
        } else if !names.insert((what, n.get_ref().clone())) {
            out.push((n.span(), format!("two {what}s are named `{}`", n.get_ref())));
        }
    };
    let streams = |s: &Option<toml::Spanned<Vec<String>>>, out: &mut Vec<(Range<usize>, String)>| {
        if let Some(s) = s {
            for n in s.get_ref().iter().filter(|n| !sources.contains(&n.as_str())) {
                out.push((s.span(), format!("`{n}` is not a source of this pipeline (sources: {})", sources.join(", "))));
            }
        }
    };
    let finite = |p: &[f64; 2]| p.iter().all(|v| v.is_finite());
    for l in &c.lines {
        name("line", &l.name, &mut out);
        if !finite(l.from.get_ref()) || !finite(l.to.get_ref()) {
            out.push((l.from.span(), "line ends must be finite pixel coordinates".into()));
        } else if l.from.get_ref() == l.to.get_ref() {
            out.push((l.to.span(), format!("line `{}` has the same point for `from` and `to`", l.name.get_ref())));
        }
        streams(&l.streams, &mut out);
    }
    for z in &c.zones {
        name("zone", &z.name, &mut out);
        let p = z.points.get_ref();
        if p.len() < 3 {
            out.push((z.points.span(), format!("zone `{}` needs at least 3 points, got {}", z.name.get_ref(), p.len())));
        } else if !p.iter().all(finite) {
            out.push((z.points.span(), "zone points must be finite pixel coordinates".into()));
        }
        streams(&z.streams, &mut out);
    }
    out
}

/// One track observed in one frame: its id, class and box.
#[derive(Debug, Clone)]
pub struct Seen {
    pub track: TrackRef,
    pub bbox: [f32; 4],
}

#[derive(Debug, Clone, Copy, Default)]
struct ZoneState {
    inside: Option<bool>,
    /// Frame number and timestamp (ms) of entering.
    entered: (u64, Option<f64>),
}

#[derive(Debug, Clone)]
struct TrackState {
    track: TrackRef,
    sides: Vec<Option<bool>>,
    zones: Vec<ZoneState>,
    /// The last frame it was observed in (number, timestamp in ms).
    last_seen: (u64, Option<f64>),
}

/// One stream's tracks, and its running counts per line and zone.
#[derive(Debug, Clone, Default)]
struct StreamState {
    tracks: HashMap<u64, TrackState>,
    last_seq: u64,
    crossings: Vec<[u64; 2]>,
    inside: Vec<u64>,
}

/// Lines and zones applied to every stream's tracks.
#[derive(Debug, Clone)]
pub struct Analytics {
    pub places: Places,
    streams: HashMap<Arc<str>, StreamState>,
}

fn dwell(from: (u64, Option<f64>), to: (u64, Option<f64>)) -> (u64, Option<u64>) {
    let ms = match (from.1, to.1) {
        (Some(a), Some(b)) => Some((b - a).max(0.0).round() as u64),
        _ => None,
    };
    (to.0.saturating_sub(from.0), ms)
}

impl Analytics {
    pub fn new(places: Places) -> Self {
        Analytics { places, streams: HashMap::new() }
    }

    /// One frame of `stream`: `live` are the ids of every track the tracker
    /// still holds (lost ones too), `seen` the tracks matched in this frame.
    /// Tracks gone from `live` ended: they leave the zones they were in.
    pub fn update(&mut self, stream: &Arc<str>, seq: u64, pts_ms: Option<f64>, live: &[u64], seen: &[Seen]) -> Vec<EventKind> {
        let (nl, nz) = (self.places.lines.len(), self.places.zones.len());
        let st = self.streams.entry(stream.clone()).or_insert_with(|| StreamState {
            crossings: vec![[0; 2]; nl],
            inside: vec![0; nz],
            ..Default::default()
        });
        st.last_seq = seq;
        let mut events = Vec::new();
        let margin = self.places.margin;
        for s in seen {
            let t = st.tracks.entry(s.track.id).or_insert_with(|| TrackState {
                track: s.track.clone(),
                sides: vec![None; nl],
                zones: vec![ZoneState::default(); nz],
                last_seen: (seq, pts_ms),
            });
            t.last_seen = (seq, pts_ms);
            for (i, line) in self.places.lines.iter().enumerate() {
                if !line.filter.counts(stream, t.track.class) {
                    continue;
                }
                let Some(side) = line.side(anchor_point(line.filter.anchor, s.bbox), margin) else { continue };
                if t.sides[i] == Some(!side) {
                    let direction = if side { Direction::Out } else { Direction::In };
                    st.crossings[i][direction as usize] += 1;
                    events.push(EventKind::Crossed { line: line.name.clone(), track: t.track.clone(), direction, seq });
                }
                t.sides[i] = Some(side);
            }
            for (i, zone) in self.places.zones.iter().enumerate() {
                if !zone.filter.counts(stream, t.track.class) {
                    continue;
                }
                let Some(inside) = zone.inside(anchor_point(zone.filter.anchor, s.bbox), margin) else { continue };
                let z = &mut t.zones[i];
                match (z.inside == Some(true), inside) {
                    (false, true) => {
                        z.entered = (seq, pts_ms);
                        st.inside[i] += 1;
                        events.push(EventKind::Entered { zone: zone.name.clone(), track: t.track.clone(), seq });
                    }
                    (true, false) => {
                        let (dwell_frames, dwell_ms) = dwell(z.entered, (seq, pts_ms));
                        st.inside[i] -= 1;
                        events.push(EventKind::Left {
                            zone: zone.name.clone(),
                            track: t.track.clone(),
                            seq,
                            dwell_frames,
                            dwell_ms,
                            track_ended: false,
                        });
                    }
                    _ => {}
                }
                z.inside = Some(inside);
            }
        }
        let mut gone: Vec<u64> = st.tracks.keys().copied().filter(|id| !live.contains(id)).collect();
        gone.sort_unstable();
        for id in gone {
            let t = st.tracks.remove(&id).expect("listed");
            Self::ended(&self.places, st, t, seq, &mut events);
        }
        events
    }

    /// A track ended: it leaves the zones it is in (dwell up to its last frame seen).
    fn ended(places: &Places, st: &mut StreamState, t: TrackState, seq: u64, events: &mut Vec<EventKind>) {
        for (i, z) in t.zones.iter().enumerate() {
            if z.inside == Some(true) {
                let (dwell_frames, dwell_ms) = dwell(z.entered, t.last_seen);
                st.inside[i] -= 1;
                events.push(EventKind::Left {
                    zone: places.zones[i].name.clone(),
                    track: t.track.clone(),
                    seq,
                    dwell_frames,
                    dwell_ms,
                    track_ended: true,
                });
            }
        }
    }

    /// The streams ended: every track still in a zone leaves it. Events by stream.
    pub fn finish(&mut self) -> Vec<(Arc<str>, EventKind)> {
        let mut out = Vec::new();
        let mut streams: Vec<(Arc<str>, StreamState)> = self.streams.drain().collect();
        streams.sort_by(|a, b| a.0.cmp(&b.0));
        for (stream, mut st) in streams {
            let mut ids: Vec<u64> = st.tracks.keys().copied().collect();
            ids.sort_unstable();
            let mut events = Vec::new();
            for id in ids {
                let t = st.tracks.remove(&id).expect("listed");
                let seq = st.last_seq;
                Self::ended(&self.places, &mut st, t, seq, &mut events);
            }
            out.extend(events.into_iter().map(|e| (stream.clone(), e)));
        }
        out
    }

    /// The running counts of `stream`.
    pub fn counts(&self, stream: &str) -> Counts {
        match self.streams.get(stream) {
            Some(s) => Counts { lines: s.crossings.clone(), zones: s.inside.clone() },
            None => Counts { lines: vec![[0; 2]; self.places.lines.len()], zones: vec![0; self.places.zones.len()] },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Anchor;

    fn filter() -> Filter {
        Filter { anchor: Anchor::Center, classes: None, streams: Streams::All }
    }

    fn vertical() -> Places {
        Places {
            lines: vec![Line { name: "door".into(), from: [100.0, 0.0], to: [100.0, 200.0], filter: filter() }],
            zones: vec![Zone {
                name: "desk".into(),
                points: vec![[200.0, 0.0], [300.0, 0.0], [300.0, 200.0], [200.0, 200.0]],
                filter: filter(),
            }],
            margin: 4.0,
        }
    }

    fn at(id: u64, x: f32) -> Seen {
        Seen { track: TrackRef { id, class: 0, label: None }, bbox: [x - 5.0, 90.0, x + 5.0, 110.0] }
    }

    fn names(e: &[EventKind]) -> Vec<String> {
        e.iter()
            .map(|e| match e {
                EventKind::Crossed { direction, track, .. } => format!("{} {}", track.id, direction.name()),
                EventKind::Entered { track, .. } => format!("{} entered", track.id),
                EventKind::Left { track, dwell_frames, track_ended, .. } => format!("{} left {dwell_frames} {track_ended}", track.id),
                _ => unreachable!(),
            })
            .collect()
    }

    /// A line drawn top to bottom counts left → right as `in`, right → left
    /// as `out`; jitter within the margin around the line counts nothing.
    #[test]
    fn crossings_have_a_direction_and_hysteresis() {
        let mut a = Analytics::new(vertical());
        let s: Arc<str> = "cam".into();
        let mut all = Vec::new();
        for (seq, x) in [90.0, 97.0, 102.0, 98.0, 103.0, 105.0, 103.0, 99.0, 95.0, 110.0].into_iter().enumerate() {
            all.extend(a.update(&s, seq as u64, None, &[1], &[at(1, x)]));
        }
        // 90 (left) → 105 (right): in, once, whatever the jitter at 97..103; → 95: out; → 110: in.
        assert_eq!(names(&all), ["1 in", "1 out", "1 in"]);
        assert_eq!(a.counts("cam").lines, vec![[2, 1]]);
    }

    /// Beside the segment's ends nothing counts; a track first seen on one side only sets its side.
    #[test]
    fn only_the_segment_counts() {
        let mut a = Analytics::new(vertical());
        let s: Arc<str> = "cam".into();
        let far = |id, x: f32| Seen { track: TrackRef { id, class: 0, label: None }, bbox: [x - 5.0, 290.0, x + 5.0, 310.0] };
        assert!(a.update(&s, 0, None, &[1], &[far(1, 50.0)]).is_empty());
        assert!(a.update(&s, 1, None, &[1], &[far(1, 150.0)]).is_empty());
        assert!(a.update(&s, 2, None, &[1], &[at(1, 150.0)]).is_empty(), "first decided side: no crossing");
    }

    /// Entering and leaving a zone, with the dwell in frames and ms; a track
    /// that ends inside leaves with `track_ended`, as do tracks still inside at the end.
    #[test]
    fn zones_count_dwell_and_ends() {
        let mut a = Analytics::new(vertical());
        let s: Arc<str> = "cam".into();
        let mut all = Vec::new();
        for (seq, x) in [150.0, 250.0, 260.0, 270.0, 350.0].into_iter().enumerate() {
            all.extend(a.update(&s, seq as u64, Some(seq as f64 * 40.0), &[1, 2], &[at(1, x), at(2, 250.0)]));
        }
        assert_eq!(a.counts("cam").zones, vec![1]);
        all.extend(a.update(&s, 5, Some(200.0), &[], &[]));
        if let EventKind::Left { dwell_ms, .. } = &all[2] {
            assert_eq!(*dwell_ms, Some(120));
        }
        assert_eq!(names(&all), ["2 entered", "1 entered", "1 left 3 false", "2 left 4 true"]);
        a.update(&s, 6, None, &[3], &[at(3, 250.0)]);
        assert_eq!(names(&a.finish().into_iter().map(|e| e.1).collect::<Vec<_>>()), ["3 left 0 true"]);
    }

    #[test]
    fn point_in_polygon_and_edge_distance() {
        let z = &vertical().zones[0];
        assert!(z.contains([250.0, 100.0]) && !z.contains([199.0, 100.0]));
        assert_eq!(z.edge_distance([250.0, 100.0]), 50.0);
        assert_eq!(z.inside([202.0, 100.0], 4.0), None);
        assert_eq!(z.inside([195.0, 100.0], 4.0), Some(false));
    }
}
