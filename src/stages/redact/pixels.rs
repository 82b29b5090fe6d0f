//! The pixel work of `kind = "redact"` on a packed RGB picture: an area
//! (a box, or the ellipse inscribed in it) blurred, pixelated or filled, and
//! polygons filled. Blur and pixelation work on a small copy of the area
//! (the `image` crate's area-average downscale, almost-Gaussian blur and
//! resize), so their cost hardly grows with the size of the area.

use image::RgbImage;
use image::imageops::{self, FilterType};

use crate::config::{RedactMethod, RedactShape};

/// Blur works on a copy of the area at most this many pixels on its shorter side.
const BLUR_SIDE: u32 = 32;

/// How an area is rewritten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Style {
    pub method: RedactMethod,
    pub shape: RedactShape,
    pub color: [u8; 3],
    /// `pixelate`: cells across the longer side.
    pub blocks: u32,
}

/// A packed RGB picture, `width * 3` bytes a row.
pub struct Picture<'a> {
    pub data: &'a mut [u8],
    pub width: u32,
    pub height: u32,
}

impl Picture<'_> {
    /// `b` (x0, y0, x1, y1 in pixels, any order, any size) clipped to the
    /// picture: whole pixels from x0 to x1 exclusive; `None` when nothing is left.
    pub fn clip(&self, b: [f32; 4]) -> Option<[u32; 4]> {
        if !b.iter().all(|v| v.is_finite()) {
            return None;
        }
        let (w, h) = (self.width as f32, self.height as f32);
        let x0 = b[0].min(b[2]).floor().clamp(0.0, w) as u32;
        let x1 = b[0].max(b[2]).ceil().clamp(0.0, w) as u32;
        let y0 = b[1].min(b[3]).floor().clamp(0.0, h) as u32;
        let y1 = b[1].max(b[3]).ceil().clamp(0.0, h) as u32;
        (x1 > x0 && y1 > y0).then_some([x0, y0, x1, y1])
    }

    fn copy_out(&self, [x0, y0, x1, y1]: [u32; 4]) -> RgbImage {
        let (rw, rh) = (x1 - x0, y1 - y0);
        let stride = self.width as usize * 3;
        let mut out = Vec::with_capacity(rw as usize * rh as usize * 3);
        for y in y0..y1 {
            let row = y as usize * stride;
            out.extend_from_slice(&self.data[row + x0 as usize * 3..row + x1 as usize * 3]);
        }
        RgbImage::from_raw(rw, rh, out).expect("sized above")
    }

    /// Rewrite area `r` (as [`Self::clip`] gives) in `style`. For the
    /// ellipse, pixels whose centres lie inside the ellipse inscribed in the
    /// *unclipped* box `whole` are rewritten.
    pub fn redact(&mut self, r: [u32; 4], whole: [f32; 4], style: &Style) {
        let [x0, y0, x1, y1] = r;
        let (rw, rh) = (x1 - x0, y1 - y0);
        let replacement: Option<RgbImage> = match style.method {
            RedactMethod::Solid => None,
            RedactMethod::Blur => {
                let area = self.copy_out(r);
                let f = (rw.min(rh) / BLUR_SIDE).max(1);
                let (sw, sh) = ((rw / f).max(1), (rh / f).max(1));
                let small = if f > 1 { imageops::thumbnail(&area, sw, sh) } else { area };
                // Sigma half the area's shorter side: stronger than deface's
                // `cv2.blur(area, (w / 2, h / 2))` (a box of width k spreads
                // as sigma k / sqrt(12)), which leaves an out-of-focus face
                // a third of its detail, in the quantised steps of the
                // light's gradient across it.
                let sigma = (sw.min(sh) as f32 / 2.0).max(1.0);
                let blurred = imageops::fast_blur(&small, sigma);
                Some(if f > 1 { imageops::resize(&blurred, rw, rh, FilterType::Triangle) } else { blurred })
            }
            RedactMethod::Pixelate => {
                let area = self.copy_out(r);
                let cell = rw.max(rh).div_ceil(style.blocks.max(1)).max(1);
                let small = imageops::thumbnail(&area, rw.div_ceil(cell), rh.div_ceil(cell));
                Some(imageops::resize(&small, rw, rh, FilterType::Nearest))
            }
        };
        let ellipse = style.shape == RedactShape::Ellipse;
        let (cx, cy) = ((whole[0] + whole[2]) / 2.0, (whole[1] + whole[3]) / 2.0);
        let (ax, ay) = (((whole[2] - whole[0]) / 2.0).abs().max(0.5), ((whole[3] - whole[1]) / 2.0).abs().max(0.5));
        let stride = self.width as usize * 3;
        for y in y0..y1 {
            // The row's span inside the ellipse, else the whole row of the box.
            let (from, to) = if ellipse {
                let dy = (y as f32 + 0.5 - cy) / ay;
                if dy.abs() > 1.0 {
                    continue;
                }
                let half = ax * (1.0 - dy * dy).sqrt();
                let a = (cx - half - 0.5).ceil().max(x0 as f32) as u32;
                let b = ((cx + half - 0.5).floor() + 1.0).min(x1 as f32).max(a as f32) as u32;
                (a, b)
            } else {
                (x0, x1)
            };
            let row = y as usize * stride;
            for x in from..to {
                let px = match &replacement {
                    Some(img) => img.get_pixel(x - x0, y - y0).0,
                    None => style.color,
                };
                let i = row + x as usize * 3;
                self.data[i..i + 3].copy_from_slice(&px);
            }
        }
    }

    /// Fill a polygon (even-odd rule, pixel centres) with `color`.
    pub fn fill_polygon(&mut self, points: &[[f64; 2]], color: [u8; 3]) {
        if points.len() < 3 {
            return;
        }
        let stride = self.width as usize * 3;
        let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| (lo.min(p[1]), hi.max(p[1])));
        let y0 = lo.floor().max(0.0) as u32;
        let y1 = (hi.ceil().max(0.0) as u32).min(self.height);
        let mut xs: Vec<f64> = Vec::new();
        for y in y0..y1 {
            let yc = y as f64 + 0.5;
            xs.clear();
            for (i, a) in points.iter().enumerate() {
                let b = points[(i + 1) % points.len()];
                if (a[1] <= yc) != (b[1] <= yc) {
                    xs.push(a[0] + (yc - a[1]) / (b[1] - a[1]) * (b[0] - a[0]));
                }
            }
            xs.sort_by(f64::total_cmp);
            for pair in xs.chunks_exact(2) {
                // Pixels whose centres lie between the two crossings.
                let from = (pair[0] - 0.5).ceil().clamp(0.0, self.width as f64) as usize;
                let to = ((pair[1] - 0.5).floor() + 1.0).clamp(0.0, self.width as f64) as usize;
                for x in from..to.max(from) {
                    let i = y as usize * stride + x * 3;
                    self.data[i..i + 3].copy_from_slice(&color);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture(w: u32, h: u32) -> Vec<u8> {
        (0..w * h * 3).map(|i| ((i * 37) % 251) as u8).collect()
    }

    #[test]
    fn solid_box_and_ellipse_stay_inside_their_box() {
        let (w, h) = (20, 10);
        let mut data = picture(w, h);
        let before = data.clone();
        let mut p = Picture { data: &mut data, width: w, height: h };
        let b = [2.0, 2.0, 12.0, 8.0];
        let r = p.clip(b).unwrap();
        assert_eq!(r, [2, 2, 12, 8]);
        let style = Style { method: RedactMethod::Solid, shape: RedactShape::Ellipse, color: [1, 2, 3], blocks: 8 };
        p.redact(r, b, &style);
        let at = |d: &[u8], x: usize, y: usize| [d[(y * 20 + x) * 3], d[(y * 20 + x) * 3 + 1], d[(y * 20 + x) * 3 + 2]];
        assert_eq!(at(&data, 7, 5), [1, 2, 3], "centre");
        assert_eq!(at(&data, 2, 2), at(&before, 2, 2), "an ellipse leaves the box's corner");
        for y in 0..10 {
            for x in 0..20 {
                if !(2..12).contains(&x) || !(2..8).contains(&y) {
                    assert_eq!(at(&data, x, y), at(&before, x, y), "outside the box at {x},{y}");
                }
            }
        }
        let mut p = Picture { data: &mut data, width: w, height: h };
        p.redact(r, b, &Style { shape: RedactShape::Box, ..style });
        assert_eq!(at(&data, 2, 2), [1, 2, 3], "a box takes its corner");
        assert_eq!(at(&data, 11, 7), [1, 2, 3]);
        assert_eq!(at(&data, 12, 7), at(&before, 12, 7));
    }

    #[test]
    fn clip_keeps_what_lies_inside() {
        let mut data = picture(4, 4);
        let p = Picture { data: &mut data, width: 4, height: 4 };
        assert_eq!(p.clip([-5.0, 1.2, 2.5, 9.0]), Some([0, 1, 3, 4]));
        assert_eq!(p.clip([5.0, 0.0, 9.0, 2.0]), None);
        assert_eq!(p.clip([f32::NAN, 0.0, 1.0, 1.0]), None);
    }

    #[test]
    fn blur_and_pixelate_flatten_detail() {
        let (w, h) = (200, 120);
        // A fine checkerboard: all detail.
        let mut data: Vec<u8> = (0..w * h).flat_map(|i| if (i % w + i / w) % 2 == 0 { [255; 3] } else { [0; 3] }).collect();
        let detail = |d: &[u8], r: [u32; 4]| {
            let mut s = 0u64;
            for y in r[1] + 1..r[3] - 1 {
                for x in r[0] + 1..r[2] - 1 {
                    let v = |x: u32, y: u32| d[((y * w + x) * 3) as usize] as i64;
                    s += (4 * v(x, y) - v(x - 1, y) - v(x + 1, y) - v(x, y - 1) - v(x, y + 1)).unsigned_abs();
                }
            }
            s
        };
        let r = [40, 20, 160, 100];
        let before = detail(&data, r);
        for method in [RedactMethod::Blur, RedactMethod::Pixelate] {
            let mut copy = data.clone();
            let mut p = Picture { data: &mut copy, width: w, height: h };
            p.redact(r, [40.0, 20.0, 160.0, 100.0], &Style { method, shape: RedactShape::Box, color: [0; 3], blocks: 8 });
            let after = detail(&copy, r);
            assert!(after * 20 < before, "{method:?}: detail {after} of {before}");
        }
        let mut p = Picture { data: &mut data, width: w, height: h };
        p.fill_polygon(&[[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]], [9, 9, 9]);
        assert_eq!(&data[..3], &[9, 9, 9]);
        assert_eq!(data[(9 * w * 3) as usize + 27], if (9 + 9) % 2 == 0 { 255 } else { 0 }, "beyond the hypotenuse");
    }
}
