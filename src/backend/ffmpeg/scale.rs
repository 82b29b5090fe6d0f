//! swscale: a context converting one image geometry and format to another,
//! in the colour matrix and range asked for, and swscale's flags.

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::FfmpegError;
use crate::frame::{ColorInfo, Image, Matrix};

/// A swscale context from one image geometry to a packed RGB24/BGR24 output,
/// rebuilt only when the input geometry changes.
pub struct Scaler {
    ctx: *mut ffi::SwsContext,
    key: (u32, u32, Pixel, ColorInfo),
    dst: (u32, u32, Pixel, Option<ColorInfo>),
}

// SAFETY: an SwsContext has no thread affinity; `Scaler` is used by one thread at a time (&mut self).
unsafe impl Send for Scaler {}

/// swscale flags for an interpolation name.
pub fn sws_flags(interp: crate::config::Interpolation) -> i32 {
    use crate::config::Interpolation::*;
    let f = match interp {
        Nearest => ffi::SWS_POINT,
        FastBilinear => ffi::SWS_FAST_BILINEAR,
        Bilinear => ffi::SWS_BILINEAR,
        Bicubic => ffi::SWS_BICUBIC,
        Area => ffi::SWS_AREA,
    };
    f | ffi::SWS_ACCURATE_RND
}

/// swscale's coefficient table for a matrix.
fn sws_matrix(m: Matrix) -> i32 {
    match m {
        Matrix::Bt709 => ffi::SWS_CS_ITU709,
        Matrix::Bt2020 => ffi::SWS_CS_BT2020,
        Matrix::Bt601 | Matrix::Unspecified => ffi::SWS_CS_ITU601,
    }
}

impl Scaler {
    pub fn new(src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel, flags: i32) -> Result<Self, FfmpegError> {
        Self::new_to(src, dst_w, dst_h, dst_fmt, flags, None)
    }

    /// As `new`, with a YUV output in `dst_color`'s matrix and range (else
    /// BT.601, limited for YUV formats).
    pub fn new_to(
        src: &Image,
        dst_w: u32,
        dst_h: u32,
        dst_fmt: Pixel,
        flags: i32,
        dst_color: Option<ColorInfo>,
    ) -> Result<Self, FfmpegError> {
        let err = || FfmpegError::Scaler { from: src.format, to: dst_fmt, src_w: src.width, src_h: src.height, dst_w, dst_h };
        // SAFETY: sizes are non-zero and formats valid; a null return is handled.
        let ctx = unsafe {
            ffi::sws_getContext(
                src.width as i32,
                src.height as i32,
                src.format.into(),
                dst_w as i32,
                dst_h as i32,
                dst_fmt.into(),
                flags,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ctx.is_null() {
            return Err(err());
        }
        let (dst_cs, dst_full) = match dst_color {
            Some(c) => (sws_matrix(c.matrix), c.full_range),
            None => (ffi::SWS_CS_DEFAULT, dst_full_range(dst_fmt)),
        };
        // SAFETY: `ctx` is a live context; coefficient tables are static.
        unsafe {
            let src_table = ffi::sws_getCoefficients(sws_matrix(src.color.matrix));
            let dst_table = ffi::sws_getCoefficients(dst_cs);
            ffi::sws_setColorspaceDetails(ctx, src_table, src.color.full_range as i32, dst_table, dst_full as i32, 0, 1 << 16, 1 << 16);
        }
        Ok(Scaler { ctx, key: (src.width, src.height, src.format, src.color), dst: (dst_w, dst_h, dst_fmt, dst_color) })
    }

    /// Whether this scaler fits `src` (else build a new one: mid-stream size change).
    pub fn fits(&self, src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel) -> bool {
        self.fits_to(src, dst_w, dst_h, dst_fmt, None)
    }

    /// As `fits`, for a scaler made by `new_to` with `dst_color`.
    pub fn fits_to(&self, src: &Image, dst_w: u32, dst_h: u32, dst_fmt: Pixel, dst_color: Option<ColorInfo>) -> bool {
        self.key == (src.width, src.height, src.format, src.color) && self.dst == (dst_w, dst_h, dst_fmt, dst_color)
    }

    /// Convert `src` into `dst`, a packed 3-byte-per-pixel buffer of `dst_w * 3` bytes per row.
    pub fn run(&mut self, src: &Image, dst: &mut [u8]) -> Result<(), String> {
        let host = src.host().ok_or("image is not in host memory")?;
        let (dw, dh, _, _) = self.dst;
        if dst.len() < dw as usize * dh as usize * 3 {
            return Err("destination buffer too small".into());
        }
        let mut planes = [std::ptr::null::<u8>(); 4];
        for i in 0..4 {
            if src.strides[i] != 0 {
                planes[i] = host[src.offsets[i]..].as_ptr();
            }
        }
        let dst_planes = [dst.as_mut_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()];
        let dst_strides = [dw as i32 * 3, 0, 0, 0];
        // SAFETY: source planes point into `host` with the strides `copy_to_image`
        // computed for this format and size (checked by `fits` when the scaler
        // was chosen); the destination holds dh rows of dw*3 bytes (checked above).
        let rows = unsafe {
            ffi::sws_scale(self.ctx, planes.as_ptr(), src.strides.as_ptr(), 0, src.height as i32, dst_planes.as_ptr(), dst_strides.as_ptr())
        };
        if rows != dh as i32 {
            return Err(format!("swscale wrote {rows} rows, expected {dh}"));
        }
        Ok(())
    }
}

/// RGB and grey outputs are full range; YUV outputs (for encoders) are limited-range BT.601.
fn dst_full_range(fmt: Pixel) -> bool {
    matches!(fmt, Pixel::RGB24 | Pixel::BGR24 | Pixel::RGBA | Pixel::BGRA | Pixel::GRAY8)
}

impl Scaler {
    /// Convert `src` into `dst`, an FFmpeg frame of this scaler's output size and format.
    pub fn run_into(&mut self, src: &Image, dst: &mut ff::frame::Video) -> Result<(), String> {
        let host = src.host().ok_or("image is not in host memory")?;
        let (dw, dh, fmt, _) = self.dst;
        if (dst.width(), dst.height(), dst.format()) != (dw, dh, fmt) {
            return Err(format!("destination frame is {}x{} {:?}, expected {dw}x{dh} {fmt:?}", dst.width(), dst.height(), dst.format()));
        }
        let mut planes = [std::ptr::null::<u8>(); 4];
        for i in 0..4 {
            if src.strides[i] != 0 {
                planes[i] = host[src.offsets[i]..].as_ptr();
            }
        }
        // SAFETY: `dst` is an allocated frame of the output size and format
        // (checked above), so its data/linesize arrays describe writable planes;
        // the source planes point into `host` as in `run`.
        let rows = unsafe {
            let raw = dst.as_mut_ptr();
            ffi::sws_scale(
                self.ctx,
                planes.as_ptr(),
                src.strides.as_ptr(),
                0,
                src.height as i32,
                (*raw).data.as_ptr(),
                (*raw).linesize.as_ptr(),
            )
        };
        if rows != dh as i32 {
            return Err(format!("swscale wrote {rows} rows, expected {dh}"));
        }
        Ok(())
    }
}

impl Drop for Scaler {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from sws_getContext and is freed once.
        unsafe { ffi::sws_freeContext(self.ctx) };
    }
}
