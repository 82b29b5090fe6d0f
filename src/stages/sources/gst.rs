//! `kind = "file"` with `backend = "gstreamer"`: the input decoded by a
//! GStreamer launch line ending in an appsink (`uridecodebin` by default, so
//! files and `rtsp://` URLs work; any fragment with `launch`). Frames are the
//! same pooled host images the FFmpeg backend gives.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::gstreamer::{GstDecoder, launch_line};
use crate::config::{Diagnostic, FileSourceConfig, NodeConfig, PipelineConfig, is_url, mask_credentials};
use crate::frame::Pool;
use crate::runtime::SourceCtx;
use crate::stages::Source;

pub struct GstSource {
    decoder: GstDecoder,
    shown: String,
    pool: Pool<u8>,
    max_frames: Option<u64>,
    live: bool,
}

impl GstSource {
    /// Build and preroll the GStreamer pipeline now, so a bad line or input fails before the run.
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &FileSourceConfig,
        pool_size: usize,
        max_frames: Option<u64>,
    ) -> Result<Self, Diagnostic> {
        if let Some(r) = c.rotate.as_ref().filter(|r| *r.get_ref() == crate::config::Rotate::Auto) {
            return Err(cfg
                .diag(r.span(), format!("source `{}`: rotate = \"auto\" is for the FFmpeg backend", node.name))
                .with_help("leave out backend = \"gstreamer\", or turn the picture in the launch line (videoflip method=automatic)"));
        }
        let uri = cfg.expand(&c.uri)?;
        let input = if is_url(&uri) || uri == "-" { uri.clone() } else { cfg.resolve_path(&c.uri)?.display().to_string() };
        let fragment = match &c.launch {
            Some(l) => Some(cfg.expand(l)?),
            None => None,
        };
        let line = launch_line(&input, fragment.as_deref());
        let decoder = GstDecoder::open(&line).map_err(|e| {
            let span = c.launch.as_ref().map(|l| l.span()).unwrap_or(c.uri.span());
            cfg.diag(span, format!("source `{}`: GStreamer: {}", node.name, mask_credentials(&e)))
                .with_help("check the launch line with gst-launch-1.0, and that the plugins it needs are installed")
        })?;
        let max_frames = match (c.max_frames, max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(GstSource {
            shown: mask_credentials(&line).into_owned(),
            decoder,
            pool: Pool::new(pool_size),
            max_frames,
            live: c.realtime || ["rtsp://", "rtsps://", "udp://", "srt://"].iter().any(|s| uri.starts_with(s)),
        })
    }
}

impl Source for GstSource {
    fn is_live(&self) -> bool {
        self.live
    }

    fn decode(&self) -> Option<String> {
        Some("GStreamer (appsink)".into())
    }

    fn describe(&self) -> String {
        format!("GStreamer: {}", self.shown)
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let mut seq = 0u64;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) {
            let (image, pts) = match self.decoder.next(&self.pool, Duration::from_millis(100))? {
                None => break,
                Some(None) => continue,
                Some(Some(f)) => f,
            };
            let frame = ctx.new_frame(seq, pts, (1, 1_000_000_000), Some(Arc::new(image)));
            seq += 1;
            if !ctx.emit(frame) {
                break;
            }
        }
        Ok(())
    }
}
