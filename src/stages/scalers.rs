//! Scalers kept per stream and input for the stages and sinks that convert
//! frames with swscale (preprocess, crop, the images sink): a fan-in of
//! streams of different sizes reuses each stream's scaler instead of building
//! one whenever the next frame comes from another stream.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ffmpeg_next::format::Pixel;

use crate::backend::ffmpeg::Scaler;
use crate::frame::Image;
use crate::stages::StageError;

/// Scalers kept per stream and input (size and format), so a fan-in of
/// streams of different sizes reuses each one's scaler rather than building
/// a new one whenever the next frame comes from another stream. Bounded: the
/// least recently used goes when [`Scalers::MAX`] are kept.
#[derive(Default)]
pub struct Scalers {
    /// (stream, scaler, last use).
    kept: Vec<(Arc<str>, Scaler, u64)>,
    uses: u64,
    /// The input each stream last had, to tell a change.
    last: HashMap<Arc<str>, (u32, u32, Pixel)>,
    /// Streams whose change of input has been said (once each).
    told: HashSet<Arc<str>>,
}

impl Scalers {
    const MAX: usize = 16;
    /// Streams remembered for telling a change; beyond this (a `dir` source's
    /// many files, one stream each) the memory starts again.
    const MAX_STREAMS: usize = 1024;

    /// A scaler for `img` of `stream` to `w`x`h` `fmt`; a stream whose input
    /// changes is said once, at INFO (later changes at DEBUG).
    pub fn get(
        &mut self,
        node: &str,
        stream: &Arc<str>,
        img: &Image,
        (w, h, fmt): (u32, u32, Pixel),
        flags: i32,
    ) -> Result<&mut Scaler, StageError> {
        self.uses += 1;
        let input = (img.width, img.height, img.format);
        if self.last.len() >= Self::MAX_STREAMS && !self.last.contains_key(stream) {
            self.last.clear();
            self.told.clear();
        }
        if let Some(before) = self.last.insert(stream.clone(), input)
            && before != input
        {
            if self.told.insert(stream.clone()) {
                tracing::info!(
                    "{node}: stream `{stream}`: input changed from {}x{} {:?} to {}x{} {:?} (said once per stream)",
                    before.0,
                    before.1,
                    before.2,
                    input.0,
                    input.1,
                    input.2
                );
            } else {
                tracing::debug!("{node}: stream `{stream}`: input changed to {}x{} {:?}", input.0, input.1, input.2);
            }
        }
        let i = match self.kept.iter().position(|(s, sc, _)| s == stream && sc.fits(img, w, h, fmt)) {
            Some(i) => i,
            None => {
                let scaler = Scaler::new(img, w, h, fmt, flags).map_err(|e| StageError::Frame(e.to_string()))?;
                if self.kept.len() >= Self::MAX
                    && let Some(oldest) = self.kept.iter().enumerate().min_by_key(|(_, k)| k.2).map(|(i, _)| i)
                {
                    self.kept.swap_remove(oldest);
                }
                self.kept.push((stream.clone(), scaler, 0));
                self.kept.len() - 1
            }
        };
        let k = &mut self.kept[i];
        k.2 = self.uses;
        Ok(&mut k.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Pool;

    /// One scaler per stream and input, reused as streams alternate; bounded.
    #[test]
    fn scalers_are_kept_per_stream_and_bounded() {
        let mut sc = Scalers::default();
        let (hd, sd): (Arc<str>, Arc<str>) = ("hd".into(), "sd".into());
        let pool = Pool::new(4);
        let (big, small) = (Image::rgb24(64, 36, pool.get(64 * 36 * 3)), Image::rgb24(32, 18, pool.get(32 * 18 * 3)));
        for _ in 0..10 {
            sc.get("pre", &hd, &big, (16, 9, Pixel::RGB24), 0).unwrap();
            sc.get("pre", &sd, &small, (16, 9, Pixel::RGB24), 0).unwrap();
        }
        assert_eq!(sc.kept.len(), 2, "built once each");
        assert!(sc.told.is_empty(), "neither stream changed size");
        sc.get("pre", &hd, &small, (16, 9, Pixel::RGB24), 0).unwrap();
        assert_eq!((sc.kept.len(), sc.told.len()), (3, 1));
        for i in 0..40 {
            let s: Arc<str> = format!("cam{i}").into();
            sc.get("pre", &s, &small, (16, 9, Pixel::RGB24), 0).unwrap();
        }
        assert_eq!(sc.kept.len(), Scalers::MAX);
        assert!(sc.kept.iter().any(|(s, _, _)| &**s == "cam39"), "the newest is kept");
    }
}
