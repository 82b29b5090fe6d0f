//! The places analytics counts at, as configured: counting lines, zones,
//! their stream and class filters, the anchor point of a box, and the running
//! counts per line and zone. Config-only geometry: it imports nothing but
//! the config, so frames can carry places and counts without depending on
//! the analytics that produces them.

use std::sync::Arc;

use crate::config::{AnalyticsConfig, Anchor};

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
    pub(crate) fn counts(&self, stream: &str, class: u32) -> bool {
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

/// Running counts of one stream, for drawing and the frame's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Per line: crossings in, out.
    pub lines: Vec<[u64; 2]>,
    /// Per zone: tracks inside now.
    pub zones: Vec<u64>,
}
