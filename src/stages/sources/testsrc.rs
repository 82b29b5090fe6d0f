//! `kind = "testsrc"`: synthetic YUV 4:2:0 video — a slowly moving gradient
//! and a bright square crossing the picture — generated into pooled buffers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Diagnostic, TestSrcConfig};
use crate::frame::{ColorInfo, Image, Matrix, PixelFormat, Pool, Storage};
use crate::runtime::SourceCtx;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Source};

pub struct TestSrc {
    cfg: TestSrcConfig,
    pool: Pool<u8>,
}

impl TestSrc {
    pub fn new(cfg: &TestSrcConfig, pool_size: usize, max_frames: Option<u64>) -> Self {
        let mut cfg = cfg.clone();
        let limit = cfg.frames.or(cfg.duration.map(|d| (d * cfg.rate).round() as u64));
        cfg.frames = match (limit, max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        TestSrc { cfg, pool: Pool::new(pool_size) }
    }

    /// Frame `n` as a packed YUV 4:2:0 image.
    pub fn render(&self, n: u64) -> Image {
        let (w, h) = (*self.cfg.width.get_ref() as usize, *self.cfg.height.get_ref() as usize);
        let (cw, ch) = (w / 2, h / 2);
        let mut buf = self.pool.get(w * h + 2 * cw * ch);
        let shift = (n * 2) as usize;
        let (sq, sx, sy) = (h / 6, (n as usize * 7) % w.max(1), h / 2 - h / 12);
        let (y, uv) = buf.split_at_mut(w * h);
        for (r, row) in y.chunks_exact_mut(w).enumerate() {
            for (c, p) in row.iter_mut().enumerate() {
                let inside = c >= sx && c < sx + sq && r >= sy && r < sy + sq;
                *p = if inside { 235 } else { (16 + ((c + r + shift) % 400) * 180 / 400) as u8 };
            }
        }
        let (u, v) = uv.split_at_mut(cw * ch);
        for (i, (pu, pv)) in u.iter_mut().zip(v.iter_mut()).enumerate() {
            let (c, r) = (i % cw, i / cw);
            *pu = (96 + (c * 64 / cw.max(1))) as u8;
            *pv = (96 + (r * 64 / ch.max(1))) as u8;
        }
        Image {
            width: w as u32,
            height: h as u32,
            format: PixelFormat::YUV420P,
            color: ColorInfo { matrix: Matrix::Bt601, full_range: false },
            offsets: [0, w * h, w * h + cw * ch, 0],
            strides: [w as i32, cw as i32, cw as i32, 0],
            storage: Storage::Host(buf),
        }
    }
}

impl Source for TestSrc {
    fn expected_frames(&self) -> Option<u64> {
        self.cfg.frames
    }

    fn is_live(&self) -> bool {
        self.cfg.realtime
    }

    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "synthetic {}x{} @ {} fps, {}{}",
            c.width.get_ref(),
            c.height.get_ref(),
            c.rate,
            c.frames.map_or("endless".to_string(), |f| format!("{f} frames")),
            if c.realtime { ", paced in real time" } else { "" }
        )
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        // pts in 1/1000 s.
        let t0 = Instant::now();
        let mut n = 0u64;
        while !ctx.stopping() && self.cfg.frames.is_none_or(|f| n < f) {
            let pts_ms = (n as f64 * 1000.0 / self.cfg.rate).round() as i64;
            if self.cfg.realtime {
                let due = t0 + Duration::from_millis(pts_ms as u64);
                while !ctx.stopping() && Instant::now() < due {
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(50)));
                }
            }
            let frame = ctx.new_frame(n, Some(pts_ms), (1, 1000), Some(Arc::new(self.render(n))));
            n += 1;
            if !ctx.emit(frame) {
                break;
            }
        }
        Ok(())
    }
}

impl Build for TestSrcConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Source(Box::new(TestSrc::new(self, cx.pool_size, cx.max_frames()))))
    }
}
