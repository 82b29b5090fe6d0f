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

use crate::config::{AnalyticsConfig, Anchor, PipelineConfig};
use crate::frame::{Direction, EventKind, TrackRef};

/// The point of `bbox` (x0, y0, x1, y1) that `anchor` names.
pub fn anchor_point(anchor: Anchor, b: [f32; 4]) -> [f64; 2] {
    let cx = (b[0] as f64 + b[2] as f64) / 2.0;
    match anchor {
        Anchor::BottomCenter => [cx, b[3] as f64],
        Anchor::Center => [cx, (b[1] as f64 + b[3] as f64) / 2.0],
        Anchor::TopCenter => [cx, b[1] as f64],
    }
}

/// Which streams a line or zone applies to.
#[derive(Debug, Clone)]
pub enum Streams {
    All,
    Only(Vec<String>),
}

impl Streams {
    pub fn has(&self, stream: &str) -> bool {
        match self {
            Streams::All => true,
            Streams::Only(s) => s.iter().any(|s| s == stream),
        }
    }
}

/// What a line or zone counts: anchor, classes, streams.
#[derive(Debug, Clone)]
pub struct Filter {
    pub anchor: Anchor,
    pub classes: Option<Vec<u32>>,
    pub streams: Streams,
}

impl Filter {
    fn counts(&self, stream: &str, class: u32) -> bool {
        self.streams.has(stream) && self.classes.as_ref().is_none_or(|c| c.contains(&class))
    }
}

/// A counting line: the segment `from` → `to`.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: Arc<str>,
    pub from: [f64; 2],
    pub to: [f64; 2],
    pub filter: Filter,
}

impl Line {
    /// Where `p` is: its position along the segment (0 at `from`, 1 at `to`)
    /// and its signed distance from the line's extension, positive on the
    /// side a track leaves when it crosses `in`.
    pub fn locate(&self, p: [f64; 2]) -> (f64, f64) {
        let (dx, dy) = (self.to[0] - self.from[0], self.to[1] - self.from[1]);
        let (px, py) = (p[0] - self.from[0], p[1] - self.from[1]);
        let len2 = dx * dx + dy * dy;
        ((px * dx + py * dy) / len2, (dx * py - dy * px) / len2.sqrt())
    }

    /// The side `p` is decidedly on (`true`: positive), `None` when it is
    /// within `margin` of the line or beside the segment's ends.
    pub fn side(&self, p: [f64; 2], margin: f64) -> Option<bool> {
        let (t, d) = self.locate(p);
        ((0.0..=1.0).contains(&t) && d.abs() > margin).then_some(d > 0.0)
    }
}

/// A zone: a polygon, its corners in order.
#[derive(Debug, Clone)]
pub struct Zone {
    pub name: Arc<str>,
    pub points: Vec<[f64; 2]>,
    pub filter: Filter,
}

impl Zone {
    /// Even-odd rule.
    pub fn contains(&self, p: [f64; 2]) -> bool {
        let n = self.points.len();
        let mut inside = false;
        for i in 0..n {
            let (a, b) = (self.points[i], self.points[(i + n - 1) % n]);
            if (a[1] > p[1]) != (b[1] > p[1]) && p[0] < (b[0] - a[0]) * (p[1] - a[1]) / (b[1] - a[1]) + a[0] {
                inside = !inside;
            }
        }
        inside
    }

    /// Distance from `p` to the nearest edge.
    pub fn edge_distance(&self, p: [f64; 2]) -> f64 {
        let n = self.points.len();
        (0..n)
            .map(|i| {
                let (a, b) = (self.points[i], self.points[(i + 1) % n]);
                let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
                let len2 = dx * dx + dy * dy;
                let t = if len2 > 0.0 { (((p[0] - a[0]) * dx + (p[1] - a[1]) * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
                ((p[0] - a[0] - t * dx).powi(2) + (p[1] - a[1] - t * dy).powi(2)).sqrt()
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Whether `p` is decidedly inside, `None` within `margin` of an edge.
    pub fn inside(&self, p: [f64; 2], margin: f64) -> Option<bool> {
        (self.edge_distance(p) > margin).then(|| self.contains(p))
    }
}

/// The lines and zones of one `analytics` stage.
#[derive(Debug, Clone)]
pub struct Places {
    pub lines: Vec<Line>,
    pub zones: Vec<Zone>,
    pub margin: f64,
}

impl Places {
    pub fn from_config(c: &AnalyticsConfig) -> Self {
        let filter = |anchor: Option<Anchor>, classes: &Option<Vec<u32>>, streams: &Option<toml::Spanned<Vec<String>>>| Filter {
            anchor: anchor.unwrap_or(c.anchor),
            classes: classes.clone(),
            streams: streams.as_ref().map_or(Streams::All, |s| Streams::Only(s.get_ref().clone())),
        };
        Places {
            lines: c
                .lines
                .iter()
                .map(|l| Line {
                    name: Arc::from(l.name.get_ref().as_str()),
                    from: *l.from.get_ref(),
                    to: *l.to.get_ref(),
                    filter: filter(l.anchor, &l.classes, &l.streams),
                })
                .collect(),
            zones: c
                .zones
                .iter()
                .map(|z| Zone {
                    name: Arc::from(z.name.get_ref().as_str()),
                    points: z.points.get_ref().clone(),
                    filter: filter(z.anchor, &z.classes, &z.streams),
                })
                .collect(),
            margin: *c.margin.get_ref() as f64,
        }
    }
}

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

/// Running counts of one stream, for drawing and the frame's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Per line: crossings in, out.
    pub lines: Vec<[u64; 2]>,
    /// Per zone: tracks inside now.
    pub zones: Vec<u64>,
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
