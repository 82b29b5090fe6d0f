//! Drawing results on pictures: box outlines and labels (scores, classes,
//! recognised text, track ids), counting lines and zones with their counts,
//! and short trails behind tracks, shared by the `images` and `video` sinks.

use std::sync::OnceLock;

use ab_glyph::{Font, FontVec, PxScale, ScaleFont, point};
use std::ops::DerefMut;

#[cfg(test)]
use image::RgbImage;
use image::{ImageBuffer, Rgb};

/// An RGB picture over any byte buffer (a `Vec`, or a pooled buffer).
pub type Canvas<C> = ImageBuffer<Rgb<u8>, C>;

use crate::frame::{Frame, Payload};

/// Fonts for labels (DejaVu comes with `fonts-dejavu-core`).
const FONTS: &[&str] = &["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];

/// Colours per result type.
pub const TEXT_BOX: Rgb<u8> = Rgb([0, 255, 0]);
pub const TEXT_LINE: Rgb<u8> = Rgb([255, 200, 0]);
pub const OBJECT: Rgb<u8> = Rgb([255, 0, 80]);
pub const CLASS: Rgb<u8> = Rgb([0, 200, 255]);
pub const TRACK: Rgb<u8> = Rgb([255, 140, 0]);
pub const PLACE: Rgb<u8> = Rgb([255, 255, 0]);

/// Anchor points a trail keeps.
const TRAIL: usize = 20;

/// The label font, loaded once: `INFER_STREAM_FONT` (a TrueType file) when
/// set, else DejaVu Sans; `None` (boxes without labels, said once) when none loads.
pub fn font() -> Option<&'static FontVec> {
    static FONT: OnceLock<Option<FontVec>> = OnceLock::new();
    FONT.get_or_init(|| {
        let chosen = std::env::var_os("INFER_STREAM_FONT").filter(|p| !p.is_empty()).map(std::path::PathBuf::from);
        let candidates: Vec<std::path::PathBuf> = match &chosen {
            Some(p) => vec![p.clone()],
            None => FONTS.iter().map(std::path::PathBuf::from).collect(),
        };
        let f = candidates.iter().find_map(|p| std::fs::read(p).ok()).and_then(|b| FontVec::try_from_vec(b).ok());
        if f.is_none() {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            tracing::warn!(
                "no label font found (looked for {}; INFER_STREAM_FONT names one): boxes are drawn without labels",
                looked.join(", ")
            );
        }
        f
    })
    .as_ref()
}

/// A box's corners rounded to pixels, left/top first; `None` when not finite.
pub(super) fn corners(b: [f32; 4]) -> Option<[i64; 4]> {
    if !b.iter().all(|v| v.is_finite()) {
        return None;
    }
    // Far beyond any picture, yet safe to grow by a thickness.
    let [x0, y0, x1, y1] = b.map(|v| v.round().clamp(-1e9, 1e9) as i64);
    Some([x0.min(x1), y0.min(y1), x0.max(x1), y0.max(y1)])
}

/// One thing to draw: an outline (or none, for whole-frame classes) and a label.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub bbox: Option<[f32; 4]>,
    pub color: Rgb<u8>,
    pub label: String,
}

/// Dots along the segment `a` → `b`: marks with an empty box (a filled
/// square as wide as the outline) every `step` pixels.
fn dots(a: [f64; 2], b: [f64; 2], color: Rgb<u8>, step: f64, out: &mut Vec<Mark>) {
    let len = ((b[0] - a[0]).powi(2) + (b[1] - a[1]).powi(2)).sqrt();
    if !len.is_finite() {
        return;
    }
    let n = (len / step.max(1.0)).ceil().min(10_000.0) as usize;
    for i in 0..=n {
        let t = if n == 0 { 0.0 } else { i as f64 / n as f64 };
        let (x, y) = ((a[0] + t * (b[0] - a[0])) as f32, (a[1] + t * (b[1] - a[1])) as f32);
        out.push(Mark { bbox: Some([x, y, x, y]), color, label: String::new() });
    }
}

/// Everything a frame's results say, as marks. With tracks, the boxes they
/// follow are drawn as tracks (`#id`) rather than as detections.
pub fn marks(frame: &Frame) -> Vec<Mark> {
    marks_of(&frame.results)
}

