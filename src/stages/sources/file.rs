//! `kind = "file"`: a media file or URL decoded by FFmpeg.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::ffmpeg::{VideoDecoder, copy_to_image};
use crate::config::{Diagnostic, FileSourceConfig, Hwaccel, NodeConfig, PipelineConfig, is_url};
use crate::frame::Pool;
use crate::runtime::SourceCtx;
use crate::stages::Source;

/// Where a file source decodes, fixed when the stage is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeMode {
    /// FFmpeg on the CPU into pooled host buffers.
    Software,
    /// NVDEC on a CUDA device (frames in device memory).
    Cuda,
}

/// Whether this build has a device decoder to hand CUDA frames to. The GPU
/// path (NVDEC into device memory) plugs in here; until it does, a CUDA device
/// is reported but decoding stays in software.
const DEVICE_DECODER: bool = false;

/// Choose the decode path for `hwaccel` given whether a CUDA device opens
/// (`Err`: why not). Returns the mode and the words for the log and summary.
pub fn resolve_decode(hwaccel: Hwaccel, device: Result<(), String>) -> Result<(DecodeMode, String), String> {
    match (hwaccel, device) {
        (Hwaccel::None, _) => Ok((DecodeMode::Software, "software (hwaccel = \"none\")".into())),
        (_, Ok(())) if DEVICE_DECODER => Ok((DecodeMode::Cuda, "NVDEC on the CUDA device".into())),
        (Hwaccel::Auto, Ok(())) => {
            Ok((DecodeMode::Software, "software (a CUDA device is present, but this build has no device decoder)".into()))
        }
        (Hwaccel::Auto, Err(why)) => Ok((DecodeMode::Software, format!("software ({why})"))),
        (Hwaccel::Cuda, Ok(())) => Err("hwaccel = \"cuda\": this build has no device decoder (NVDEC)".into()),
        (Hwaccel::Cuda, Err(why)) => Err(format!("hwaccel = \"cuda\", but {why}")),
    }
}

pub struct FileSource {
    path: PathBuf,
    /// Fixed at build time; only `Software` is decoded so far.
    mode: DecodeMode,
    decode: String,
    decoder: VideoDecoder,
    pool: Pool<u8>,
    max_frames: Option<u64>,
    live: bool,
    realtime: bool,
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
        let hw = *c.hwaccel.get_ref();
        let device = if hw == Hwaccel::None { Err(String::new()) } else { crate::backend::ffmpeg::cuda_decode_device() };
        let (mode, decode) = resolve_decode(hw, device).map_err(|e| {
            cfg.diag(c.hwaccel.span(), format!("source `{}`: {e}", node.name)).with_help(
                "use hwaccel = \"auto\" to decode in software when there is no GPU (`infer-stream doctor` shows what this machine has)",
            )
        })?;
        if hw == Hwaccel::Auto {
            tracing::info!("source `{}`: decode {decode}", node.name);
        }
        // `-`: a container stream piped in on stdin (FFmpeg probes its format).
        let open_path = if path.as_os_str() == "-" { PathBuf::from("pipe:0") } else { path.clone() };
        let decoder = VideoDecoder::open(&open_path, c.decoder_threads).map_err(|e| {
            cfg.diag(c.uri.span(), format!("source `{}`: {e}", node.name))
                .with_help("check the path and that FFmpeg can play it (ffprobe FILE)")
        })?;
        let uri = c.uri.get_ref();
        let live = c.realtime
            || (is_url(uri) && ["rtsp", "rtsps", "rtmp", "udp", "srt", "rtp"].iter().any(|s| uri.starts_with(&format!("{s}://"))));
        let max_frames = match (c.max_frames, max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(FileSource { path, mode, decode, decoder, pool: Pool::new(pool_size), max_frames, live, realtime: c.realtime })
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

    fn decode(&self) -> Option<String> {
        Some(self.decode.clone())
    }

    fn describe(&self) -> String {
        let i = &self.decoder.info;
        debug_assert_eq!(self.mode, DecodeMode::Software, "no device decoder yet");
        format!(
            "{} ({} {}x{}{}, decode: {}{})",
            if self.path.as_os_str() == "-" { std::path::Path::new("stdin") } else { self.path.as_path() }.display(),
            i.codec,
            i.width,
            i.height,
            i.fps.map(|f| format!(" @ {f:.2} fps")).unwrap_or_default(),
            self.decode,
            if self.realtime { ", paced in real time" } else { "" }
        )
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let tb = self.decoder.info.time_base;
        let mut seq = 0u64;
        let mut bad_frames = 0u64;
        // Realtime pacing: the first frame's pts and when it went out.
        let mut clock: Option<(i64, std::time::Instant)> = None;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) {
            // Live totals for metrics (the frame about to be decoded is counted next time round).
            ctx.set_decode_errors(self.decoder.skipped_frames + bad_frames, self.decoder.corrupt_bursts);
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
            if let (true, Some(p)) = (self.realtime, pts) {
                let (p0, t0) = *clock.get_or_insert((p, std::time::Instant::now()));
                let due = t0 + std::time::Duration::from_secs_f64(((p - p0) as f64 * tb.0 as f64 / tb.1.max(1) as f64).max(0.0));
                // Sleep in short steps so a stop request is honoured promptly.
                while !ctx.stopping() && std::time::Instant::now() < due {
                    std::thread::sleep((due - std::time::Instant::now()).min(std::time::Duration::from_millis(50)));
                }
            }
            let frame = ctx.new_frame(seq, pts, tb, Some(Arc::new(image)));
            seq += 1;
            if !ctx.emit(frame) {
                break;
            }
        }
        // Bursts were logged as they ended; the totals go to the summary.
        ctx.set_decode_errors(self.decoder.skipped_frames + bad_frames, self.decoder.corrupt_bursts);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_mode_is_chosen_and_said() {
        let none = || Err("no CUDA device".to_string());
        assert_eq!(resolve_decode(Hwaccel::Auto, none()).unwrap(), (DecodeMode::Software, "software (no CUDA device)".into()));
        assert_eq!(resolve_decode(Hwaccel::None, Ok(())).unwrap().0, DecodeMode::Software);
        assert_eq!(resolve_decode(Hwaccel::Cuda, none()).unwrap_err(), "hwaccel = \"cuda\", but no CUDA device");
        // A device without a device decoder in this build: auto says so, cuda refuses.
        assert!(resolve_decode(Hwaccel::Auto, Ok(())).unwrap().1.contains("no device decoder"));
        assert!(resolve_decode(Hwaccel::Cuda, Ok(())).is_err());
    }
}
