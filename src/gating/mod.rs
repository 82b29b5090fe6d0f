//! Doing less inference: which frames an `infer` stage runs its model on.
//!
//! Owns the per-stream decision ([`Gate`]): `interval` (one frame in N + 1;
//! a tracker downstream predicts the rest) and `motion` (a cheap change
//! detector, [`MotionDetector`]; a still picture keeps the previous results,
//! for at most `max_carried` frames in a row), and the check of carried
//! stretches against the boxes found after them ([`carry::CarryCheck`]).
//! The preprocess before a gated infer stage asks the gate so that skipped
//! frames are not preprocessed either; the stages after honour the marker a
//! skipped frame carries (see [`crate::frame::WorkMode`]).

pub mod carry;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{InferConfig, MotionConfig};
use crate::frame::{Image, PixelFormat, WorkMode};

/// Per-stream decision for one gated infer stage.
pub struct Gate {
    interval: u32,
    motion: Option<MotionConfig>,
    streams: HashMap<Arc<str>, StreamGate>,
}

#[derive(Default)]
struct StreamGate {
    /// Frames since the model last ran on this stream.
    since_run: u32,
    /// Frames seen.
    frames: u64,
    /// Frames carried in a row (`motion`).
    carried: u32,
    motion: Option<MotionDetector>,
}

impl Gate {
    /// The gate an infer stage's config asks for (`None`: every frame runs).
    pub fn of(c: &InferConfig) -> Option<Gate> {
        let interval = *c.interval.get_ref();
        let motion = c.motion.as_ref().map(|m| *m.get_ref());
        (interval > 0 || motion.is_some()).then(|| Gate { interval, motion, streams: HashMap::new() })
    }

    /// What to do with this frame of `stream`: the model runs on a stream's
    /// first frame, then (`motion`) only when something moved or
    /// `max_carried` frames were carried in a row, and (`interval`) on one
    /// frame in `interval + 1`.
    pub fn decide(&mut self, stream: &Arc<str>, image: Option<&Image>) -> WorkMode {
        if self.streams.len() >= 4096 && !self.streams.contains_key(stream) {
            // A `dir` batch makes one stream per file: forget the old ones.
            self.streams.clear();
        }
        let s = self.streams.entry(stream.clone()).or_default();
        s.frames += 1;
        let first = s.frames == 1;
        if let (Some(m), Some(img)) = (&self.motion, image) {
            let det = s.motion.get_or_insert_with(|| MotionDetector::new(*m));
            let moved = det.moved(img);
            if std::env::var_os("MOTION_DEBUG").is_some() {
                eprintln!(
                    "MOTION {} {:?} area {:.4} cell {:.3} ref {:.3}",
                    s.frames - 1,
                    moved,
                    det.last_area,
                    det.last_cell_area,
                    det.last_since_run
                );
            }
            if !first && moved == Some(false) && (m.max_carried == 0 || s.carried < m.max_carried) {
                s.since_run += 1;
                s.carried += 1;
                return WorkMode::Carried;
            }
            let limit = std::mem::take(&mut s.carried) > 0 && moved == Some(false);
            if limit || first || s.since_run >= self.interval {
                // `max_carried` reached runs the model, whatever the interval says.
                s.since_run = 0;
                det.ran();
                return WorkMode::Inferred;
            }
            s.since_run += 1;
            return WorkMode::Predicted;
        }
        if first || s.since_run >= self.interval {
            s.since_run = 0;
            WorkMode::Inferred
        } else {
            s.since_run += 1;
            WorkMode::Predicted
        }
    }
}

/// Frigate-style change detection on a small grey copy of the picture:
/// downscaled, blurred, compared with a running background; motion when the
/// share of pixels that differ by more than `threshold` reaches `min_area`
/// over the whole picture, or `cell_area` in one `cell` × `cell` square (a
/// small object: a plate 200 px wide at 720p is 25 px of a 160 px copy, and
/// entering the picture or moving 5 px a frame it changes far less than
/// `min_area` of the whole).
pub struct MotionDetector {
    cfg: MotionConfig,
    grey: Vec<u8>,
    blurred: Vec<u8>,
    background: Vec<f32>,
    /// The blurred copy of the frame the model last ran on (empty: none yet).
    reference: Vec<u8>,
    /// Changed pixels per cell of the last frame.
    cells: Vec<u32>,
    /// Pixels per cell that differ from `reference`.
    since_run: Vec<u32>,
    /// `blurred` holds the frame last given to [`Self::moved`].
    fresh: bool,
    size: (usize, usize),
    /// Changed share of the last frame (for logs and tests).
    pub last_area: f32,
    /// Largest changed share of one cell in the last frame (for logs and tests).
    pub last_cell_area: f32,
    /// Largest share of one cell that differs from the frame the model last
    /// ran on (for logs and tests).
    pub last_since_run: f32,
}

