//! The preprocessing maths of the GPU kernel (`src/backend/kernels.cu`),
//! line for line in Rust: the CPU twin. It is the oracle the GPU output is
//! checked against and the fallback for device frames when no kernel can run.
//!
//! One pass per output pixel: colour conversion (BT.601/709/2020, limited or
//! full range), bilinear resize into the letterboxed area, normalisation,
//! channel order, padding, NCHW or NHWC, f32 or f16.

use super::{ColorInfo, Letterbox, Matrix};

/// Pixel layouts the kernel reads. The numbers are the kernel's `FMT_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrcFormat {
    /// 8-bit Y plane + interleaved UV plane (NVDEC's 8-bit output).
    Nv12 = 0,
    /// 16-bit little-endian NV12 with data in the high bits (NVDEC's 10/12-bit output).
    P010 = 1,
    /// 8-bit planar 4:2:0 (software decoders).
    Yuv420p = 2,
    Rgb24 = 3,
    Bgr24 = 4,
}

impl SrcFormat {
    pub fn from_pixel(p: super::PixelFormat) -> Option<Self> {
        use ffmpeg_next::format::Pixel;
        Some(match p {
            Pixel::NV12 => SrcFormat::Nv12,
            Pixel::P010LE | Pixel::P016LE => SrcFormat::P010,
            Pixel::YUV420P | Pixel::YUVJ420P => SrcFormat::Yuv420p,
            Pixel::RGB24 => SrcFormat::Rgb24,
            Pixel::BGR24 => SrcFormat::Bgr24,
            _ => return None,
        })
    }

    /// Planes read: (plane count, bytes per sample).
    fn planes(self) -> usize {
        match self {
            SrcFormat::Nv12 | SrcFormat::P010 => 2,
            SrcFormat::Yuv420p => 3,
            SrcFormat::Rgb24 | SrcFormat::Bgr24 => 1,
        }
    }
}

/// Every scalar the kernel takes, computed once on the host so both sides
/// use the very same float values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelParams {
    pub format: SrcFormat,
    pub src_w: i32,
    pub src_h: i32,
    pub y_off: f32,
    pub y_mul: f32,
    pub c_mul: f32,
    pub k_rv: f32,
    pub k_gu: f32,
    pub k_gv: f32,
    pub k_bu: f32,
    pub new_w: i32,
    pub new_h: i32,
    pub pad_x: i32,
    pub pad_y: i32,
    pub dst_w: i32,
    pub dst_h: i32,
    pub sx: f32,
    pub sy: f32,
    pub mul: [f32; 3],
    pub add: [f32; 3],
    pub pad: [f32; 3],
    pub bgr: bool,
    pub nhwc: bool,
    pub half: bool,
}

/// How output values are made from 0–255 RGB: `(v * scale - mean) / std`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    pub scale: f32,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    /// Padding colour (0–255, the same for the three channels).
    pub pad_value: u8,
}

impl Normalize {
    /// The kernel's form `v * mul + add` per channel, and the padding values.
    fn affine(&self) -> ([f32; 3], [f32; 3], [f32; 3]) {
        let mul = [0, 1, 2].map(|c| self.scale / self.std[c]);
        let add = [0, 1, 2].map(|c| -self.mean[c] / self.std[c]);
        let pad = [0, 1, 2].map(|c| self.pad_value as f32 * mul[c] + add[c]);
        (mul, add, pad)
    }
}

/// A matrix's red and blue luma weights (Kr, Kb); BT.601 when untagged.
fn luma_weights(m: Matrix) -> (f64, f64) {
    match m {
        Matrix::Bt709 => (0.2126, 0.0722),
        Matrix::Bt2020 => (0.2627, 0.0593),
        Matrix::Bt601 | Matrix::Unspecified => (0.299, 0.114),
    }
}

