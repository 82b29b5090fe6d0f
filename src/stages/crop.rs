//! `kind = "crop"`: regions (text boxes) cut out of the frame for secondary
//! inference. Each region is perspective-rectified and scaled to a fixed
//! height in one bilinear pass, normalised, and batched (padded to the widest
//! crop) into one tensor.

use std::sync::Arc;

use ffmpeg_next::format::Pixel;

use crate::backend::ffmpeg::sws_flags;
use crate::config::{ChannelOrder, CropConfig, Diagnostic, Interpolation};
use crate::frame::{CropBatch, Frame, Payload, Pool, PoolBuf, Tensor, TextBox};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::postprocess::geometry::Pt;
use crate::stages::preprocess::NormTable;
use crate::stages::scalers::Scalers;
use crate::stages::{Body, Stage, StageError};

/// The projective map taking the rectangle (0,0)-(w,h) onto `quad` (corners clockwise from top-left).
#[derive(Debug, Clone, Copy)]
pub struct Homography([f64; 8]);

impl Homography {
    pub fn rect_to_quad(w: f64, h: f64, quad: &[Pt; 4]) -> Option<Self> {
        let src = [(0.0, 0.0), (w, 0.0), (w, h), (0.0, h)];
        let mut a = [[0f64; 9]; 8];
        for (k, (&(u, v), p)) in src.iter().zip(quad).enumerate() {
            let (x, y) = (p[0] as f64, p[1] as f64);
            a[2 * k] = [u, v, 1.0, 0.0, 0.0, 0.0, -u * x, -v * x, x];
            a[2 * k + 1] = [0.0, 0.0, 0.0, u, v, 1.0, -u * y, -v * y, y];
        }
        // Gaussian elimination with partial pivoting.
        for col in 0..8 {
            let pivot = (col..8).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
            if a[pivot][col].abs() < 1e-12 {
                return None;
            }
            a.swap(col, pivot);
            let pivot_row = a[col];
            for (r, row) in a.iter_mut().enumerate() {
                if r != col {
                    let f = row[col] / pivot_row[col];
                    for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                        *x -= f * p;
                    }
                }
            }
        }
        let mut h = [0f64; 8];
        for (i, v) in h.iter_mut().enumerate() {
            *v = a[i][8] / a[i][i];
        }
        Some(Homography(h))
    }

    pub fn apply(&self, u: f64, v: f64) -> (f64, f64) {
        let h = &self.0;
        let d = h[6] * u + h[7] * v + 1.0;
        ((h[0] * u + h[1] * v + h[2]) / d, (h[3] * u + h[4] * v + h[5]) / d)
    }
}

fn dist(a: Pt, b: Pt) -> f32 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt()
}

/// Rectified size of a region and its corners in reading order (vertical text turned).
pub fn oriented(quad: &[Pt; 4], rotate_ratio: f32) -> ([Pt; 4], f32, f32) {
    let w = dist(quad[0], quad[1]).max(dist(quad[3], quad[2]));
    let h = dist(quad[0], quad[3]).max(dist(quad[1], quad[2]));
    if h >= rotate_ratio * w {
        // Turn 90° counter-clockwise: the top-right corner becomes the top-left.
        ([quad[1], quad[2], quad[3], quad[0]], h, w)
    } else {
        (*quad, w, h)
    }
}

/// Sample a packed 3-channel image at `(x, y)` (pixel centres at .5), clamped at the edges.
#[inline]
fn bilinear(img: &[u8], w: usize, h: usize, x: f64, y: f64, out: &mut [f32; 3]) {
    let x = (x - 0.5).clamp(0.0, (w - 1) as f64);
    let y = (y - 0.5).clamp(0.0, (h - 1) as f64);
    let (x0, y0) = (x as usize, y as usize);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (fx, fy) = ((x - x0 as f64) as f32, (y - y0 as f64) as f32);
    for (c, o) in out.iter_mut().enumerate() {
        let p = |xx: usize, yy: usize| img[(yy * w + xx) * 3 + c] as f32;
        *o = (1.0 - fy) * ((1.0 - fx) * p(x0, y0) + fx * p(x1, y0)) + fy * ((1.0 - fx) * p(x0, y1) + fx * p(x1, y1));
    }
}

/// When a track's region was last cropped (frame, seconds), and whether it
/// was ever cropped wholly inside the picture.
type LastCrop = (u64, Option<f64>, bool);