/// [`marks`] of a frame's results alone (a live picture's still).
pub fn marks_of(results: &[crate::frame::Attached]) -> Vec<Mark> {
    let mut out = Vec::new();
    let tracked = results.iter().any(|a| matches!(&*a.payload, Payload::Tracks(_)));
    for a in results {
        match &*a.payload {
            Payload::Tracks(t) => out.extend(t.tracks.iter().filter_map(|t| {
                let label = match (t.track_id, &t.label) {
                    (Some(id), Some(l)) => format!("#{id} {l}"),
                    (Some(id), None) => format!("#{id}"),
                    (None, _) => String::new(),
                };
                Some(Mark { bbox: Some(t.bbox?), color: TRACK, label })
            })),
            Payload::Places(p) => {
                for (l, c) in p.places.lines.iter().zip(&p.counts.lines).filter(|(l, _)| l.filter.streams.has(&p.stream)) {
                    dots(l.from, l.to, PLACE, 3.0, &mut out);
                    out.push(Mark { bbox: None, color: PLACE, label: format!("{}: in {} out {}", l.name, c[0], c[1]) });
                }
                for (z, c) in p.places.zones.iter().zip(&p.counts.zones).filter(|(z, _)| z.filter.streams.has(&p.stream)) {
                    for (i, a) in z.points.iter().enumerate() {
                        dots(*a, z.points[(i + 1) % z.points.len()], PLACE, 3.0, &mut out);
                    }
                    out.push(Mark { bbox: None, color: PLACE, label: format!("{}: {} inside", z.name, c) });
                }
            }
            Payload::TextBoxes(_) | Payload::Objects(_) | Payload::Custom(_) if tracked => {}
            Payload::TextBoxes(b) => {
                out.extend(b.iter().map(|t| Mark { bbox: Some(t.bbox), color: TEXT_BOX, label: format!("{:.2}", t.score) }))
            }
            Payload::Texts(t) => {
                out.extend(t.iter().map(|t| Mark { bbox: Some(t.bbox), color: TEXT_LINE, label: format!("{} {:.2}", t.text, t.score) }))
            }
            Payload::Objects(_) | Payload::Custom(_) => out.extend(a.payload.objects().unwrap_or_default().iter().map(|o| {
                let name = o.label.as_deref().map_or_else(|| format!("class {}", o.class), str::to_string);
                Mark { bbox: Some(o.bbox), color: OBJECT, label: format!("{name} {:.2}", o.score) }
            })),
            Payload::Classes(c) => out.extend(c.iter().filter_map(|c| {
                let top = c.top.first()?;
                let name = top.label.as_deref().map_or_else(|| format!("class {}", top.class), str::to_string);
                Some(Mark { bbox: c.bbox, color: CLASS, label: format!("{name} {:.2}", top.score) })
            })),
            _ => {}
        }
    }
    out
}

/// Recent anchor points (bottom centre) of each stream's tracks, drawn as
/// short trails. A sink keeps one and shows it every frame, so trails
/// follow tracks even on frames it does not draw.
#[derive(Debug, Default)]
pub struct Trails {
    points: std::collections::HashMap<(std::sync::Arc<str>, u64), std::collections::VecDeque<[f64; 2]>>,
}

impl Trails {
    /// Take in `frame`'s tracks and give the marks of their trails.
    pub fn update(&mut self, frame: &Frame) -> Vec<Mark> {
        let Some(tracks) = frame.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::Tracks(t) => Some(t),
            _ => None,
        }) else {
            return Vec::new();
        };
        let live: Vec<u64> = tracks.tracks.iter().filter_map(|t| t.track_id).collect();
        self.points.retain(|(s, id), _| *s != frame.stream || live.contains(id));
        for t in &tracks.tracks {
            let (Some(id), Some(b)) = (t.track_id, t.bbox) else { continue };
            let trail = self.points.entry((frame.stream.clone(), id)).or_default();
            trail.push_back(crate::analytics::anchor_point(crate::config::Anchor::BottomCenter, b));
            if trail.len() > TRAIL {
                trail.pop_front();
            }
        }
        let mut out = Vec::new();
        let mut mine: Vec<_> = self.points.iter().filter(|((s, _), _)| *s == frame.stream).collect();
        mine.sort_by_key(|((_, id), _)| *id);
        for (_, trail) in mine {
            for (a, b) in trail.iter().zip(trail.iter().skip(1)) {
                dots(*a, *b, TRACK, 3.0, &mut out);
            }
        }
        out
    }
}