/// RGB → Y, Cb, Cr codes of `color`'s matrix and range (BT.601 when untagged),
/// rounded: the colours of drawings made on YUV pictures.
pub fn rgb_to_yuv(rgb: [u8; 3], color: ColorInfo) -> [u8; 3] {
    let (kr, kb) = luma_weights(color.matrix);
    let [r, g, b] = rgb.map(|v| v as f64 / 255.0);
    let y = kr * r + (1.0 - kr - kb) * g + kb * b;
    let (cb, cr) = ((b - y) / (2.0 * (1.0 - kb)), (r - y) / (2.0 * (1.0 - kr)));
    let (yc, cc, y0) = if color.full_range { (255.0, 255.0, 0.0) } else { (219.0, 224.0, 16.0) };
    [y0 + yc * y, 128.0 + cc * cb, 128.0 + cc * cr].map(|v| v.round().clamp(0.0, 255.0) as u8)
}

/// YUV → RGB constants in the 0–255 domain: `(y_off, y_mul, c_mul, k_rv, k_gu, k_gv, k_bu)`.
pub fn color_coefficients(color: ColorInfo) -> (f32, f32, f32, f32, f32, f32, f32) {
    let (kr, kb) = luma_weights(color.matrix);
    let kg = 1.0 - kr - kb;
    let (y_off, y_mul, c_mul) = if color.full_range { (0.0, 1.0, 1.0) } else { (16.0, 255.0 / 219.0, 255.0 / 224.0) };
    (
        y_off as f32,
        y_mul as f32,
        c_mul as f32,
        (2.0 * (1.0 - kr)) as f32,
        (2.0 * kb * (1.0 - kb) / kg) as f32,
        (2.0 * kr * (1.0 - kr) / kg) as f32,
        (2.0 * (1.0 - kb)) as f32,
    )
}

impl KernelParams {
    pub fn new(format: SrcFormat, color: ColorInfo, lb: &Letterbox, norm: &Normalize, bgr: bool, nhwc: bool, half: bool) -> Self {
        let (y_off, y_mul, c_mul, k_rv, k_gu, k_gv, k_bu) = color_coefficients(color);
        let (mul, add, pad) = norm.affine();
        KernelParams {
            format,
            src_w: lb.src_w as i32,
            src_h: lb.src_h as i32,
            y_off,
            y_mul,
            c_mul,
            k_rv,
            k_gu,
            k_gv,
            k_bu,
            new_w: lb.new_w as i32,
            new_h: lb.new_h as i32,
            pad_x: lb.pad_x as i32,
            pad_y: lb.pad_y as i32,
            dst_w: lb.dst_w as i32,
            dst_h: lb.dst_h as i32,
            sx: lb.src_w as f32 / lb.new_w.max(1) as f32,
            sy: lb.src_h as f32 / lb.new_h.max(1) as f32,
            mul,
            add,
            pad,
            bgr,
            nhwc,
            half,
        }
    }

    /// Elements in one output image.
    pub fn out_len(&self) -> usize {
        3 * self.dst_w as usize * self.dst_h as usize
    }
}

/// Host planes as the kernel sees device planes: base and pitch (bytes) per plane.
#[derive(Debug, Clone, Copy)]
pub struct HostPlanes<'a> {
    pub data: [&'a [u8]; 3],
    pub pitch: [usize; 3],
}

impl<'a> HostPlanes<'a> {
    /// Planes of a packed host [`super::Image`].
    pub fn of(img: &'a super::Image) -> Option<(SrcFormat, Self)> {
        let fmt = SrcFormat::from_pixel(img.format)?;
        let buf = img.host()?;
        let mut data: [&[u8]; 3] = [&[]; 3];
        let mut pitch = [0usize; 3];
        for i in 0..fmt.planes() {
            data[i] = &buf[img.offsets[i]..];
            pitch[i] = img.strides[i] as usize;
        }
        Some((fmt, HostPlanes { data, pitch }))
    }
}

/// Output of the twin: f32 or f16 bits.
pub enum TwinOut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [u16]),
}