impl MotionDetector {
    pub fn new(cfg: MotionConfig) -> Self {
        MotionDetector {
            cfg,
            grey: Vec::new(),
            blurred: Vec::new(),
            background: Vec::new(),
            reference: Vec::new(),
            cells: Vec::new(),
            since_run: Vec::new(),
            fresh: false,
            size: (0, 0),
            last_area: 0.0,
            last_cell_area: 0.0,
            last_since_run: 0.0,
        }
    }

    /// Whether `img` moved against the background (`None`: the first frame,
    /// a new size, or a picture this detector cannot read: treat as moved).
    pub fn moved(&mut self, img: &Image) -> Option<bool> {
        let w = (self.cfg.width as usize).clamp(8, img.width.max(8) as usize);
        let h = ((img.height as usize * w) / img.width.max(1) as usize).max(2);
        self.fresh = small_grey(img, w, h, &mut self.grey);
        if !self.fresh {
            return None;
        }
        blur3(&self.grey, w, h, &mut self.blurred);
        if self.size != (w, h) || self.background.len() != w * h {
            self.size = (w, h);
            self.background = self.blurred.iter().map(|&v| v as f32).collect();
            return None;
        }
        let t = self.cfg.threshold as f32;
        let a = self.cfg.alpha.clamp(0.0, 1.0);
        let cell = (self.cfg.cell as usize).max(1);
        let cols = w.div_ceil(cell);
        let n_cells = cols * h.div_ceil(cell);
        self.cells.clear();
        self.cells.resize(n_cells, 0);
        self.since_run.clear();
        self.since_run.resize(n_cells, 0);
        let reference = (self.reference.len() == w * h).then_some(&self.reference[..]);
        let mut changed = 0usize;
        for (i, (bg, &v)) in self.background.iter_mut().zip(&self.blurred).enumerate() {
            let k = ((i / w) / cell) * cols + (i % w) / cell;
            let v = v as f32;
            if (v - *bg).abs() > t {
                changed += 1;
                self.cells[k] += 1;
            }
            if let Some(r) = reference
                && (v - r[i] as f32).abs() > t
            {
                self.since_run[k] += 1;
            }
            *bg += a * (v - *bg);
        }
        self.last_area = changed as f32 / (w * h) as f32;
        self.last_cell_area = largest_share(&self.cells, cols, cell, w, h);
        self.last_since_run = largest_share(&self.since_run, cols, cell, w, h);
        let local = self.cfg.cell_area > 0.0 && (self.last_cell_area >= self.cfg.cell_area || self.last_since_run >= self.cfg.cell_area);
        Some(self.last_area >= self.cfg.min_area || local)
    }

    /// The model ran on the frame last given to [`Self::moved`]: later frames
    /// are also compared with it, so that something moving too slowly to
    /// stand out from the running background still counts once it has moved
    /// a cell's share away from where the model last saw it.
    pub fn ran(&mut self) {
        if self.fresh {
            self.reference.clone_from(&self.blurred);
        }
    }
}

/// The largest share of its own pixels counted in one cell (cells at the
/// right and bottom edges are smaller).
fn largest_share(counts: &[u32], cols: usize, cell: usize, w: usize, h: usize) -> f32 {
    counts
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(k, &n)| {
            let (cx, cy) = ((k % cols) * cell, (k / cols) * cell);
            n as f32 / ((cell.min(w - cx)) * (cell.min(h - cy))) as f32
        })
        .fold(0.0, f32::max)
}

