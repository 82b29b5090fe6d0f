//! `kind = "images"`: JPEG or PNG snapshots of frames (every N frames, or
//! only frames with results), plain or with the results drawn on them.

use std::path::PathBuf;

use ffmpeg_next::format::Pixel;
use image::{Rgb, RgbImage};

use crate::backend::ffmpeg::{Scaler, sws_flags};
use crate::config::{Diagnostic, ImageFormat, ImagesSinkConfig, Interpolation, PipelineConfig};
use crate::frame::{Frame, Payload};
use crate::stages::{Sink, StageError};

/// A file-name-safe version of a stream name (it can never leave the output folder).
pub fn safe_name(s: &str) -> String {
    let n: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if n.is_empty() { "_".into() } else { n }
}

/// Draw an axis-aligned rectangle outline, clipped to the image.
pub fn rectangle(img: &mut RgbImage, b: [f32; 4], color: Rgb<u8>, thickness: u32) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    let (x0, y0, x1, y1) = (b[0].round() as i64, b[1].round() as i64, b[2].round() as i64, b[3].round() as i64);
    for t in 0..thickness as i64 {
        for x in (x0 - t).max(0)..=(x1 + t).min(w - 1) {
            for y in [y0 - t, y1 + t] {
                if (0..h).contains(&y) {
                    img.put_pixel(x as u32, y as u32, color);
                }
            }
        }
        for y in (y0 - t).max(0)..=(y1 + t).min(h - 1) {
            for x in [x0 - t, x1 + t] {
                if (0..w).contains(&x) {
                    img.put_pixel(x as u32, y as u32, color);
                }
            }
        }
    }
}

pub struct Images {
    folder: PathBuf,
    cfg: ImagesSinkConfig,
    scaler: Option<Scaler>,
    /// Host copies of device (NVDEC) frames.
    host: crate::frame::Pool<u8>,
    written: u64,
}

impl Images {
    pub fn build(cfg: &PipelineConfig, c: &ImagesSinkConfig) -> Result<Self, Diagnostic> {
        let folder = cfg.resolve_path(&c.folder)?;
        std::fs::create_dir_all(&folder)
            .map_err(|e| cfg.diag(c.folder.span(), format!("cannot create folder {}: {e}", folder.display())))?;
        if c.every == 0 {
            return Err(cfg.diag(c.folder.span(), "`every` must be at least 1"));
        }
        Ok(Images { folder, cfg: c.clone(), scaler: None, written: 0, host: crate::frame::Pool::new(2) })
    }

    fn boxes(frame: &Frame) -> Vec<([f32; 4], Rgb<u8>)> {
        let mut out = Vec::new();
        for a in &frame.results {
            match &*a.payload {
                Payload::TextBoxes(b) => out.extend(b.iter().map(|t| (t.bbox, Rgb([0, 255, 0])))),
                Payload::Texts(t) => out.extend(t.iter().map(|t| (t.bbox, Rgb([255, 200, 0])))),
                Payload::Objects(o) => out.extend(o.iter().map(|o| (o.bbox, Rgb([255, 0, 80])))),
                _ => {}
            }
        }
        out
    }
}

impl Sink for Images {
    fn describe(&self) -> String {
        format!(
            "{:?} snapshots every {} frame(s){}{} to {}",
            self.cfg.format,
            self.cfg.every,
            if self.cfg.only_with_results { " with results" } else { "" },
            if self.cfg.annotate { ", annotated" } else { "" },
            self.folder.display()
        )
        .to_lowercase()
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let Some(img) = frame.image.as_ref() else { return Ok(()) };
        if !frame.seq.is_multiple_of(self.cfg.every) {
            return Ok(());
        }
        let boxes = Self::boxes(frame);
        if self.cfg.only_with_results && boxes.is_empty() {
            return Ok(());
        }
        let img = &crate::stages::on_host(img, &self.host).map_err(StageError::Frame)?;
        if !self.scaler.as_ref().is_some_and(|s| s.fits(img, img.width, img.height, Pixel::RGB24)) {
            self.scaler = Some(
                Scaler::new(img, img.width, img.height, Pixel::RGB24, sws_flags(Interpolation::Bilinear))
                    .map_err(|e| StageError::Frame(e.to_string()))?,
            );
        }
        let mut rgb = vec![0u8; img.width as usize * img.height as usize * 3];
        self.scaler.as_mut().expect("set above").run(img, &mut rgb).map_err(StageError::Frame)?;
        let mut picture = RgbImage::from_raw(img.width, img.height, rgb).ok_or_else(|| StageError::Frame("image size mismatch".into()))?;
        if self.cfg.annotate {
            for (b, color) in boxes {
                rectangle(&mut picture, b, color, 2);
            }
        }
        let ext = match self.cfg.format {
            ImageFormat::Jpeg => "jpg",
            ImageFormat::Png => "png",
        };
        let path = self.folder.join(format!("{}-{:06}.{ext}", safe_name(&frame.stream), frame.seq));
        picture.save(&path).map_err(|e| StageError::Frame(format!("writing {}: {e}", path.display())))?;
        self.written += 1;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        tracing::debug!("{}: {} images", self.folder.display(), self.written);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape_the_folder() {
        assert_eq!(safe_name("cam-1"), "cam-1");
        assert_eq!(safe_name("../../etc/passwd"), "______etc_passwd");
        assert_eq!(safe_name(""), "_");
    }

    #[test]
    fn rectangle_is_clipped_outline() {
        let mut img = RgbImage::new(10, 10);
        rectangle(&mut img, [2.0, 2.0, 20.0, 5.0], Rgb([255, 0, 0]), 1);
        assert_eq!(img.get_pixel(2, 2), &Rgb([255, 0, 0]));
        assert_eq!(img.get_pixel(9, 5), &Rgb([255, 0, 0]));
        assert_eq!(img.get_pixel(4, 4), &Rgb([0, 0, 0]), "inside stays");
    }
}