/// Whether a region lies wholly inside a `w` x `h` picture: at least its
/// short side (4 px at least) from every edge. A text detector's box of an
/// object cut by the edge ends where the readable part does, often a glyph
/// or more from the edge itself (a plate half in the picture reads "563"
/// some pixels in), so a box nearer than that may hold part of the text.
pub fn wholly_inside(bbox: [f32; 4], w: f32, h: f32) -> bool {
    let [x0, y0, x1, y1] = bbox;
    let m = (x1 - x0).min(y1 - y0).max(4.0);
    x0 >= m && y0 >= m && x1 <= w - m && y1 <= h - m
}

/// What `once_per_track` makes of a frame's regions.
#[derive(Default)]
struct PerTrack {
    /// Regions to crop, their track ids, and whether each lies wholly inside the picture.
    crop: Vec<TextBox>,
    ids: Vec<Option<u64>>,
    inside: Vec<bool>,
    /// Regions whose track's result is reused, with the track id.
    reused: Vec<(u64, TextBox)>,
    /// Tracks that ended with this frame.
    ended: Vec<u64>,
    /// Regions cropped again because their track came wholly inside.
    reread: u32,
}

pub struct Crop {
    name: Arc<str>,
    cfg: CropConfig,
    table: NormTable,
    scalers: Scalers,
    /// Host copies of device (NVDEC) frames.
    host: crate::frame::Pool<u8>,
    full: Vec<u8>,
    pool: Pool<f32>,
    /// `once_per_track`: when each track's region was last cropped (frame,
    /// seconds), and whether it was ever cropped wholly inside the picture.
    cropped: std::collections::HashMap<(Arc<str>, u64), LastCrop>,
}

impl Crop {
    pub fn new(name: Arc<str>, cfg: &CropConfig, pool_size: usize) -> Self {
        Crop {
            name,
            table: NormTable::new(cfg.scale, cfg.mean, cfg.std, 0),
            cfg: cfg.clone(),
            scalers: Scalers::default(),
            host: Pool::new(2),
            full: Vec::new(),
            pool: Pool::new(pool_size),
            cropped: Default::default(),
        }
    }

    /// `once_per_track`: split `regions` into those to crop (with their track
    /// ids) and those whose track's result is reused; regions of tracks not
    /// yet confirmed wait for their id. A track's region is cropped the first
    /// time it is seen, again the first time it lies wholly inside the
    /// picture (an object driving in is read when all of it is seen; counted
    /// as a re-read), and on refresh (`refresh_frames`, `refresh_ms`) unless
    /// it is cut by the edge after a reading of all of it.
    fn per_track(&mut self, frame: &Frame, regions: Vec<TextBox>) -> PerTrack {
        let mut out = PerTrack::default();
        let tracks = frame.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::Tracks(t) => Some(t),
            _ => None,
        });
        let Some(tracks) = tracks else { return out };
        out.ended = tracks.ended.iter().map(|e| e.track_id).collect();
        for id in &out.ended {
            self.cropped.remove(&(frame.stream.clone(), *id));
        }
        if self.cropped.len() >= 65_536 {
            self.cropped.clear();
        }
        if frame.predicted() {
            // No detections this frame (`interval`): the tracks' predicted boxes, results reused.
            for t in tracks.tracks.iter().filter(|t| t.state != crate::track::TrackState::Lost) {
                if let Some(id) = t.track_id
                    && self.cropped.contains_key(&(frame.stream.clone(), id))
                {
                    let [x0, y0, x1, y1] = t.smoothed;
                    out.reused.push((id, TextBox { bbox: t.smoothed, quad: [[x0, y0], [x1, y0], [x1, y1], [x0, y1]], score: t.score }));
                }
            }
            return out;
        }
        let (seq_now, secs_now) = (frame.seq, frame.pts_seconds());
        let (every, every_s) = (self.cfg.refresh_frames, self.cfg.refresh_ms as f64 / 1e3);
        let (w, h) = frame.image.as_ref().map_or((f32::MAX, f32::MAX), |i| (i.width as f32, i.height as f32));
        for r in regions {
            let Some(id) = tracks.tracks.iter().find(|t| t.bbox == Some(r.bbox)).and_then(|t| t.track_id) else { continue };
            let key = (frame.stream.clone(), id);
            let inside = wholly_inside(r.bbox, w, h);
            let (due, reread) = match self.cropped.get(&key) {
                None => (true, false),
                Some(&(seq, secs, inside_read)) => {
                    let refresh = (every > 0 && seq_now.saturating_sub(seq) >= every)
                        || (every_s > 0.0 && matches!((secs_now, secs), (Some(a), Some(b)) if a - b >= every_s));
                    let first_inside = inside && !inside_read;
                    (first_inside || (refresh && (inside || !inside_read)), first_inside)
                }
            };
            if due {
                let inside_read = inside || self.cropped.get(&key).is_some_and(|c| c.2);
                self.cropped.insert(key, (seq_now, secs_now, inside_read));
                out.reread += reread as u32;
                out.crop.push(r);
                out.ids.push(Some(id));
                out.inside.push(inside);
            } else {
                out.reused.push((id, r));
            }
        }
        out
    }

    /// Crop, rectify and normalise `regions` out of a packed image into one batch.
    pub fn batch(&mut self, img: &[u8], iw: usize, ih: usize, regions: &[TextBox]) -> (Vec<usize>, PoolBuf<f32>, usize) {
        let ch = *self.cfg.height.get_ref() as usize;
        let plans: Vec<(Option<Homography>, usize)> = regions
            .iter()
            .map(|r| {
                let (q, w, h) = oriented(&r.quad, self.cfg.rotate_ratio);
                let cw = ((ch as f32 * w / h.max(1.0)).ceil() as usize).clamp(1, self.cfg.max_width as usize);
                (Homography::rect_to_quad(cw as f64, ch as f64, &q), cw)
            })
            .collect();
        let width = plans
            .iter()
            .map(|p| p.1)
            .max()
            .unwrap_or(0)
            .clamp(self.cfg.min_width as usize, self.cfg.max_width.max(self.cfg.min_width) as usize);
        let plane = ch * width;
        let mut data = self.pool.get(regions.len() * 3 * plane);
        data.fill(0.0); // padding (0 in normalised space) wherever a crop is narrower
        let mut px = [0f32; 3];
        for (i, (hm, cw)) in plans.iter().enumerate() {
            let Some(hm) = hm else { continue }; // degenerate region: stays padding
            let base = i * 3 * plane;
            for v in 0..ch {
                for u in 0..*cw {
                    let (x, y) = hm.apply(u as f64 + 0.5, v as f64 + 0.5);
                    bilinear(img, iw, ih, x, y, &mut px);
                    for c in 0..3 {
                        data[base + c * plane + v * width + u] = self.table.lut[c][px[c].round().clamp(0.0, 255.0) as usize];
                    }
                }
            }
        }
        (vec![regions.len(), 3, ch, width], data, width)
    }
}