/// Grey levels of `img` sampled down to `w` x `h` (each output pixel the
/// mean of four samples in its cell): luma planes are read as they are,
/// packed RGB/BGR weighted. `false` for a format or storage it cannot read.
fn small_grey(img: &Image, w: usize, h: usize, out: &mut Vec<u8>) -> bool {
    let Some(buf) = img.host() else { return false };
    let (iw, ih) = (img.width as usize, img.height as usize);
    let stride = img.strides[0].max(0) as usize;
    let base = img.offsets[0];
    // Bytes per sample and how to read one grey value at (x, y).
    let read: Box<dyn Fn(usize, usize) -> u32> = match img.format {
        PixelFormat::YUV420P
        | PixelFormat::YUVJ420P
        | PixelFormat::YUV422P
        | PixelFormat::YUVJ422P
        | PixelFormat::YUV444P
        | PixelFormat::YUVJ444P
        | PixelFormat::NV12
        | PixelFormat::NV21
        | PixelFormat::GRAY8 => Box::new(move |x, y| buf[base + y * stride + x] as u32),
        // Little-endian 16-bit luma: the high byte.
        PixelFormat::P010LE | PixelFormat::YUV420P10LE => Box::new(move |x, y| buf[base + y * stride + 2 * x + 1] as u32),
        PixelFormat::RGB24 | PixelFormat::BGR24 => Box::new(move |x, y| {
            let p = base + y * stride + 3 * x;
            (buf[p] as u32 + 2 * buf[p + 1] as u32 + buf[p + 2] as u32) / 4
        }),
        _ => return false,
    };
    let needed = base + ih.saturating_sub(1) * stride + 1;
    if iw == 0 || ih == 0 || buf.len() < needed {
        return false;
    }
    out.resize(w * h, 0);
    for oy in 0..h {
        let (y0, y1) = ((oy * 4 + 1) * ih / (4 * h), ((oy * 4 + 3) * ih / (4 * h)).min(ih - 1));
        for ox in 0..w {
            let (x0, x1) = ((ox * 4 + 1) * iw / (4 * w), ((ox * 4 + 3) * iw / (4 * w)).min(iw - 1));
            out[oy * w + ox] = ((read(x0, y0) + read(x1, y0) + read(x0, y1) + read(x1, y1)) / 4) as u8;
        }
    }
    true
}

