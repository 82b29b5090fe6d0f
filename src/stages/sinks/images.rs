//! `kind = "images"`: JPEG or PNG snapshots of frames (every N frames, or
//! only frames with results), plain or with the results drawn on them.

use std::path::PathBuf;
use std::sync::Arc;

use ffmpeg_next::format::Pixel;
use image::RgbImage;

use super::draw;
use crate::backend::ffmpeg::sws_flags;
use crate::config::{Diagnostic, ImageFormat, ImagesSinkConfig, Interpolation, PipelineConfig};
use crate::frame::Frame;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::scalers::Scalers;
use crate::stages::{Body, Sink, StageError};

/// The snapshot file name for frame `seq` of `stream`: `STREAM-SEQ.ext`, with
/// the stream named as every other per-stream output names it
/// ([`super::stream_file_name`]), so it can never leave the folder and two
/// streams the `dir` source lets through never share a file.
fn file_name(stream: &str, seq: u64, ext: &str) -> String {
    format!("{}-{seq:06}.{ext}", super::stream_file_name(stream))
}

pub struct Images {
    name: Arc<str>,
    folder: PathBuf,
    cfg: ImagesSinkConfig,
    scalers: Scalers,
    /// Host copies of device (NVDEC) frames.
    host: crate::frame::Pool<u8>,
    written: u64,
    trails: draw::Trails,
}

impl Images {
    pub fn build(cfg: &PipelineConfig, name: Arc<str>, c: &ImagesSinkConfig) -> Result<Self, Diagnostic> {
        let folder = cfg.resolve_path(&c.folder)?;
        std::fs::create_dir_all(&folder)
            .map_err(|e| cfg.diag(c.folder.span(), format!("cannot create folder {}: {e}", folder.display())))?;
        if c.every == 0 {
            return Err(cfg.diag(c.folder.span(), "`every` must be at least 1"));
        }
        Ok(Images {
            name,
            folder,
            cfg: c.clone(),
            scalers: Scalers::default(),
            written: 0,
            host: crate::frame::Pool::new(2),
            trails: draw::Trails::default(),
        })
    }
}

impl Sink for Images {
    fn describe(&self) -> String {
        format!(
            "{} snapshots every {} frame(s){}{} to {}",
            format!("{:?}", self.cfg.format).to_lowercase(),
            self.cfg.every,
            if self.cfg.only_with_results { " with results" } else { "" },
            if self.cfg.annotate { ", annotated" } else { "" },
            crate::config::tidy_path(&self.folder).display()
        )
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let Some(img) = frame.image.as_ref() else { return Ok(()) };
        // Trails follow every frame, drawn or not.
        let trail = if self.cfg.annotate { self.trails.update(frame) } else { Vec::new() };
        if !frame.seq.is_multiple_of(self.cfg.every) {
            return Ok(());
        }
        let mut marks = if self.cfg.annotate || self.cfg.only_with_results { draw::marks(frame) } else { Vec::new() };
        if !marks.is_empty() {
            marks.splice(0..0, trail);
        }
        if self.cfg.only_with_results && marks.is_empty() {
            return Ok(());
        }
        let img = &crate::stages::on_host(img, &self.host).map_err(StageError::Frame)?;
        let scaler =
            self.scalers.get(&self.name, &frame.stream, img, (img.width, img.height, Pixel::RGB24), sws_flags(Interpolation::Bilinear))?;
        let mut rgb = vec![0u8; img.width as usize * img.height as usize * 3];
        scaler.run(img, &mut rgb).map_err(StageError::Frame)?;
        let mut picture = RgbImage::from_raw(img.width, img.height, rgb).ok_or_else(|| StageError::Frame("image size mismatch".into()))?;
        if self.cfg.annotate && !marks.is_empty() {
            draw::draw(&mut picture, &marks, 2, draw::font());
        }
        let ext = match self.cfg.format {
            ImageFormat::Jpeg => "jpg",
            ImageFormat::Png => "png",
        };
        let path = self.folder.join(file_name(&frame.stream, frame.seq, ext));
        picture.save(&path).map_err(|e| StageError::Frame(format!("writing {}: {e}", path.display())))?;
        self.written += 1;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        tracing::debug!("{}: {} images", self.folder.display(), self.written);
        Ok(())
    }
}

impl Build for ImagesSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Images::build(cx.cfg, cx.name.clone(), self).map(|s| Body::Sink(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape_the_folder() {
        assert_eq!(file_name("cam-1", 7, "png"), "cam-1-000007.png");
        assert_eq!(file_name("../../etc/passwd", 0, "jpg"), "_._.._etc_passwd-000000.jpg");
        assert_eq!(file_name("..", 0, "jpg"), "_.-000000.jpg");
        assert_eq!(file_name("", 0, "jpg"), "_-000000.jpg");
    }

    /// Regression: `a.mp4` and `a_mp4` (two files the `dir` source accepts as
    /// distinct) once both became `a_mp4-…`, one overwriting the other.
    #[test]
    fn streams_with_distinct_output_names_get_distinct_snapshots() {
        assert_ne!(file_name("a.mp4", 0, "png"), file_name("a_mp4", 0, "png"));
        assert_eq!(file_name("a.mp4", 0, "png"), "a.mp4-000000.png");
    }
}
