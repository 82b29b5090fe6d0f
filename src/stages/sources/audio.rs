//! `kind = "audio"`: decoded, resampled audio cut into fixed windows, each
//! with its exact timestamp (sample index / rate).

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::ffmpeg::{AudioDecoder, FfmpegError, InputOptions};
use crate::config::{AudioSourceConfig, Diagnostic, NodeConfig, PipelineConfig};
use crate::frame::{AudioChunk, Pool};
use crate::runtime::{Shutdown, SourceCtx};
use crate::stages::{Body, Source};

use super::{Built, StoppedAtOpen};
use crate::stages::build::{Build, BuildCtx};

/// Cuts a decoder's samples into windows of `window` samples every `hop`,
/// each stamped with its first sample's index; the stream's last window is
/// marked, and zero-padded when the audio ends inside it.
pub struct Windows {
    window: usize,
    hop: usize,
    buf: Vec<f32>,
    /// Stream index of `buf[0]`.
    consumed: u64,
    more: bool,
    done: bool,
}

impl Windows {
    pub fn new(window: usize, hop: usize) -> Self {
        Windows { window, hop: hop.max(1), buf: Vec::new(), consumed: 0, more: true, done: false }
    }

    /// Samples the windows have moved past (the stream position of the next window).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The next window, `None` after the last one.
    pub fn next(&mut self, decoder: &mut AudioDecoder, pool: &Pool<f32>, rate: u32) -> Result<Option<AudioChunk>, FfmpegError> {
        if self.done {
            return Ok(None);
        }
        // Read a window and the next hop ahead, so the last window is known as such.
        while self.more && self.buf.len() < self.window + self.hop {
            self.more = decoder.read(&mut self.buf)?;
        }
        if self.buf.is_empty() {
            self.done = true;
            return Ok(None);
        }
        let valid = self.buf.len().min(self.window);
        let last = !self.more && self.buf.len() <= self.hop.max(valid);
        let mut samples = pool.get(self.window);
        samples[..valid].copy_from_slice(&self.buf[..valid]);
        samples[valid..].fill(0.0);
        let chunk = AudioChunk { samples, sample_rate: rate, start: self.consumed, valid, last };
        let step = self.hop.min(self.buf.len());
        self.buf.drain(..step);
        self.consumed += step as u64;
        self.done = last;
        Ok(Some(chunk))
    }
}

pub struct AudioSource {
    path: PathBuf,
    decoder: AudioDecoder,
    rate: u32,
    window: usize,
    hop: usize,
    pool: Pool<f32>,
    max_frames: Option<u64>,
    /// Lets a stop abort a read from a stalled network stream or a silent pipe.
    stop: super::StopCell,
}

impl AudioSource {
    /// Open the input now. `shutdown`: the run's stop, which aborts a wait for stdin's first data.
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &AudioSourceConfig,
        pool_size: usize,
        max_frames: Option<u64>,
        shutdown: Option<&Arc<Shutdown>>,
    ) -> Result<Built<Self>, Diagnostic> {
        let path = cfg.resolve_path(&c.uri)?;
        let rate = *c.sample_rate.get_ref();
        let window = *c.window.get_ref();
        if window == 0 || rate == 0 {
            return Err(cfg.diag(c.window.span(), "window and sample_rate must be positive"));
        }
        let stop = super::StopCell::armed(shutdown);
        let stdin = path.as_os_str() == "-";
        let mut opts = InputOptions {
            format: c.format.as_ref().map(|f| cfg.expand(f)).transpose()?,
            options: Vec::new(),
            interrupt: (stdin || crate::config::is_url(&path.to_string_lossy())).then(|| stop.interrupt()),
            ..Default::default()
        };
        if let Some(r) = &c.input_rate {
            opts.options.push(("sample_rate".into(), r.get_ref().to_string()));
        }
        if opts.format.is_some() && c.input_rate.is_some() {
            opts.options.push(("ch_layout".into(), format!("{}C", c.channels.as_ref().map_or(1, |n| *n.get_ref()))));
        }
        let decoder = match AudioDecoder::open_with(&path, rate, &opts) {
            Ok(d) => d,
            // Stopped while the input was being opened: not an error, the run stops.
            Err(FfmpegError::Stopped { path }) => return Ok(Built::StoppedAtOpen(StoppedAtOpen::new(path))),
            Err(e) => {
                return Err(cfg
                    .diag(c.uri.span(), format!("source `{}`: {e}", node.name))
                    .with_help("check the path and that FFmpeg can play it (ffprobe FILE)"));
            }
        };
        Ok(Built::Ready(AudioSource {
            path,
            decoder,
            rate,
            window,
            hop: c.hop.unwrap_or(window).max(1),
            pool: Pool::new(pool_size),
            max_frames,
            stop,
        }))
    }
}

impl Source for AudioSource {
    fn expected_frames(&self) -> Option<u64> {
        let n = self.decoder.duration.map(|d| (d * self.rate as f64 / self.hop as f64).ceil() as u64)?;
        Some(self.max_frames.map_or(n, |m| m.min(n)))
    }

    fn describe(&self) -> String {
        let shown = crate::backend::ffmpeg::shown_name(&self.path);
        format!("{} ({}; windows of {} samples every {})", shown, self.decoder.describe, self.window, self.hop)
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        self.stop.arm(ctx.shutdown());
        let mut windows = Windows::new(self.window, self.hop);
        let mut seq = 0u64;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) {
            let Some(chunk) = windows.next(&mut self.decoder, &self.pool, self.rate).map_err(|e| e.to_string())? else { break };
            let mut frame = ctx.new_frame(seq, Some(chunk.start as i64), (1, self.rate as i32), None);
            frame.audio = Some(Arc::new(chunk));
            seq += 1;
            if !ctx.emit(frame) {
                break;
            }
        }
        ctx.note_decode_errors(self.decoder.corrupt_packets);
        match &self.decoder.read_error {
            // A stop aborts the read on purpose.
            Some(_) if ctx.stopping() => Ok(()),
            // A network stream that stopped sending (or broke) did not end: say so.
            Some(e) if crate::config::is_url(&self.path.to_string_lossy()) => Err(format!(
                "{}: read error: {e} (the stream stopped; it is not reconnected)",
                crate::config::mask_credentials(&self.path.to_string_lossy())
            )),
            Some(e) => {
                tracing::warn!("{}: read error: {e}; treated as the end of the input", self.path.display());
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Build for AudioSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        AudioSource::build(cx.cfg, cx.node, self, cx.pool_size, cx.max_frames(), cx.opts.shutdown.as_ref()).map(|s| Body::Source(s.boxed()))
    }
}
