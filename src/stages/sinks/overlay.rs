//! Results drawn on NV12 pictures where they are: the same outlines and
//! labels as `draw` (which paints RGB), laid out on the host as a list of
//! primitives that the `overlay_nv12` CUDA kernel paints on a device frame
//! before NVENC encodes it, and that `paint_nv12` (its CPU twin, the same
//! integer maths) paints on host planes.
//!
//! A primitive is a rectangle (inclusive bounds) with an optional hole
//! (pixels strictly inside it are left alone: an outline), painted in one
//! colour, solid or through an alpha mask (label text). Primitives are
//! painted in order. A chroma sample takes the primitive's value at its
//! top-left luma pixel.

use ab_glyph::FontVec;

use super::draw::{self, Mark};
use crate::frame::ColorInfo;
use crate::frame::convert::rgb_to_yuv;

pub use crate::backend::PRIM_INTS;

/// Primitives to paint, and the alpha masks they point into.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Overlay {
    pub prims: Vec<i32>,
    pub alpha: Vec<u8>,
}

impl Overlay {
    pub fn len(&self) -> usize {
        self.prims.len() / PRIM_INTS
    }

    pub fn is_empty(&self) -> bool {
        self.prims.is_empty()
    }

    fn push(&mut self, r: [i64; 4], hole: Option<[i64; 4]>, alpha: Option<&[u8]>, yuv: [u8; 3]) {
        let c = |v: i64| v.clamp(i32::MIN as i64 / 2, i32::MAX as i64 / 2) as i32;
        let h = hole.unwrap_or([0; 4]);
        let offset = match alpha {
            Some(a) => {
                self.alpha.extend_from_slice(a);
                (self.alpha.len() - a.len()) as i32
            }
            None => -1,
        };
        let color = yuv[0] as i32 | (yuv[1] as i32) << 8 | (yuv[2] as i32) << 16;
        self.prims.extend([c(r[0]), c(r[1]), c(r[2]), c(r[3]), c(h[0]), c(h[1]), c(h[2]), c(h[3]), offset, color]);
    }
}

/// The primitives that draw `marks` on a `width` x `height` picture of
/// `color`'s matrix and range: what `draw::draw` paints, in its order.
pub fn layout(marks: &[Mark], height: u32, thickness: u32, font: Option<&FontVec>, color: ColorInfo) -> Overlay {
    let mut o = Overlay::default();
    let t = thickness.max(1) as i64;
    for m in marks {
        if let Some([x0, y0, x1, y1]) = m.bbox.and_then(draw::corners) {
            // `draw::rectangle`: an outline growing outwards from the box edge.
            o.push([x0 - t + 1, y0 - t + 1, x1 + t - 1, y1 + t - 1], Some([x0, y0, x1, y1]), None, rgb_to_yuv(m.color.0, color));
        }
    }
    let Some(font) = font else { return o };
    for l in draw::labels(marks, height, thickness, font) {
        let (w, h) = (l.width.max(1), l.band.max(1));
        o.push([l.x0, l.y0, l.x0 + w - 1, l.y0 + h - 1], None, None, rgb_to_yuv(l.mark.color.0, color));
        // The text's coverage over the glyphs' own bounds (descenders may
        // leave the band, as in `draw`); glyphs that touch one pixel combine
        // as blending one after the other does: 1 - (1 - a)(1 - b).
        let mut px = Vec::new();
        draw::glyphs(font, l.size, (l.x0 + 2) as f32, (l.y0 + 1) as f32, &l.mark.label, |x, y, cov| px.push((x as i64, y as i64, cov)));
        let (Some(gx0), Some(gy0)) = (px.iter().map(|p| p.0).min(), px.iter().map(|p| p.1).min()) else { continue };
        let (gx1, gy1) = (px.iter().map(|p| p.0).max().unwrap_or(gx0), px.iter().map(|p| p.1).max().unwrap_or(gy0));
        let mw = gx1 - gx0 + 1;
        let mut cover = vec![0f32; (mw * (gy1 - gy0 + 1)) as usize];
        for (x, y, c) in px {
            let a = &mut cover[((y - gy0) * mw + x - gx0) as usize];
            *a = 1.0 - (1.0 - *a) * (1.0 - c.clamp(0.0, 1.0));
        }
        let mask: Vec<u8> = cover.iter().map(|c| (c * 255.0).round() as u8).collect();
        let ink = rgb_to_yuv(draw::ink_for(l.mark.color).0, color);
        o.push([gx0, gy0, gx1, gy1], None, Some(&mask), ink);
    }
    o
}