/// Draw an axis-aligned rectangle outline, clipped to the image. The
/// outline grows outwards from the box edge by `thickness` pixels.
pub fn rectangle<C: DerefMut<Target = [u8]>>(img: &mut Canvas<C>, b: [f32; 4], color: Rgb<u8>, thickness: u32) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    let Some([x0, y0, x1, y1]) = corners(b) else { return };
    for t in 0..thickness as i64 {
        for x in (x0 - t).max(0)..=(x1 + t).min(w - 1) {
            for y in [y0 - t, y1 + t] {
                if (0..h).contains(&y) {
                    img.put_pixel(x as u32, y as u32, color);
                }
            }
        }
        for y in (y0 - t).max(0)..=(y1 + t).min(h - 1) {
            for x in [x0 - t, x1 + t] {
                if (0..w).contains(&x) {
                    img.put_pixel(x as u32, y as u32, color);
                }
            }
        }
    }
}

/// Fill a rectangle (inclusive bounds), clipped.
fn fill<C: DerefMut<Target = [u8]>>(img: &mut Canvas<C>, x0: i64, y0: i64, x1: i64, y1: i64, color: Rgb<u8>) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    for y in y0.max(0)..=y1.min(h - 1) {
        for x in x0.max(0)..=x1.min(w - 1) {
            img.put_pixel(x as u32, y as u32, color);
        }
    }
}

/// Width in pixels of `text` at `size`.
fn text_width(font: &FontVec, size: f32, text: &str) -> f32 {
    let f = font.as_scaled(PxScale::from(size));
    text.chars().map(|c| f.h_advance(f.glyph_id(c))).sum()
}

/// The coverage of each pixel of `s` set with its top-left corner at (x, y),
/// glyph by glyph: `put(px, py, coverage)`.
pub(super) fn glyphs(font: &FontVec, size: f32, x: f32, y: f32, s: &str, mut put: impl FnMut(i32, i32, f32)) {
    let scale = PxScale::from(size);
    let f = font.as_scaled(scale);
    let mut caret = x;
    for c in s.chars() {
        let id = f.glyph_id(c);
        let glyph = id.with_scale_and_position(scale, point(caret, y + f.ascent()));
        caret += f.h_advance(id);
        let Some(outline) = font.outline_glyph(glyph) else { continue };
        let b = outline.px_bounds();
        outline.draw(|gx, gy, cov| put(b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32, cov));
    }
}

/// `text` in `color` with its top-left corner at (x, y), blended by coverage.
fn text<C: DerefMut<Target = [u8]>>(img: &mut Canvas<C>, font: &FontVec, size: f32, x: f32, y: f32, s: &str, color: Rgb<u8>) {
    let (w, h) = (img.width() as i32, img.height() as i32);
    glyphs(font, size, x, y, s, |px, py, cov| {
        if (0..w).contains(&px) && (0..h).contains(&py) {
            let p = img.get_pixel_mut(px as u32, py as u32);
            for k in 0..3 {
                p.0[k] = (p.0[k] as f32 * (1.0 - cov) + color.0[k] as f32 * cov).round() as u8;
            }
        }
    });
}

/// Black or white, whichever reads better on `bg`.
pub(super) fn ink_for(bg: Rgb<u8>) -> Rgb<u8> {
    let l = 0.299 * bg.0[0] as f32 + 0.587 * bg.0[1] as f32 + 0.114 * bg.0[2] as f32;
    if l > 140.0 { Rgb([0, 0, 0]) } else { Rgb([255, 255, 255]) }
}

/// Draw `marks` on `img`: outlines `thickness` px wide, labels on a band of the
/// mark's colour just above the box (below its top edge when there is no room),
/// whole-frame classes stacked at the top-left corner. Labels never cover the
/// outline itself.
pub fn draw<C: DerefMut<Target = [u8]>>(img: &mut Canvas<C>, marks: &[Mark], thickness: u32, font: Option<&FontVec>) {
    for m in marks {
        if let Some(b) = m.bbox {
            rectangle(img, b, m.color, thickness);
        }
    }
    let Some(font) = font else { return };
    for l in labels(marks, img.height(), thickness, font) {
        fill(img, l.x0, l.y0, l.x0 + l.width - 1, l.y0 + l.band - 1, l.mark.color);
        text(img, font, l.size, l.x0 as f32 + 2.0, l.y0 as f32 + 1.0, &l.mark.label, ink_for(l.mark.color));
    }
}

