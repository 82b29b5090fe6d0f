//! `kind = "audio"`: decoded, resampled audio cut into fixed windows, each
//! with its exact timestamp (sample index / rate).

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::ffmpeg::{AudioDecoder, InputOptions};
use crate::config::{AudioSourceConfig, Diagnostic, NodeConfig, PipelineConfig};
use crate::frame::{AudioChunk, Pool};
use crate::runtime::SourceCtx;
use crate::stages::Source;

pub struct AudioSource {
    path: PathBuf,
    decoder: AudioDecoder,
    rate: u32,
    window: usize,
    hop: usize,
    pool: Pool<f32>,
    max_frames: Option<u64>,
}

impl AudioSource {
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &AudioSourceConfig,
        pool_size: usize,
        max_frames: Option<u64>,
    ) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.uri)?;
        let rate = *c.sample_rate.get_ref();
        let window = *c.window.get_ref();
        if window == 0 || rate == 0 {
            return Err(cfg.diag(c.window.span(), "window and sample_rate must be positive"));
        }
        let mut opts = InputOptions { format: c.format.as_ref().map(|f| cfg.expand(f)).transpose()?, options: Vec::new() };
        if let Some(r) = &c.input_rate {
            opts.options.push(("sample_rate".into(), r.get_ref().to_string()));
        }
        if opts.format.is_some() && c.input_rate.is_some() {
            opts.options.push(("ch_layout".into(), format!("{}C", c.channels.as_ref().map_or(1, |n| *n.get_ref()))));
        }
        let decoder = AudioDecoder::open_with(&path, rate, &opts).map_err(|e| {
            cfg.diag(c.uri.span(), format!("source `{}`: {e}", node.name))
                .with_help("check the path and that FFmpeg can play it (ffprobe FILE)")
        })?;
        Ok(AudioSource { path, decoder, rate, window, hop: c.hop.unwrap_or(window).max(1), pool: Pool::new(pool_size), max_frames })
    }
}

impl Source for AudioSource {
    fn expected_frames(&self) -> Option<u64> {
        let n = self.decoder.duration.map(|d| (d * self.rate as f64 / self.hop as f64).ceil() as u64)?;
        Some(self.max_frames.map_or(n, |m| m.min(n)))
    }

    fn describe(&self) -> String {
        let shown = if self.path.as_os_str() == "-" {
            "stdin".into()
        } else {
            crate::config::mask_credentials(&self.path.to_string_lossy()).into_owned()
        };
        format!("{} ({}; windows of {} samples every {})", shown, self.decoder.describe, self.window, self.hop)
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let mut buf: Vec<f32> = Vec::new();
        let mut consumed: u64 = 0; // stream index of buf[0]
        let mut seq = 0u64;
        let mut more = true;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) {
            // Read a window and the next hop ahead, so the last window is known as such.
            while more && buf.len() < self.window + self.hop {
                more = self.decoder.read(&mut buf).map_err(|e| e.to_string())?;
            }
            if buf.is_empty() {
                break;
            }
            let valid = buf.len().min(self.window);
            let last = !more && buf.len() <= self.hop.max(valid);
            let mut samples = self.pool.get(self.window);
            samples[..valid].copy_from_slice(&buf[..valid]);
            samples[valid..].fill(0.0);
            let chunk = AudioChunk { samples, sample_rate: self.rate, start: consumed, valid, last };
            let mut frame = ctx.new_frame(seq, Some(consumed as i64), (1, self.rate as i32), None);
            frame.audio = Some(Arc::new(chunk));
            seq += 1;
            let step = self.hop.min(buf.len());
            buf.drain(..step);
            consumed += step as u64;
            if !ctx.emit(frame) || last {
                break;
            }
        }
        ctx.note_decode_errors(self.decoder.corrupt_packets);
        Ok(())
    }
}
