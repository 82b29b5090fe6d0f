//! `kind = "file"`: a media file or URL decoded by FFmpeg.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::ffmpeg::{VideoDecoder, copy_to_image};
use crate::config::{Diagnostic, FileSourceConfig, NodeConfig, PipelineConfig, is_url};
use crate::frame::Pool;
use crate::runtime::SourceCtx;
use crate::stages::Source;

pub struct FileSource {
    path: PathBuf,
    decoder: VideoDecoder,
    pool: Pool<u8>,
    max_frames: Option<u64>,
    live: bool,
}

impl FileSource {
    /// Open the input now, so a missing or broken file is reported before anything runs.
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &FileSourceConfig,
        _index: u32,
        pool_size: usize,
        max_frames: Option<u64>,
    ) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.uri)?;
        let decoder = VideoDecoder::open(&path, c.decoder_threads).map_err(|e| {
            cfg.diag(c.uri.span(), format!("source `{}`: {e}", node.name))
                .with_help("check the path and that FFmpeg can play it (ffprobe FILE)")
        })?;
        let uri = c.uri.get_ref();
        let live = is_url(uri) && ["rtsp", "rtsps", "rtmp", "udp", "srt", "rtp"].iter().any(|s| uri.starts_with(&format!("{s}://")));
        let max_frames = match (c.max_frames, max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(FileSource { path, decoder, pool: Pool::new(pool_size), max_frames, live })
    }
}

impl Source for FileSource {
    fn expected_frames(&self) -> Option<u64> {
        match (self.decoder.info.frames, self.max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn is_live(&self) -> bool {
        self.live
    }

    fn describe(&self) -> String {
        let i = &self.decoder.info;
        format!(
            "{} ({} {}x{}{}, decode: FFmpeg software)",
            self.path.display(),
            i.codec,
            i.width,
            i.height,
            i.fps.map(|f| format!(" @ {f:.2} fps")).unwrap_or_default()
        )
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let tb = self.decoder.info.time_base;
        let mut seq = 0u64;
        let mut bad_frames = 0u64;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) {
            let decoded = match self.decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            };
            let pts = decoded.timestamp().or(decoded.pts());
            let image = match copy_to_image(decoded, &self.pool) {
                Ok(i) => i,
                Err(e) => {
                    bad_frames += 1;
                    tracing::warn!("{}: frame {seq}: {e}; skipped", self.path.display());
                    continue;
                }
            };
            let frame = ctx.new_frame(seq, pts, tb, Some(Arc::new(image)));
            seq += 1;
            if !ctx.emit(frame) {
                break;
            }
        }
        let corrupt = self.decoder.corrupt_packets;
        if corrupt > 0 || bad_frames > 0 {
            tracing::warn!("{}: {corrupt} corrupt packet(s) and {bad_frames} unusable frame(s) skipped", self.path.display());
        }
        ctx.note_decode_errors(corrupt + bad_frames);
        Ok(())
    }
}