/// Where a mark's label goes: a band `width` x `band` at (x0, y0), text `size` px.
pub(super) struct Label<'a> {
    pub mark: &'a Mark,
    pub x0: i64,
    pub y0: i64,
    pub width: i64,
    pub band: i64,
    pub size: f32,
}

/// The labels of `marks` on a picture `height` px high, in drawing order:
/// above the outline (inside just under its top edge when there is no room),
/// whole-frame classes stacked at the top-left corner.
pub(super) fn labels<'a>(marks: &'a [Mark], height: u32, thickness: u32, font: &FontVec) -> Vec<Label<'a>> {
    let size = (height as f32 / 40.0).clamp(12.0, 32.0);
    let band = size.ceil() as i64 + 2;
    let t = thickness as i64;
    let mut corner_y = 0i64;
    let mut out = Vec::new();
    for m in marks.iter().filter(|m| !m.label.is_empty()) {
        let width = text_width(font, size, &m.label).ceil() as i64 + 4;
        let (x0, y0) = match m.bbox {
            Some(b) => {
                let Some([bx, by, _, _]) = corners(b) else { continue };
                let (x, top) = (bx - t + 1, by - t);
                if top - band >= 0 { (x, top - band) } else { (x, by + 1) }
            }
            None => {
                let y = corner_y;
                corner_y += band;
                (0, y)
            }
        };
        out.push(Label { mark: m, x0, y0, width, band, size });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box given right-to-left or bottom-to-top is the same box; one that is
    /// not finite draws nothing (and never panics).
    #[test]
    fn inverted_and_non_finite_boxes() {
        let draw_one = |b: [f32; 4]| {
            let mut img = RgbImage::new(30, 20);
            rectangle(&mut img, b, Rgb([255, 0, 0]), 2);
            img
        };
        assert_eq!(draw_one([20.0, 15.0, 5.0, 3.0]), draw_one([5.0, 3.0, 20.0, 15.0]));
        for b in [[f32::NAN, 1.0, 5.0, 5.0], [0.0, 0.0, f32::INFINITY, 5.0], [-f32::INFINITY, 0.0, 5.0, 5.0]] {
            assert!(draw_one(b).pixels().all(|p| p.0 == [0, 0, 0]), "{b:?}");
        }
        assert_eq!(corners([1e30, 0.0, 2.0, 3.0]), Some([2, 0, 1_000_000_000, 3]));
    }

    /// A frame of stream `cam` with these tracks (id, box) and, optionally, an analytics view.
    fn tracked(seq: u64, tracks: &[(Option<u64>, [f32; 4])], view: Option<crate::frame::PlacesView>) -> Frame {
        use crate::frame::{TrackedObject, Tracks};
        let acct = std::sync::Arc::new(crate::frame::Accounting::default());
        let mut f = Frame {
            stream: "cam".into(),
            stream_index: 0,
            seq,
            pts: None,
            time_base: (1, 10),
            created: std::time::Instant::now(),
            image: None,
            audio: None,
            results: Vec::new(),
            ticket: acct.issue(),
            queued_at: None,
            events: Vec::new(),
            filtered: false,
        };
        let name: std::sync::Arc<str> = "det".into();
        let boxes =
            tracks.iter().map(|(_, b)| crate::frame::Object { bbox: *b, score: 0.9, class: 0, label: None, keypoints: vec![] }).collect();
        f.attach(&name, Payload::Objects(boxes));
        let tracks = tracks
            .iter()
            .map(|(id, b)| TrackedObject {
                track_id: *id,
                state: if id.is_some() { crate::track::TrackState::Confirmed } else { crate::track::TrackState::Tentative },
                class: 0,
                label: None,
                bbox: Some(*b),
                smoothed: *b,
                score: 0.9,
                age: 1,
                hits: 1,
                predicted: false,
            })
            .collect();
        f.attach(&"trk".into(), Payload::Tracks(Tracks { tracks, ended: Vec::new() }));
        if let Some(v) = view {
            f.attach(&"counts".into(), Payload::Places(v));
        }
        f
    }

    /// Tracks are drawn with their ids instead of the detections they follow;
    /// lines and zones as dots with their counts at the corner; trails grow
    /// behind tracks and go with them.
    #[test]
    fn tracks_lines_zones_and_trails() {
        use crate::analytics::{Counts, Filter, Line, Places, Streams, Zone};
        let filter = || Filter { anchor: crate::config::Anchor::BottomCenter, classes: None, streams: Streams::All };
        let places = std::sync::Arc::new(Places {
            lines: vec![Line { name: "gate".into(), from: [50.0, 0.0], to: [50.0, 90.0], filter: filter() }],
            zones: vec![Zone { name: "desk".into(), points: vec![[0.0, 0.0], [30.0, 0.0], [30.0, 30.0]], filter: filter() }],
            margin: 4.0,
        });
        let view = crate::frame::PlacesView { places, counts: Counts { lines: vec![[2, 1]], zones: vec![1] }, stream: "cam".into() };
        let m = marks(&tracked(0, &[(Some(3), [10.0, 10.0, 20.0, 40.0]), (None, [60.0, 10.0, 70.0, 40.0])], Some(view)));
        let labelled: Vec<&str> = m.iter().filter(|m| !m.label.is_empty()).map(|m| m.label.as_str()).collect();
        assert_eq!(labelled, ["#3", "gate: in 2 out 1", "desk: 1 inside"]);
        assert!(m.iter().all(|m| m.color != OBJECT), "detections followed by tracks are drawn as tracks");
        let dots = m.iter().filter(|m| m.color == PLACE && m.bbox.is_some()).count();
        assert!(dots >= 30 + 30, "the line (90 px) and the zone's edges as dots every 3 px: {dots}");
        let mut trails = Trails::default();
        assert!(trails.update(&tracked(0, &[(Some(3), [10.0, 10.0, 20.0, 40.0])], None)).is_empty(), "one point: no trail yet");
        let t = trails.update(&tracked(1, &[(Some(3), [19.0, 10.0, 29.0, 40.0])], None));
        assert_eq!(t.first().and_then(|m| m.bbox), Some([15.0, 40.0, 15.0, 40.0]), "from the last bottom centre");
        assert_eq!(t.last().and_then(|m| m.bbox), Some([24.0, 40.0, 24.0, 40.0]));
        assert!(trails.update(&tracked(2, &[], None)).is_empty(), "the track is gone: so is its trail");
    }

    #[test]
    fn rectangle_is_clipped_outline() {
        let mut img = RgbImage::new(10, 10);
        rectangle(&mut img, [2.0, 2.0, 20.0, 5.0], Rgb([255, 0, 0]), 1);
        assert_eq!(img.get_pixel(2, 2), &Rgb([255, 0, 0]));
        assert_eq!(img.get_pixel(9, 5), &Rgb([255, 0, 0]));
        assert_eq!(img.get_pixel(4, 4), &Rgb([0, 0, 0]), "inside stays");
    }

    #[test]
    fn labels_sit_outside_the_outline() {
        let Some(font) = font() else {
            panic!("fonts-dejavu-core is missing: run scripts/install-deps.sh");
        };
        let mut img = RgbImage::new(200, 120);
        let mark = Mark { bbox: Some([40.0, 60.0, 150.0, 100.0]), color: TEXT_BOX, label: "0.93".into() };
        draw(&mut img, std::slice::from_ref(&mark), 2, Some(font));
        // The outline keeps its colour at the corner; the label band is above it, with ink on it.
        assert_eq!(img.get_pixel(40, 60), &TEXT_BOX);
        assert_eq!(img.get_pixel(39, 59), &TEXT_BOX);
        let band: Vec<&Rgb<u8>> = (40..80).flat_map(|x| (40..57).map(move |y| (x, y))).map(|(x, y)| img.get_pixel(x, y)).collect();
        assert!(band.iter().any(|p| **p == TEXT_BOX), "label band drawn");
        assert!(band.iter().any(|p| p.0[1] < 100), "label text inked");
        // Nothing inside the box.
        assert_eq!(img.get_pixel(90, 80), &Rgb([0, 0, 0]));
    }
}