fn sample(p: &[u8], pitch: usize, x: i32, y: i32, step: i32, wide: bool) -> f32 {
    let row = y as usize * pitch;
    if wide {
        let i = row + (x * step) as usize * 2;
        u16::from_le_bytes([p[i], p[i + 1]]) as f32 * (1.0 / 256.0)
    } else {
        p[row + (x * step) as usize] as f32
    }
}

#[allow(clippy::too_many_arguments)]
fn bilinear(p: &[u8], pitch: usize, w: i32, h: i32, fx: f32, fy: f32, step: i32, wide: bool) -> f32 {
    let fx = fx.max(0.0).min((w - 1) as f32);
    let fy = fy.max(0.0).min((h - 1) as f32);
    let x0 = fx.floor() as i32;
    let y0 = fy.floor() as i32;
    let x1 = (x0 + 1).min(w - 1);
    let y1 = (y0 + 1).min(h - 1);
    let wx = fx - x0 as f32;
    let wy = fy - y0 as f32;
    let a = sample(p, pitch, x0, y0, step, wide);
    let b = sample(p, pitch, x1, y0, step, wide);
    let c = sample(p, pitch, x0, y1, step, wide);
    let d = sample(p, pitch, x1, y1, step, wide);
    let top = (1.0 - wx) * a + wx * b;
    let bot = (1.0 - wx) * c + wx * d;
    (1.0 - wy) * top + wy * bot
}

/// The kernel's per-pixel body: output values (before layout) at (`x`, `y`).
fn pixel(k: &KernelParams, pl: &HostPlanes<'_>, x: i32, y: i32) -> [f32; 3] {
    let (ix, iy) = (x - k.pad_x, y - k.pad_y);
    if ix < 0 || iy < 0 || ix >= k.new_w || iy >= k.new_h {
        return k.pad;
    }
    let fx = (ix as f32 + 0.5) * k.sx - 0.5;
    let fy = (iy as f32 + 0.5) * k.sy - 0.5;
    let (r, g, b);
    match k.format {
        SrcFormat::Rgb24 | SrcFormat::Bgr24 => {
            let c0 = bilinear(pl.data[0], pl.pitch[0], k.src_w, k.src_h, fx, fy, 3, false);
            let c1 = bilinear(&pl.data[0][1..], pl.pitch[0], k.src_w, k.src_h, fx, fy, 3, false);
            let c2 = bilinear(&pl.data[0][2..], pl.pitch[0], k.src_w, k.src_h, fx, fy, 3, false);
            (r, g, b) = if k.format == SrcFormat::Rgb24 { (c0, c1, c2) } else { (c2, c1, c0) };
        }
        _ => {
            let wide = k.format == SrcFormat::P010;
            let cw = (k.src_w + 1) / 2;
            let ch = (k.src_h + 1) / 2;
            let cx = (fx + 0.5) * 0.5 - 0.5;
            let cy = (fy + 0.5) * 0.5 - 0.5;
            let yv = bilinear(pl.data[0], pl.pitch[0], k.src_w, k.src_h, fx, fy, 1, wide);
            let (u, v) = if k.format == SrcFormat::Yuv420p {
                (bilinear(pl.data[1], pl.pitch[1], cw, ch, cx, cy, 1, false), bilinear(pl.data[2], pl.pitch[2], cw, ch, cx, cy, 1, false))
            } else {
                let bytes = if wide { 2 } else { 1 };
                (
                    bilinear(pl.data[1], pl.pitch[1], cw, ch, cx, cy, 2, wide),
                    bilinear(&pl.data[1][bytes..], pl.pitch[1], cw, ch, cx, cy, 2, wide),
                )
            };
            let yy = (yv - k.y_off) * k.y_mul;
            let cb = (u - 128.0) * k.c_mul;
            let cr = (v - 128.0) * k.c_mul;
            r = (yy + k.k_rv * cr).clamp(0.0, 255.0);
            g = (yy - k.k_gu * cb - k.k_gv * cr).clamp(0.0, 255.0);
            b = (yy + k.k_bu * cb).clamp(0.0, 255.0);
        }
    }
    let a0 = if k.bgr { b } else { r };
    let a2 = if k.bgr { r } else { b };
    [a0 * k.mul[0] + k.add[0], g * k.mul[1] + k.add[1], a2 * k.mul[2] + k.add[2]]
}

