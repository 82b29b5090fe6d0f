//! The live pictures' renderer: a still (a sink's frame, redacted when the
//! pipeline redacts) with its results drawn as the `images` and `video`
//! sinks draw them (boxes, labels, track ids, lines and zones with their
//! counts), encoded as JPEG for the API's viewers, at most [`MAX_WIDTH`]
//! pixels wide.

use std::io::Cursor;
use std::sync::Arc;

use ffmpeg_next::format::Pixel;
use image::RgbImage;
use image::codecs::jpeg::JpegEncoder;

use super::scalers::Scalers;
use super::sinks::draw;
use crate::backend::ffmpeg::sws_flags;
use crate::config::Interpolation;
use crate::runtime::live::{Renderer, Still};

/// JPEG quality of live pictures.
pub const QUALITY: u8 = 75;
/// Live pictures are at most this wide (scaled down, aspect kept): what a
/// grid of viewers shows, at a fraction of a full-HD encode's cost.
pub const MAX_WIDTH: u32 = 960;

/// The live picture's size for a `w` × `h` frame (even sides).
fn live_size(w: u32, h: u32) -> (u32, u32) {
    if w <= MAX_WIDTH {
        return (w, h);
    }
    let h2 = ((h as u64 * MAX_WIDTH as u64 / w as u64) as u32).max(2) & !1;
    (MAX_WIDTH, h2)
}

/// A renderer for [`crate::runtime::live::LiveHub::set_renderer`].
pub fn renderer() -> Renderer {
    let mut scalers = Scalers::default();
    let host = crate::frame::Pool::new(2);
    let node: Arc<str> = Arc::from("live");
    Box::new(move |still: &Still| {
        let img = &super::on_host(&still.image, &host)?;
        let (w, h) = live_size(img.width, img.height);
        let scaler =
            scalers.get(&node, &still.stream, img, (w, h, Pixel::RGB24), sws_flags(Interpolation::Bilinear)).map_err(|e| e.to_string())?;
        let mut rgb = vec![0u8; w as usize * h as usize * 3];
        scaler.run(img, &mut rgb)?;
        let mut picture = RgbImage::from_raw(w, h, rgb).ok_or("image size mismatch")?;
        // The results are in the frame's pixels: scaled as the picture was.
        let k = w as f32 / img.width as f32;
        let mut marks = draw::marks_of(&still.results);
        if k != 1.0 {
            for m in &mut marks {
                if let Some(b) = m.bbox.as_mut() {
                    *b = b.map(|v| v * k);
                }
            }
        }
        if !marks.is_empty() {
            draw::draw(&mut picture, &marks, 2, draw::font());
        }
        let mut out = Cursor::new(Vec::with_capacity(picture.len() / 8));
        JpegEncoder::new_with_quality(&mut out, QUALITY).encode_image(&picture).map_err(|e| format!("JPEG: {e}"))?;
        Ok(out.into_inner())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn live_pictures_are_at_most_max_width_with_the_aspect_kept() {
        assert_eq!(super::live_size(640, 480), (640, 480));
        assert_eq!(super::live_size(1280, 720), (960, 540));
        assert_eq!(super::live_size(1920, 1080), (960, 540));
        assert_eq!(super::live_size(3840, 1000), (960, 250));
    }
}
