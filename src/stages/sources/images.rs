//! `kind = "image_sequence"`: still images as one video stream. The images
//! are the files of a folder (with an image extension) or those a numbered
//! pattern such as `img%05d.jpg` names, in natural name order (`img2` before
//! `img10`; a pattern's files by their number). Each image is decoded by
//! FFmpeg on its own, so sizes and formats may differ from one image to the
//! next; an image that cannot be read, or is damaged (decoded strictly: a cut
//! or corrupt JPEG is not concealed), is skipped and counted as corrupt data.
//! Frame `i` of the sequence has the timestamp `i / fps`, skipped images
//! keeping their place in time.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::ffmpeg::{InputOptions, VideoDecoder, copy_to_image};
use crate::config::{Diagnostic, ImageSequenceConfig, NodeConfig, PipelineConfig};
use crate::frame::{Image, Pool};
use crate::runtime::SourceCtx;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Source};

/// Extensions a folder's images are taken by, unless `extensions` says otherwise.
const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "bmp", "tif", "tiff", "webp"];

pub struct ImageSequence {
    /// What `path` named, for messages.
    shown: String,
    files: Vec<PathBuf>,
    /// Timestamps in 1/`den` s steps of `num`: frame `i` is at `i × num / den` s.
    time_base: (i32, i32),
    fps: f64,
    max_frames: Option<u64>,
    max_pixels: u64,
    pool: Pool<u8>,
    /// Frames emitted so far, over every pass (`restart`).
    next_seq: u64,
    /// Where the next pass starts in time (after a restart: after the last pass).
    pts_offset: i64,
}

/// Compare names as people read numbered files: runs of digits by their
/// value (`img2` < `img10`), the rest character by character; equal values
/// with different zero padding, and names otherwise equal, fall back to the
/// plain byte order so the order is total.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let run = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (n, m) = (run(x), run(y));
                let trim = |s: &[u8]| {
                    let z = s.iter().take_while(|c| **c == b'0').count();
                    s[z.min(s.len().saturating_sub(1))..].to_vec()
                };
                let (p, q) = (trim(&x[..n]), trim(&y[..m]));
                match p.len().cmp(&q.len()).then_with(|| p.cmp(&q)) {
                    Ordering::Equal => {}
                    o => return o,
                }
                (x, y) = (&x[n..], &y[m..]);
            }
            (Some(c), Some(d)) => match c.cmp(d) {
                Ordering::Equal => (x, y) = (&x[1..], &y[1..]),
                o => return o,
            },
        }
    }
}

/// A numbered pattern's file name split at its `%d` / `%0Nd`: (before, after).
fn split_pattern(name: &str) -> Option<(&str, &str)> {
    let at = name.find('%')?;
    let rest = &name[at + 1..];
    let digits = rest.bytes().take_while(|c| c.is_ascii_digit()).count();
    rest[digits..].starts_with('d').then(|| (&name[..at], &rest[digits + 1..]))
}

/// The images `path` names, in order: a folder's image files by natural
/// name order, or a pattern's files by their number. `Err` says why none.
fn list(path: &Path, extensions: &[String]) -> Result<Vec<PathBuf>, String> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("cannot list folder {}: {e}", path.display()))?
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| p.extension().is_some_and(|e| extensions.iter().any(|x| x.eq_ignore_ascii_case(&e.to_string_lossy()))))
            .collect();
        files.sort_by(|a, b| {
            natural_cmp(&a.file_name().unwrap_or_default().to_string_lossy(), &b.file_name().unwrap_or_default().to_string_lossy())
        });
        return Ok(files);
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some((before, after)) = split_pattern(&name) else {
        return Err(format!("{} is neither a folder nor a numbered pattern such as img%05d.jpg", path.display()));
    };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut numbered: Vec<(u64, PathBuf)> = std::fs::read_dir(folder)
        .map_err(|e| format!("cannot list folder {}: {e}", folder.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let number = n.strip_prefix(before)?.strip_suffix(after)?;
            let value = number.parse::<u64>().ok().filter(|_| number.bytes().all(|c| c.is_ascii_digit()))?;
            Some((value, e.path()))
        })
        .filter(|(_, p)| p.is_file())
        .collect();
    numbered.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    Ok(numbered.into_iter().map(|(_, p)| p).collect())
}

