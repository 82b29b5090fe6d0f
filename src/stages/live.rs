//! The live pictures' renderer: a still (a sink's frame, redacted when the
//! pipeline redacts) with its results drawn as the `images` and `video`
//! sinks draw them (boxes, labels, track ids, lines and zones with their
//! counts), encoded as JPEG for the API's viewers.

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

/// A renderer for [`crate::runtime::live::LiveHub::set_renderer`].
pub fn renderer() -> Renderer {
    let mut scalers = Scalers::default();
    let host = crate::frame::Pool::new(2);
    let node: Arc<str> = Arc::from("live");
    Box::new(move |still: &Still| {
        let img = &super::on_host(&still.image, &host)?;
        let scaler = scalers
            .get(&node, &still.stream, img, (img.width, img.height, Pixel::RGB24), sws_flags(Interpolation::Bilinear))
            .map_err(|e| e.to_string())?;
        let mut rgb = vec![0u8; img.width as usize * img.height as usize * 3];
        scaler.run(img, &mut rgb)?;
        let mut picture = RgbImage::from_raw(img.width, img.height, rgb).ok_or("image size mismatch")?;
        let marks = draw::marks_of(&still.results);
        if !marks.is_empty() {
            draw::draw(&mut picture, &marks, 2, draw::font());
        }
        let mut out = Cursor::new(Vec::with_capacity(picture.len() / 8));
        JpegEncoder::new_with_quality(&mut out, QUALITY).encode_image(&picture).map_err(|e| format!("JPEG: {e}"))?;
        Ok(out.into_inner())
    })
}