/// Run the kernel's maths on the host into one image's slot of `out`.
pub fn preprocess_twin(k: &KernelParams, planes: &HostPlanes<'_>, out: TwinOut<'_>) {
    let (dw, dh) = (k.dst_w as usize, k.dst_h as usize);
    let plane = dw * dh;
    let index = |x: usize, y: usize| -> [usize; 3] {
        let pix = y * dw + x;
        if k.nhwc { [pix * 3, pix * 3 + 1, pix * 3 + 2] } else { [pix, plane + pix, 2 * plane + pix] }
    };
    match out {
        TwinOut::F32(o) => {
            assert!(o.len() >= k.out_len());
            for y in 0..dh {
                for x in 0..dw {
                    let v = pixel(k, planes, x as i32, y as i32);
                    for (i, v) in index(x, y).into_iter().zip(v) {
                        o[i] = v;
                    }
                }
            }
        }
        TwinOut::F16(o) => {
            assert!(o.len() >= k.out_len());
            for y in 0..dh {
                for x in 0..dw {
                    let v = pixel(k, planes, x as i32, y as i32);
                    for (i, v) in index(x, y).into_iter().zip(v) {
                        o[i] = f32_to_f16(v);
                    }
                }
            }
        }
    }
}

/// f32 → IEEE half bits, round to nearest even (the kernel's `f32_to_f16`).
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = (x >> 16) & 0x8000;
    let mut mant = x & 0x007f_ffff;
    let exp = ((x >> 23) & 0xff) as i32;
    if exp == 0xff {
        return (sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 }) as u16;
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return (sign | 0x7c00) as u16;
    }
    if e <= 0 {
        if e < -10 {
            return sign as u16;
        }
        mant |= 0x0080_0000;
        let shift = (14 - e) as u32;
        let mut h = mant >> shift;
        let rem = mant & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rem > half || (rem == half && h & 1 == 1) {
            h += 1;
        }
        return (sign | h) as u16;
    }
    let mut h = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    (sign | h) as u16
}

