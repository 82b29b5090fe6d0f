//! Decoded frames into pooled host images (planes packed, colour kept), and
//! host pictures turned by quarter turns.

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::scale::{Scaler, sws_flags};
use crate::frame::{ColorInfo, Image, Matrix, Pool, Storage};

pub(super) fn color_of(frame: &ff::frame::Video) -> ColorInfo {
    use ff::color::{Range, Space};
    let matrix = match frame.color_space() {
        Space::BT709 => Matrix::Bt709,
        Space::BT470BG | Space::SMPTE170M | Space::FCC | Space::SMPTE240M => Matrix::Bt601,
        Space::BT2020NCL | Space::BT2020CL => Matrix::Bt2020,
        _ => Matrix::Unspecified,
    };
    let full_range = frame.color_range() == Range::JPEG
        || matches!(
            frame.format(),
            Pixel::YUVJ420P | Pixel::YUVJ422P | Pixel::YUVJ444P | Pixel::RGB24 | Pixel::BGR24 | Pixel::RGBA | Pixel::BGRA | Pixel::GRAY8
        );
    ColorInfo { matrix, full_range }
}

/// Copy a decoded frame into a pooled host buffer (planes packed, no padding).
pub fn copy_to_image(frame: &ff::frame::Video, pool: &Pool<u8>) -> Result<Image, String> {
    let (w, h) = (frame.width(), frame.height());
    let fmt: ffi::AVPixelFormat = frame.format().into();
    // SAFETY: plain arithmetic on the format descriptor; negative means unsupported.
    let size = unsafe { ffi::av_image_get_buffer_size(fmt, w as i32, h as i32, 1) };
    if size <= 0 || w == 0 || h == 0 {
        return Err(format!("unsupported frame {w}x{h} {:?}", frame.format()));
    }
    let mut buf = pool.get(size as usize);
    // SAFETY: `frame` is a valid decoded AVFrame of `fmt`, `w`x`h`; its data and
    // linesize arrays describe planes FFmpeg allocated. `buf` has exactly the
    // size av_image_get_buffer_size reported for align 1.
    let copied = unsafe {
        let raw = frame.as_ptr();
        ffi::av_image_copy_to_buffer(
            buf.as_mut_ptr(),
            size,
            (*raw).data.as_ptr() as *const *const u8,
            (*raw).linesize.as_ptr(),
            fmt,
            w as i32,
            h as i32,
            1,
        )
    };
    if copied < 0 {
        return Err(format!("cannot copy frame ({copied})"));
    }
    let mut ptrs = [std::ptr::null_mut::<u8>(); 4];
    let mut strides = [0i32; 4];
    // SAFETY: computes plane pointers into `buf` for the packed layout just written.
    let filled = unsafe { ffi::av_image_fill_arrays(ptrs.as_mut_ptr(), strides.as_mut_ptr(), buf.as_ptr(), fmt, w as i32, h as i32, 1) };
    if filled < 0 {
        return Err(format!("cannot lay out frame ({filled})"));
    }
    let base = buf.as_ptr() as usize;
    let offsets = ptrs.map(|p| if p.is_null() { 0 } else { p as usize - base });
    Ok(Image { width: w, height: h, format: frame.format(), color: color_of(frame), offsets, strides, storage: Storage::Host(buf) })
}

/// `image` turned `degrees` clockwise (see [`turn_image`]); a layout that
/// cannot be turned in place (4:2:2, YUYV, ...) is first converted to 4:4:4
/// in its own colour matrix and range, and turned in that.
pub fn turn_picture(image: &Image, degrees: u32, pool: &Pool<u8>) -> Result<Image, String> {
    let refused = match turn_image(image, degrees, pool) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    if image.host().is_none() || image.format == Pixel::YUV444P {
        return Err(refused);
    }
    let (w, h) = (image.width, image.height);
    let mut scaler = Scaler::new_to(image, w, h, Pixel::YUV444P, sws_flags(crate::config::Interpolation::Bilinear), Some(image.color))
        .map_err(|e| format!("{refused}: {e}"))?;
    let mut full = ff::frame::Video::new(Pixel::YUV444P, w, h);
    scaler.run_into(image, &mut full).map_err(|e| format!("{refused}: {e}"))?;
    let mut full = copy_to_image(&full, pool)?;
    full.color = image.color;
    turn_image(&full, degrees, pool)
}