impl Stage for Crop {
    fn describe(&self) -> String {
        format!(
            "regions → {:?} crops of height {} (width ≤ {}), perspective-rectified",
            self.cfg.color,
            self.cfg.height.get_ref(),
            self.cfg.max_width
        )
        .to_lowercase()
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let mut regions = frame.text_boxes().map(<[TextBox]>::to_vec).unwrap_or_default();
        if let Some(node) = &self.cfg.orientation {
            // Regions the orientation classifier calls upside down are read from their bottom-right corner.
            let classes = frame.results.iter().rev().find(|a| &*a.node == node.get_ref().as_str()).and_then(|a| match &*a.payload {
                Payload::Classes(c) => Some(c.clone()),
                _ => None,
            });
            if let Some(classes) = classes {
                for (r, c) in regions.iter_mut().zip(&classes) {
                    if c.top.first().is_some_and(|t| t.class == self.cfg.flip_class) {
                        r.quad.rotate_left(2);
                    }
                }
            }
        }
        let PerTrack { crop: regions, ids: track_ids, inside, reused, ended, reread } = if *self.cfg.once_per_track.get_ref() {
            self.per_track(frame, regions)
        } else {
            let (w, h) = frame.image.as_ref().map_or((f32::MAX, f32::MAX), |i| (i.width as f32, i.height as f32));
            let inside = regions.iter().map(|r| wholly_inside(r.bbox, w, h)).collect();
            PerTrack { ids: vec![None; regions.len()], crop: regions, inside, ..Default::default() }
        };
        let img = frame.image.clone().ok_or_else(|| StageError::Frame("frame has no image".into()))?;
        let fmt = match self.cfg.color {
            ChannelOrder::Rgb => Pixel::RGB24,
            ChannelOrder::Bgr => Pixel::BGR24,
        };
        let (iw, ih) = (img.width as usize, img.height as usize);
        let (shape, data) = if regions.is_empty() {
            (vec![0, 3, *self.cfg.height.get_ref() as usize, self.cfg.min_width as usize], self.pool.get(0))
        } else {
            let img = crate::stages::on_host(&img, &self.host).map_err(StageError::Frame)?;
            let scaler =
                self.scalers.get(&self.name, &frame.stream, &img, (img.width, img.height, fmt), sws_flags(Interpolation::Bilinear))?;
            self.full.resize(iw * ih * 3, 0);
            scaler.run(&img, &mut self.full).map_err(StageError::Frame)?;
            let full = std::mem::take(&mut self.full);
            let (shape, data, _) = self.batch(&full, iw, ih, &regions);
            self.full = full;
            (shape, data)
        };
        frame.attach(
            &self.name,
            Payload::Crops(CropBatch { tensor: Tensor { shape, data }, regions, track_ids, reused, ended, inside, reread }),
        );
        Ok(())
    }
}