/// `v` blended towards `c` by `a` / 255, rounded: the kernel's arithmetic.
#[inline]
fn blend(v: u8, c: u8, a: u32) -> u8 {
    ((v as u32 * (255 - a) + c as u32 * a + 127) / 255) as u8
}

/// The CPU twin of the `overlay_nv12` kernel: paint `o` on a `w` x `h` NV12
/// picture (`y` rows of `y_pitch` bytes, interleaved `uv` rows of `uv_pitch`).
pub fn paint_nv12(y: &mut [u8], y_pitch: usize, uv: &mut [u8], uv_pitch: usize, w: usize, h: usize, o: &Overlay) {
    for p in o.prims.chunks_exact(PRIM_INTS) {
        let (x0, y0, x1, y1) = (p[0].max(0) as i64, p[1].max(0) as i64, (p[2] as i64).min(w as i64 - 1), (p[3] as i64).min(h as i64 - 1));
        let [cy, cu, cv] = [p[9] & 255, (p[9] >> 8) & 255, (p[9] >> 16) & 255].map(|c| c as u8);
        for py in y0..=y1 {
            for px in x0..=x1 {
                if px > p[4] as i64 && px < p[6] as i64 && py > p[5] as i64 && py < p[7] as i64 {
                    continue;
                }
                let a = if p[8] < 0 {
                    255
                } else {
                    o.alpha[p[8] as usize + ((py - p[1] as i64) * (p[2] as i64 - p[0] as i64 + 1) + (px - p[0] as i64)) as usize] as u32
                };
                let (px, py) = (px as usize, py as usize);
                let i = py * y_pitch + px;
                y[i] = blend(y[i], cy, a);
                if px % 2 == 0 && py % 2 == 0 {
                    let j = py / 2 * uv_pitch + px;
                    uv[j] = blend(uv[j], cu, a);
                    uv[j + 1] = blend(uv[j + 1], cv, a);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Matrix;
    use image::Rgb;

    const BT709: ColorInfo = ColorInfo { matrix: Matrix::Bt709, full_range: false };

    fn grey(w: usize, h: usize) -> (Vec<u8>, Vec<u8>) {
        (vec![100u8; w * h], vec![128u8; w.div_ceil(2) * 2 * h.div_ceil(2)])
    }

    /// An outline covers exactly the pixels `draw::rectangle` paints, in the
    /// colour's BT.709 limited-range codes, clipped at the picture's edges.
    #[test]
    fn outlines_cover_what_the_rgb_drawing_covers() {
        let (w, h) = (40usize, 30usize);
        for (bbox, t) in
            [([5.0, 4.0, 20.0, 15.0], 1u32), ([5.2, 4.4, 19.6, 14.5], 3), ([-3.0, 20.0, 50.0, 40.0], 2), ([20.0, 15.0, 5.0, 4.0], 2)]
        {
            let mark = Mark { bbox: Some(bbox), color: Rgb([255, 0, 80]), label: String::new() };
            let o = layout(std::slice::from_ref(&mark), h as u32, t, None, BT709);
            assert_eq!(o.len(), 1);
            let (mut y, mut uv) = grey(w, h);
            paint_nv12(&mut y, w, &mut uv, w, w, h, &o);
            let mut rgb = draw::Canvas::from_raw(w as u32, h as u32, vec![0u8; w * h * 3]).unwrap();
            draw::rectangle(&mut rgb, bbox, Rgb([255, 255, 255]), t);
            let want = rgb_to_yuv([255, 0, 80], BT709);
            for py in 0..h {
                for px in 0..w {
                    let drawn = rgb.get_pixel(px as u32, py as u32).0[0] == 255;
                    let got = y[py * w + px];
                    assert_eq!(got, if drawn { want[0] } else { 100 }, "{bbox:?} t={t} at ({px}, {py})");
                    if px % 2 == 0 && py % 2 == 0 {
                        let j = py / 2 * w + px;
                        let c = if drawn { [want[1], want[2]] } else { [128, 128] };
                        assert_eq!([uv[j], uv[j + 1]], c, "chroma at ({px}, {py})");
                    }
                }
            }
        }
    }

    /// Labels: a band in the mark's colour where `draw` puts it, with ink
    /// blended in through the mask; the RGB drawing of the same marks,
    /// converted to Y, agrees within rounding.
    #[test]
    fn labels_match_the_rgb_drawing() {
        let Some(font) = draw::font() else {
            panic!("fonts-dejavu-core is missing: run scripts/install-deps.sh");
        };
        let (w, h) = (320usize, 180usize);
        let marks = vec![
            Mark { bbox: Some([40.0, 60.0, 150.0, 100.0]), color: draw::TEXT_BOX, label: "0.93".into() },
            Mark { bbox: Some([200.0, 2.0, 300.0, 50.0]), color: draw::OBJECT, label: "person 0.88".into() },
            Mark { bbox: None, color: draw::CLASS, label: "cat 0.70".into() },
        ];
        let full = ColorInfo { matrix: Matrix::Bt601, full_range: true };
        let o = layout(&marks, h as u32, 2, Some(font), full);
        assert_eq!(o.len(), 2 + 3 * 2, "two outlines, a band and a mask per label");
        let (mut y, mut uv) = (vec![0u8; w * h], vec![128u8; w * h / 2]);
        paint_nv12(&mut y, w, &mut uv, w, w, h, &o);
        let mut rgb = draw::Canvas::from_raw(w as u32, h as u32, vec![0u8; w * h * 3]).unwrap();
        draw::draw(&mut rgb, &marks, 2, Some(font));
        let mut worst = 0i32;
        let mut inked = 0;
        for py in 0..h {
            for px in 0..w {
                let want = rgb_to_yuv(rgb.get_pixel(px as u32, py as u32).0, full)[0] as i32;
                let got = y[py * w + px] as i32;
                worst = worst.max((want - got).abs());
                inked += (got != 0) as usize;
            }
        }
        // Text coverage is blended once per pixel here (per glyph there) and
        // in 8 bits: a code or two apart at most.
        eprintln!("labels: worst Y difference to the RGB drawing {worst}, {inked} pixels drawn");
        assert!(worst <= 3, "worst difference to the RGB drawing: {worst}");
        assert!(inked > 1000, "something was drawn ({inked} pixels)");
    }

    #[test]
    fn masks_blend_and_holes_are_left_alone() {
        let mut o = Overlay::default();
        o.push([1, 1, 2, 1], None, Some(&[255, 128]), [200, 50, 60]);
        o.push([0, 3, 3, 5], Some([0, 3, 3, 5]), None, [10, 20, 30]);
        let (w, h) = (4usize, 6usize);
        let (mut y, mut uv) = grey(w, h);
        paint_nv12(&mut y, w, &mut uv, w, w, h, &o);
        assert_eq!(y[w + 1], 200);
        assert_eq!(y[w + 2], blend(100, 200, 128));
        assert_eq!(y[w + 2], 150);
        // The outline's interior (1..3, 4) is untouched, its ring painted.
        assert_eq!((y[4 * w + 1], y[4 * w + 2]), (100, 100));
        assert!([3 * w, 3 * w + 3, 4 * w, 4 * w + 3, 5 * w + 1].iter().all(|&i| y[i] == 10));
        // Chroma follows the top-left luma pixel of each 2x2 block.
        assert_eq!([uv[2 * w], uv[2 * w + 1]], [20, 30], "block (0, 2): its top-left (0, 4) is on the ring");
        assert_eq!([uv[w + 2], uv[w + 3]], [128, 128], "block (1, 1)'s top-left (2, 2) is not drawn");
    }
}