/// `image` turned `degrees` clockwise (90, 180 or 270) into a pooled host
/// buffer of the same pixel format: width and height swap for 90 and 270.
/// Each plane is turned element by element (a pixel of a packed plane, a
/// chroma pair of NV12); formats whose chroma is subsampled unevenly (4:2:2,
/// 4:1:1) cannot be turned a quarter in their own layout, nor packed ones
/// whose pixels share chroma (YUYV) turned at all: those are refused.
pub fn turn_image(image: &Image, degrees: u32, pool: &Pool<u8>) -> Result<Image, String> {
    let src = image.host().ok_or("the picture is not in host memory")?;
    let fmt: ffi::AVPixelFormat = image.format.into();
    // SAFETY: a lookup in FFmpeg's static pixel format table; null for an unknown format.
    let desc = unsafe { ffi::av_pix_fmt_desc_get(fmt) };
    if desc.is_null() {
        return Err(format!("cannot turn a {:?} picture", image.format));
    }
    // SAFETY: non-null descriptors are static.
    let desc = unsafe { &*desc };
    let unsupported = (ffi::AV_PIX_FMT_FLAG_BITSTREAM | ffi::AV_PIX_FMT_FLAG_HWACCEL | ffi::AV_PIX_FMT_FLAG_PAL) as u64;
    let quarter = degrees % 180 == 90;
    if desc.flags & unsupported != 0 || (quarter && desc.log2_chroma_w != desc.log2_chroma_h) {
        return Err(format!("cannot turn a {:?} picture {degrees}°", image.format));
    }
    let (w, h) = (image.width, image.height);
    let (tw, th) = if quarter { (h, w) } else { (w, h) };
    // SAFETY: plain arithmetic on the format descriptor.
    let size = unsafe { ffi::av_image_get_buffer_size(fmt, tw as i32, th as i32, 1) };
    if size <= 0 {
        return Err(format!("cannot lay out a turned {tw}x{th} {:?} picture", image.format));
    }
    let mut buf = pool.get(size as usize);
    let mut ptrs = [std::ptr::null_mut::<u8>(); 4];
    let mut strides = [0i32; 4];
    // SAFETY: computes plane pointers into `buf` (of the size just asked for) for the packed layout.
    let filled = unsafe { ffi::av_image_fill_arrays(ptrs.as_mut_ptr(), strides.as_mut_ptr(), buf.as_ptr(), fmt, tw as i32, th as i32, 1) };
    if filled < 0 {
        return Err(format!("cannot lay out a turned picture ({filled})"));
    }
    let base = buf.as_ptr() as usize;
    let offsets = ptrs.map(|p| if p.is_null() { 0 } else { p as usize - base });
    let ceil_shift = |v: u32, s: u8| (v + (1 << s) - 1) >> s;
    for plane in 0..4usize {
        let comps = &desc.comp[..desc.nb_components as usize];
        let Some(step) = comps.iter().filter(|c| c.plane as usize == plane).map(|c| c.step as usize).max() else { continue };
        // Packed with shared chroma (YUYV: Y U Y V): a pixel is not an element of its own.
        if comps.iter().any(|c| c.plane as usize == plane && c.step as usize != step) {
            return Err(format!("cannot turn a {:?} picture", image.format));
        }
        // Chroma planes (components 1 and 2 without luma) are subsampled; the others are full size.
        let chroma = comps.iter().enumerate().all(|(i, c)| c.plane as usize != plane || i == 1 || i == 2) && desc.nb_components >= 3;
        let (pw, ph) = if chroma { (ceil_shift(w, desc.log2_chroma_w), ceil_shift(h, desc.log2_chroma_h)) } else { (w, h) };
        let (pw, ph) = (pw as usize, ph as usize);
        let (sstride, dstride) = (image.strides[plane] as usize, strides[plane] as usize);
        let (so, d0) = (image.offsets[plane], offsets[plane]);
        if src.len() < so + sstride * ph.saturating_sub(1) + pw * step {
            return Err("the picture is smaller than its layout".into());
        }
        for sy in 0..ph {
            let row = &src[so + sy * sstride..so + sy * sstride + pw * step];
            for sx in 0..pw {
                let (dx, dy) = match degrees {
                    90 => (ph - 1 - sy, sx),
                    180 => (pw - 1 - sx, ph - 1 - sy),
                    _ => (sy, pw - 1 - sx),
                };
                let d = d0 + dy * dstride + dx * step;
                buf[d..d + step].copy_from_slice(&row[sx * step..sx * step + step]);
            }
        }
    }
    Ok(Image { width: tw, height: th, format: image.format, color: image.color, offsets, strides, storage: Storage::Host(buf) })
}