/// A 3 x 3 box blur (edges clamped): compression noise is not motion.
fn blur3(src: &[u8], w: usize, h: usize, out: &mut Vec<u8>) {
    out.resize(w * h, 0);
    for y in 0..h {
        let (ya, yb) = (y.saturating_sub(1), (y + 1).min(h - 1));
        for x in 0..w {
            let (xa, xb) = (x.saturating_sub(1), (x + 1).min(w - 1));
            let mut sum = 0u32;
            for yy in [ya, y, yb] {
                for xx in [xa, x, xb] {
                    sum += src[yy * w + xx] as u32;
                }
            }
            out[y * w + x] = (sum / 9) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Pool;

    fn cfg() -> MotionConfig {
        MotionConfig { threshold: 25, min_area: 0.002, width: 160, alpha: 0.1, cell: 8, cell_area: 0.1, max_carried: 15 }
    }

    /// A grey 320 x 180 picture with a white square at `x` (none when `None`).
    fn picture(pool: &Pool<u8>, x: Option<usize>) -> Image {
        square(pool, x, 250)
    }

    /// A grey (80) 320 x 180 picture with a 40 px square of `level` at `x`.
    fn square(pool: &Pool<u8>, x: Option<usize>, level: u8) -> Image {
        let (w, h) = (320usize, 180usize);
        let mut buf = pool.get(w * h * 3);
        buf.fill(80);
        if let Some(x0) = x {
            for y in 60..100 {
                for x in x0..x0 + 40 {
                    buf[(y * w + x) * 3..(y * w + x) * 3 + 3].copy_from_slice(&[level; 3]);
                }
            }
        }
        Image::rgb24(w as u32, h as u32, buf)
    }

    /// A still picture is not motion; a square moving across it is; once it
    /// stops, the background takes it in and motion stops.
    #[test]
    fn still_pictures_are_not_motion_and_moving_squares_are() {
        let pool = Pool::new(4);
        let mut d = MotionDetector::new(cfg());
        assert_eq!(d.moved(&picture(&pool, None)), None, "first frame: no background yet");
        for _ in 0..5 {
            assert_eq!(d.moved(&picture(&pool, None)), Some(false));
        }
        for f in 0..5 {
            assert_eq!(d.moved(&picture(&pool, Some(20 + 30 * f))), Some(true), "frame {f}: {}", d.last_area);
        }
        let mut still = 0;
        for _ in 0..60 {
            if d.moved(&picture(&pool, Some(140))) == Some(false) {
                still += 1;
            }
        }
        assert!(still > 40, "a stopped square becomes background ({still} still frames of 60)");
    }

    /// `max_carried`: a still picture is carried at most that many frames in a row.
    #[test]
    fn still_pictures_are_carried_at_most_max_carried_frames() {
        let mut g = Gate::of(&infer_cfg("motion = { threshold = 25, min_area = 0.002, max_carried = 3 }")).unwrap();
        let pool = Pool::new(4);
        let s: Arc<str> = "s".into();
        use WorkMode::*;
        let modes: Vec<WorkMode> = (0..9).map(|_| g.decide(&s, Some(&picture(&pool, None)))).collect();
        assert_eq!(modes, [Inferred, Carried, Carried, Carried, Inferred, Carried, Carried, Carried, Inferred]);
        let mut g = Gate::of(&infer_cfg("motion = { max_carried = 0 }")).unwrap();
        let modes: Vec<WorkMode> = (0..40).map(|_| g.decide(&s, Some(&picture(&pool, None)))).collect();
        assert!(modes[0] == Inferred && modes[1..].iter().all(|m| *m == Carried), "0: no limit: {modes:?}");
    }

    /// A dim square (30 grey levels over the background) creeping 1 px a
    /// frame (half a pixel of the grey copy) never stands out from the
    /// running background, which follows it; against the frame the model
    /// last ran on it has moved a cell's share within a few frames, so it is
    /// never carried for long (without that: up to `max_carried`).
    #[test]
    fn creeping_squares_are_not_carried_for_long() {
        let pool = Pool::new(4);
        let s: Arc<str> = "s".into();
        let extra = "motion = { threshold = 25, min_area = 0.01 }";
        let mut g = Gate::of(&infer_cfg(extra)).unwrap();
        let mut d = MotionDetector::new(g.motion.unwrap());
        let (mut run, mut longest, mut background) = (0, 0, 0.0f32);
        for f in 0..60 {
            let img = square(&pool, Some(40 + f), 110);
            if g.decide(&s, Some(&img)) == WorkMode::Carried {
                run += 1;
                longest = longest.max(run);
            } else {
                run = 0;
            }
            d.moved(&img);
            background = background.max(d.last_cell_area);
        }
        assert!(longest <= 5, "carried {longest} frames in a row");
        assert!(background < 0.1, "the running background alone sees it: a cell changed by {background}");
    }

    fn infer_cfg(extra: &str) -> InferConfig {
        toml::from_str(&format!("model = \"m.onnx\"\n{extra}")).unwrap()
    }

    /// `interval = 2`: the first frame, then one in three, per stream.
    #[test]
    fn interval_runs_one_frame_in_n_plus_one_per_stream() {
        let mut g = Gate::of(&infer_cfg("interval = 2")).unwrap();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let modes: Vec<WorkMode> = (0..7).map(|_| g.decide(&a, None)).collect();
        use WorkMode::*;
        assert_eq!(modes, [Inferred, Predicted, Predicted, Inferred, Predicted, Predicted, Inferred]);
        assert_eq!(g.decide(&b, None), Inferred, "another stream starts with a run");
        assert!(Gate::of(&infer_cfg("")).is_none());
    }

    /// `motion`: still frames are carried; moving ones run.
    #[test]
    fn motion_carries_still_frames() {
        let mut g = Gate::of(&infer_cfg("motion = { threshold = 25, min_area = 0.002 }")).unwrap();
        let pool = Pool::new(4);
        let s: Arc<str> = "s".into();
        assert_eq!(g.decide(&s, Some(&picture(&pool, None))), WorkMode::Inferred);
        assert_eq!(g.decide(&s, Some(&picture(&pool, None))), WorkMode::Carried);
        assert_eq!(g.decide(&s, Some(&picture(&pool, Some(100)))), WorkMode::Inferred);
    }
}