impl Build for CropConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Stage(Box::new(Crop::new(cx.name.clone(), self, cx.pool_size))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homography_maps_corners_exactly() {
        let quad = [[10.0, 20.0], [110.0, 30.0], [105.0, 70.0], [12.0, 60.0]];
        let h = Homography::rect_to_quad(200.0, 48.0, &quad).unwrap();
        for ((u, v), q) in [(0.0, 0.0), (200.0, 0.0), (200.0, 48.0), (0.0, 48.0)].into_iter().zip(quad) {
            let (x, y) = h.apply(u, v);
            assert!((x - q[0] as f64).abs() < 1e-6 && (y - q[1] as f64).abs() < 1e-6, "({u},{v}) -> ({x},{y}) vs {q:?}");
        }
        assert!(Homography::rect_to_quad(10.0, 10.0, &[[0.0, 0.0]; 4]).is_none(), "degenerate quad");
    }

    #[test]
    fn vertical_regions_are_turned() {
        let tall = [[0.0, 0.0], [10.0, 0.0], [10.0, 40.0], [0.0, 40.0]];
        let (q, w, h) = oriented(&tall, 1.5);
        assert_eq!((w, h), (40.0, 10.0));
        assert_eq!(q[0], [10.0, 0.0]);
        let wide = [[0.0, 0.0], [40.0, 0.0], [40.0, 10.0], [0.0, 10.0]];
        assert_eq!(oriented(&wide, 1.5).0, wide);
    }

    /// A box is wholly inside at its short side from every edge: the
    /// detector's box of a plate cut at x = 0 starts a glyph or so inside.
    #[test]
    fn wholly_inside_keeps_a_short_side_from_the_edges() {
        let (w, h) = (1280.0, 720.0);
        assert!(wholly_inside([100.0, 100.0, 300.0, 140.0], w, h));
        assert!(!wholly_inside([1.0, 100.0, 120.0, 140.0], w, h), "at the left edge");
        assert!(!wholly_inside([25.0, 100.0, 200.0, 140.0], w, h), "a glyph from the left edge: may be cut");
        assert!(!wholly_inside([1100.0, 100.0, 1250.0, 140.0], w, h), "near the right edge");
        assert!(!wholly_inside([100.0, 690.0, 300.0, 719.0], w, h), "at the bottom");
        assert!(wholly_inside([40.0, 100.0, 200.0, 140.0], w, h), "its height from the edge");
    }

    fn cfg() -> CropConfig {
        toml::from_str("").unwrap()
    }

    #[test]
    fn axis_aligned_crop_copies_pixels_scaled_and_pads() {
        // A 100x30 image: left half 0, right half 255 (one channel value for all three).
        let (iw, ih) = (100usize, 30usize);
        let mut img = vec![0u8; iw * ih * 3];
        for y in 0..ih {
            for x in 50..iw {
                img[(y * iw + x) * 3..(y * iw + x) * 3 + 3].copy_from_slice(&[255, 255, 255]);
            }
        }
        let b = |x0: f32, y0: f32, x1: f32, y1: f32| TextBox {
            quad: [[x0, y0], [x1, y0], [x1, y1], [x0, y1]],
            bbox: [x0, y0, x1, y1],
            score: 1.0,
        };
        // Region 1: x 20..80, y 6..22 (60x16 → 180x48); region 2: x 60..92 (all white, 32x16 → 96x48).
        let mut c = Crop::new(Arc::from("c"), &cfg(), 2);
        let (shape, data, width) = c.batch(&img, iw, ih, &[b(20.0, 6.0, 80.0, 22.0), b(60.0, 6.0, 92.0, 22.0)]);
        assert_eq!(shape, vec![2, 3, 48, 180]);
        assert_eq!(width, 180);
        let at = |n: usize, ch: usize, v: usize, u: usize| data[((n * 3 + ch) * 48 + v) * 180 + u];
        // Normalised with mean 0.5, std 0.5: black -1, white +1.
        assert_eq!(at(0, 0, 24, 10), -1.0);
        assert_eq!(at(0, 2, 24, 170), 1.0);
        // Source x = 50 falls at crop u = (50 - 20) * 3 = 90.
        assert!(at(0, 1, 24, 85) < 0.0 && at(0, 1, 24, 95) > 0.0);
        // The second crop is 96 wide, then zero padding (0 in normalised space).
        assert_eq!(at(1, 0, 10, 50), 1.0);
        assert_eq!(at(1, 0, 10, 120), 0.0);
    }
}