impl ImageSequence {
    /// List the images now, so a missing folder or an empty sequence is reported before anything runs.
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &ImageSequenceConfig,
        pool_size: usize,
        max_frames: Option<u64>,
    ) -> Result<Self, Diagnostic> {
        let fps = *c.fps.get_ref();
        if !(fps.is_finite() && fps > 0.0 && fps <= 1000.0) {
            return Err(cfg.diag(c.fps.span(), format!("source `{}`: fps = {fps}: a frame rate above 0, at most 1000", node.name)));
        }
        let path = cfg.resolve_path(&c.path)?;
        let extensions: Vec<String> = match &c.extensions {
            Some(x) => x.iter().map(|e| e.trim_start_matches('.').to_string()).collect(),
            None => IMAGE_EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        };
        let files = list(&path, &extensions).map_err(|e| cfg.diag(c.path.span(), format!("source `{}`: {e}", node.name)))?;
        if files.is_empty() {
            return Err(cfg
                .diag(c.path.span(), format!("source `{}`: no images in {}", node.name, c.path.get_ref()))
                .with_help(format!("a folder of {} files, or a pattern such as frames/img%05d.jpg", extensions.join("/"))));
        }
        // Whole frame rates tick in frames; others in 1/1000 frames.
        let time_base = if fps.fract() == 0.0 { (1, fps as i32) } else { (1000, (fps * 1000.0).round() as i32) };
        let max_frames = match (c.max_frames, max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(ImageSequence {
            shown: path.display().to_string(),
            files,
            time_base,
            fps,
            max_frames,
            max_pixels: c.max_pixels.or(cfg.settings.max_pixels).unwrap_or(crate::backend::ffmpeg::DEFAULT_MAX_PIXELS),
            pool: Pool::new(pool_size),
            next_seq: 0,
            pts_offset: 0,
        })
    }

    /// Decode the one image of `file`.
    fn decode(&self, file: &Path) -> Result<Image, String> {
        // A name with a `%` in it is one file, not a pattern.
        let opts = InputOptions {
            options: vec![("pattern_type".into(), "none".into())],
            max_pixels: Some(self.max_pixels),
            strict: true,
            ..Default::default()
        };
        let mut dec = VideoDecoder::open_with(file, 1, &opts).map_err(|e| e.to_string())?;
        let image = match dec.next_frame().map_err(|e| e.to_string())? {
            Some(f) => copy_to_image(f, &self.pool)?,
            None => return Err(format!("{}: no picture could be decoded", file.display())),
        };
        if dec.skipped_frames > 0 {
            return Err(format!("{}: corrupt data", file.display()));
        }
        Ok(image)
    }
}

impl Source for ImageSequence {
    fn expected_frames(&self) -> Option<u64> {
        let n = self.files.len() as u64;
        Some(self.max_frames.map_or(n, |m| m.min(n)))
    }

    fn describe(&self) -> String {
        format!("{} ({} images at {} fps, natural name order)", self.shown, self.files.len(), self.fps)
    }

    fn exhausted(&self) -> bool {
        self.max_frames.is_some_and(|m| self.next_seq >= m)
    }

    fn reopen(&mut self) -> Result<(), String> {
        // The next pass goes on in time after the last image of this one.
        Ok(())
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let (mut bad, mut bursts, mut in_burst) = (0u64, 0u64, false);
        // Image `i` is `i` frames in: one tick a frame, or 1000 for a fractional rate.
        let tick = |i: usize| if self.time_base.0 == 1 { i as i64 } else { i as i64 * 1000 };
        let first = self.next_seq;
        let mut seq = first;
        for (i, file) in self.files.iter().enumerate() {
            if ctx.stopping() || self.max_frames.is_some_and(|m| seq >= m) {
                break;
            }
            let image = match self.decode(file) {
                Ok(image) => image,
                Err(e) => {
                    bad += 1;
                    if !in_burst {
                        bursts += 1;
                    }
                    in_burst = true;
                    tracing::warn!("{}: not a readable image ({e}); skipped", file.display());
                    ctx.set_decode_errors(bad, bursts);
                    continue;
                }
            };
            in_burst = false;
            let pts = self.pts_offset + tick(i);
            let frame = ctx.new_frame(seq, Some(pts), self.time_base, Some(Arc::new(image)));
            seq += 1;
            self.next_seq = seq;
            if !ctx.emit(frame) {
                break;
            }
        }
        ctx.set_decode_errors(bad, bursts);
        self.pts_offset += tick(self.files.len());
        if seq == first && !ctx.stopping() && !self.exhausted() {
            return Err(format!("{}: no image could be decoded ({bad} skipped)", self.shown));
        }
        Ok(())
    }
}

impl Build for ImageSequenceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        ImageSequence::build(cx.cfg, cx.node, self, cx.pool_size, cx.max_frames()).map(|s| Body::Source(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_names_sort_by_value() {
        let mut v = vec!["img10.jpg", "img2.jpg", "img1.jpg", "img02.jpg", "a.png", "img1b.jpg", "IMG3.jpg"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["IMG3.jpg", "a.png", "img1.jpg", "img1b.jpg", "img02.jpg", "img2.jpg", "img10.jpg"]);
    }

    #[test]
    fn a_pattern_is_split_at_its_number() {
        assert_eq!(split_pattern("img%05d.jpg"), Some(("img", ".jpg")));
        assert_eq!(split_pattern("%d.png"), Some(("", ".png")));
        assert_eq!(split_pattern("frame.jpg"), None);
        assert_eq!(split_pattern("100%.jpg"), None);
    }
}
