//! Letterbox geometry: how a source image sits inside a model tensor.

/// Where the scaled source image sits in the model input, and how to map back.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Letterbox {
    pub src_w: u32,
    pub src_h: u32,
    pub dst_w: u32,
    pub dst_h: u32,
    /// Size of the scaled image inside the tensor.
    pub new_w: u32,
    pub new_h: u32,
    /// Offset of the scaled image (padding on the left / top).
    pub pad_x: u32,
    pub pad_y: u32,
    /// Source pixels per tensor pixel, per axis.
    pub inv_scale_x: f32,
    pub inv_scale_y: f32,
}

impl Letterbox {
    /// Keep the aspect ratio; centre the image and pad the rest.
    pub fn fit(src_w: u32, src_h: u32, dst_w: u32, dst_h: u32) -> Self {
        let scale = f64::min(dst_w as f64 / src_w as f64, dst_h as f64 / src_h as f64);
        let new_w = ((src_w as f64 * scale).round() as u32).clamp(1, dst_w);
        let new_h = ((src_h as f64 * scale).round() as u32).clamp(1, dst_h);
        Letterbox {
            src_w,
            src_h,
            dst_w,
            dst_h,
            new_w,
            new_h,
            pad_x: (dst_w - new_w) / 2,
            pad_y: (dst_h - new_h) / 2,
            inv_scale_x: src_w as f32 / new_w as f32,
            inv_scale_y: src_h as f32 / new_h as f32,
        }
    }

    /// Fill the tensor, each axis scaled on its own.
    pub fn stretch(src_w: u32, src_h: u32, dst_w: u32, dst_h: u32) -> Self {
        Letterbox {
            src_w,
            src_h,
            dst_w,
            dst_h,
            new_w: dst_w,
            new_h: dst_h,
            pad_x: 0,
            pad_y: 0,
            inv_scale_x: src_w as f32 / dst_w as f32,
            inv_scale_y: src_h as f32 / dst_h as f32,
        }
    }

    /// Map a tensor coordinate back to source pixels, clamped to the image.
    pub fn unmap(&self, x: f32, y: f32) -> (f32, f32) {
        let sx = (x - self.pad_x as f32) * self.inv_scale_x;
        let sy = (y - self.pad_y as f32) * self.inv_scale_y;
        (sx.clamp(0.0, self.src_w as f32), sy.clamp(0.0, self.src_h as f32))
    }

    /// Map a source coordinate into the tensor.
    pub fn map(&self, x: f32, y: f32) -> (f32, f32) {
        (x / self.inv_scale_x + self.pad_x as f32, y / self.inv_scale_y + self.pad_y as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hd_into_square() {
        let lb = Letterbox::fit(1920, 1080, 640, 640);
        assert_eq!((lb.new_w, lb.new_h, lb.pad_x, lb.pad_y), (640, 360, 0, 140));
        assert_eq!(lb.unmap(320.0, 320.0), (960.0, 540.0));
        assert_eq!(lb.unmap(0.0, 140.0), (0.0, 0.0));
        assert_eq!(lb.unmap(640.0, 500.0), (1920.0, 1080.0));
    }

    #[test]
    fn hd_into_wide_tensor() {
        let lb = Letterbox::fit(1280, 720, 640, 384);
        assert_eq!((lb.new_w, lb.new_h, lb.pad_x, lb.pad_y), (640, 360, 0, 12));
        assert_eq!(lb.unmap(100.0, 12.0), (200.0, 0.0));
    }

    #[test]
    fn portrait_pads_left_and_right() {
        let lb = Letterbox::fit(720, 1280, 640, 640);
        assert_eq!((lb.new_w, lb.new_h, lb.pad_x, lb.pad_y), (360, 640, 140, 0));
        assert_eq!(lb.unmap(140.0, 0.0), (0.0, 0.0));
    }

    #[test]
    fn odd_sizes_round_trip() {
        let lb = Letterbox::fit(333, 111, 320, 320);
        assert_eq!((lb.new_w, lb.new_h), (320, 107));
        assert_eq!((lb.pad_x, lb.pad_y), (0, 106));
        let (x, y) = lb.map(100.0, 50.0);
        let (bx, by) = lb.unmap(x, y);
        assert!((bx - 100.0).abs() < 1e-3 && (by - 50.0).abs() < 1e-3);
    }

    #[test]
    fn padding_maps_outside_and_clamps() {
        let lb = Letterbox::fit(1280, 720, 640, 640);
        assert_eq!(lb.unmap(10.0, 5.0), (20.0, 0.0));
        assert_eq!(lb.unmap(10.0, 639.0), (20.0, 720.0));
    }

    #[test]
    fn stretch_scales_axes_independently() {
        let lb = Letterbox::stretch(1280, 720, 640, 640);
        assert_eq!(lb.unmap(320.0, 320.0), (640.0, 360.0));
    }
}