/// IEEE half bits → f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let mant = (h & 0x3ff) as f32;
    match exp {
        0 => sign * mant * 2f32.powi(-24),
        0x1f if mant == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        _ => sign * (1.0 + mant / 1024.0) * 2f32.powi(exp - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDENTITY: Normalize = Normalize { scale: 1.0, mean: [0.0; 3], std: [1.0; 3], pad_value: 0 };

    fn color(matrix: Matrix, full_range: bool) -> ColorInfo {
        ColorInfo { matrix, full_range }
    }

    /// Textbook RGB → YCbCr (0–255 domain), rounded to 8-bit codes.
    fn forward(rgb: [f64; 3], matrix: Matrix, full: bool) -> [u8; 3] {
        let (kr, kb) = match matrix {
            Matrix::Bt709 => (0.2126, 0.0722),
            Matrix::Bt2020 => (0.2627, 0.0593),
            _ => (0.299, 0.114),
        };
        let kg = 1.0 - kr - kb;
        let [r, g, b] = rgb.map(|v| v / 255.0);
        let y = kr * r + kg * g + kb * b;
        let cb = (b - y) / (2.0 * (1.0 - kb));
        let cr = (r - y) / (2.0 * (1.0 - kr));
        let (yc, cc) = if full { (y * 255.0, 255.0) } else { (16.0 + 219.0 * y, 224.0) };
        [yc, 128.0 + cc * cb, 128.0 + cc * cr].map(|v| v.round().clamp(0.0, 255.0) as u8)
    }

    /// A `w` x `h` NV12 image of one colour.
    fn nv12(w: usize, h: usize, yuv: [u8; 3]) -> (Vec<u8>, Vec<u8>) {
        let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
        let y = vec![yuv[0]; w * h];
        let uv = (0..cw * ch).flat_map(|_| [yuv[1], yuv[2]]).collect();
        (y, uv)
    }

    fn run(k: &KernelParams, planes: &HostPlanes<'_>) -> Vec<f32> {
        let mut out = vec![f32::NAN; k.out_len()];
        preprocess_twin(k, planes, TwinOut::F32(&mut out));
        out
    }

    /// rgb_to_yuv is the textbook forward transform, and the kernels' YUV → RGB
    /// constants bring its codes back to the colour within rounding.
    #[test]
    fn rgb_to_yuv_round_trips_through_the_inverse() {
        for matrix in [Matrix::Bt601, Matrix::Bt709, Matrix::Bt2020, Matrix::Unspecified] {
            for full in [false, true] {
                let c = color(matrix, full);
                let (y_off, y_mul, c_mul, k_rv, k_gu, k_gv, k_bu) = color_coefficients(c);
                for rgb in [[0u8, 0, 0], [255, 255, 255], [255, 0, 80], [0, 255, 0], [255, 200, 0], [0, 200, 255], [17, 99, 201]] {
                    let yuv = rgb_to_yuv(rgb, c);
                    assert_eq!(yuv, forward(rgb.map(f64::from), matrix, full), "{matrix:?} full={full} {rgb:?}");
                    let (y, u, v) = ((yuv[0] as f32 - y_off) * y_mul, (yuv[1] as f32 - 128.0) * c_mul, (yuv[2] as f32 - 128.0) * c_mul);
                    let back = [y + k_rv * v, y - k_gu * u - k_gv * v, y + k_bu * u];
                    for k in 0..3 {
                        let d = (back[k].clamp(0.0, 255.0) - rgb[k] as f32).abs();
                        assert!(d <= 2.5, "{matrix:?} full={full} {rgb:?} -> {yuv:?} -> {back:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn colour_matrices_and_ranges_invert_the_textbook_forward_transform() {
        let colours =
            [[255.0, 0.0, 0.0], [0.0, 255.0, 0.0], [0.0, 0.0, 255.0], [128.0, 64.0, 200.0], [20.0, 220.0, 120.0], [255.0; 3], [0.0; 3]];
        for matrix in [Matrix::Bt601, Matrix::Bt709, Matrix::Bt2020] {
            for full in [false, true] {
                for rgb in colours {
                    let yuv = forward(rgb, matrix, full);
                    let (y, uv) = nv12(6, 4, yuv);
                    let lb = Letterbox::stretch(6, 4, 6, 4);
                    let k = KernelParams::new(SrcFormat::Nv12, color(matrix, full), &lb, &IDENTITY, false, true, false);
                    let out = run(&k, &HostPlanes { data: [&y, &uv, &[]], pitch: [6, 6, 0] });
                    // 8-bit codes quantise: within 2.5 levels of the original colour.
                    for (c, want) in rgb.iter().enumerate() {
                        let got = out[c];
                        assert!((got as f64 - want).abs() < 2.5, "{matrix:?} full={full} {rgb:?} -> {yuv:?}: channel {c} {got} vs {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn range_endpoints_are_exact() {
        let lb = Letterbox::stretch(2, 2, 2, 2);
        for (full, black, white) in [(false, 16u8, 235u8), (true, 0, 255)] {
            let k = KernelParams::new(SrcFormat::Nv12, color(Matrix::Bt709, full), &lb, &IDENTITY, false, false, false);
            for (code, want) in [(black, 0.0), (white, 255.0)] {
                let (y, uv) = nv12(2, 2, [code, 128, 128]);
                let out = run(&k, &HostPlanes { data: [&y, &uv, &[]], pitch: [2, 2, 0] });
                assert!(out.iter().all(|v| (v - want).abs() < 1e-3), "full={full} code {code}: {out:?}");
            }
        }
    }

    #[test]
    fn identity_size_reads_each_pixel_and_two_to_one_averages() {
        // 4x2 grey ramp, full range so Y codes are RGB values.
        let y: Vec<u8> = vec![0, 40, 80, 120, 160, 200, 240, 250];
        let uv = vec![128u8; 2 * 2];
        let planes = HostPlanes { data: [&y, &uv, &[]], pitch: [4, 4, 0] };
        let full = color(Matrix::Bt601, true);
        let k = KernelParams::new(SrcFormat::Nv12, full, &Letterbox::stretch(4, 2, 4, 2), &IDENTITY, false, false, false);
        let out = run(&k, &planes);
        for (i, v) in y.iter().enumerate() {
            assert!((out[i] - *v as f32).abs() < 1e-4, "pixel {i}: {} vs {v}", out[i]);
        }
        // 4x2 -> 2x1: each output is the mean of a 2x2 block.
        let k = KernelParams::new(SrcFormat::Nv12, full, &Letterbox::stretch(4, 2, 2, 1), &IDENTITY, false, false, false);
        let out = run(&k, &planes);
        assert!((out[0] - (0.0 + 40.0 + 160.0 + 200.0) / 4.0).abs() < 1e-4, "{out:?}");
        assert!((out[1] - (80.0 + 120.0 + 240.0 + 250.0) / 4.0).abs() < 1e-4, "{out:?}");
    }

    #[test]
    fn letterbox_edges_are_padding_and_image_fills_the_rest() {
        // 8x4 image into 8x8: 8x4 area at pad_y = 2, rows 0-1 and 6-7 padding.
        let lb = Letterbox::fit(8, 4, 8, 8);
        assert_eq!((lb.new_w, lb.new_h, lb.pad_x, lb.pad_y), (8, 4, 0, 2));
        let norm = Normalize { scale: 1.0 / 255.0, mean: [0.5; 3], std: [0.5; 3], pad_value: 114 };
        let (y, uv) = nv12(8, 4, [255, 128, 128]);
        let k = KernelParams::new(SrcFormat::Nv12, color(Matrix::Bt601, true), &lb, &norm, false, false, false);
        let out = run(&k, &HostPlanes { data: [&y, &uv, &[]], pitch: [8, 8, 0] });
        let pad = 114.0 / 255.0 * 2.0 - 1.0;
        for c in 0..3 {
            for yy in 0..8 {
                for x in 0..8 {
                    let v = out[c * 64 + yy * 8 + x];
                    let want = if (2..6).contains(&yy) { 1.0 } else { pad };
                    assert!((v - want).abs() < 1e-5, "c{c} ({x},{yy}) = {v}, want {want}");
                }
            }
        }
    }

    #[test]
    fn odd_sizes_read_the_last_chroma_sample_and_stay_in_bounds() {
        // 5x3 NV12: chroma is 3x2. Left two columns red, the rest blue.
        let (w, h) = (5usize, 3usize);
        let red = forward([255.0, 0.0, 0.0], Matrix::Bt601, true);
        let blue = forward([0.0, 0.0, 255.0], Matrix::Bt601, true);
        let y: Vec<u8> = (0..w * h).map(|i| if i % w < 2 { red[0] } else { blue[0] }).collect();
        // Exactly-sized planes: an out-of-bounds read would panic.
        let uv: Vec<u8> = (0..3 * 2).flat_map(|i| if i % 3 < 1 { [red[1], red[2]] } else { [blue[1], blue[2]] }).collect();
        let k =
            KernelParams::new(SrcFormat::Nv12, color(Matrix::Bt601, true), &Letterbox::stretch(5, 3, 5, 3), &IDENTITY, false, true, false);
        let out = run(&k, &HostPlanes { data: [&y, &uv, &[]], pitch: [w, 6, 0] });
        let px = |x: usize, yy: usize| [out[(yy * w + x) * 3], out[(yy * w + x) * 3 + 1], out[(yy * w + x) * 3 + 2]];
        // The far corner (last luma column, last chroma sample) is blue.
        let far = px(4, 2);
        assert!(far[2] > 200.0 && far[0] < 40.0, "{far:?}");
        let near = px(0, 0);
        assert!(near[0] > 200.0 && near[2] < 60.0, "{near:?}");
    }

    #[test]
    fn layouts_channel_order_and_planar_formats_agree() {
        let (w, h) = (6usize, 4usize);
        let y: Vec<u8> = (0..w * h).map(|i| (i * 9 % 256) as u8).collect();
        let u: Vec<u8> = (0..6).map(|i| 100 + i as u8 * 10).collect();
        let v: Vec<u8> = (0..6).map(|i| 160 - i as u8 * 7).collect();
        let uv: Vec<u8> = u.iter().zip(&v).flat_map(|(a, b)| [*a, *b]).collect();
        let lb = Letterbox::fit(w as u32, h as u32, 5, 5);
        let c = color(Matrix::Bt709, false);
        let nv = HostPlanes { data: [&y, &uv, &[]], pitch: [w, w, 0] };
        let planar = HostPlanes { data: [&y, &u, &v], pitch: [w, 3, 3] };
        let base = run(&KernelParams::new(SrcFormat::Nv12, c, &lb, &IDENTITY, false, false, false), &nv);
        assert_eq!(base, run(&KernelParams::new(SrcFormat::Yuv420p, c, &lb, &IDENTITY, false, false, false), &planar));
        let nhwc = run(&KernelParams::new(SrcFormat::Nv12, c, &lb, &IDENTITY, false, true, false), &nv);
        let bgr = run(&KernelParams::new(SrcFormat::Nv12, c, &lb, &IDENTITY, true, false, false), &nv);
        for p in 0..25 {
            for ch in 0..3 {
                assert_eq!(base[ch * 25 + p], nhwc[p * 3 + ch]);
                assert_eq!(base[ch * 25 + p], bgr[(2 - ch) * 25 + p]);
            }
        }
        // P010: the same codes in the high bits of 16-bit samples.
        let wide = |p: &[u8]| p.iter().flat_map(|b| ((*b as u16) << 8).to_le_bytes()).collect::<Vec<u8>>();
        let (y16, uv16) = (wide(&y), wide(&uv));
        let p010 = HostPlanes { data: [&y16, &uv16, &[]], pitch: [2 * w, 2 * w, 0] };
        assert_eq!(base, run(&KernelParams::new(SrcFormat::P010, c, &lb, &IDENTITY, false, false, false), &p010));
    }

    #[test]
    fn half_conversion_rounds_to_nearest_even() {
        for (f, h) in [
            (0.0f32, 0x0000u16),
            (-0.0, 0x8000),
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (0.1, 0x2e66),
            (65504.0, 0x7bff),
            (65520.0, 0x7c00),
            (1e9, 0x7c00),
            (f32::INFINITY, 0x7c00),
            (5.960_464_5e-8, 0x0001),
            (6.097_555e-5, 0x03ff),
            (6.103_515_6e-5, 0x0400),
            (1.0 + 1.0 / 2048.0, 0x3c00),
            (1.0 + 3.0 / 2048.0, 0x3c02),
        ] {
            assert_eq!(f32_to_f16(f), h, "{f}");
        }
        for v in [0.5f32, -3.25, 1000.0, 6.103_515_6e-5] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v);
        }
        assert_eq!(f32_to_f16(f32::NAN) & 0x7c00, 0x7c00);
        assert_ne!(f32_to_f16(f32::NAN) & 0x3ff, 0);
    }
}
