//! `kind = "audio_testsrc"`: synthetic audio. Tone bursts over quiet noise,
//! cut into the same exactly-timed windows as the `audio` source, so audio
//! stages (VAD, levels) can be benchmarked and demonstrated without media.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{AudioTestSrcConfig, Diagnostic};
use crate::frame::{AudioChunk, Pool};
use crate::runtime::SourceCtx;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Source};

pub struct AudioTestSrc {
    c: AudioTestSrcConfig,
    rate: u32,
    window: usize,
    hop: usize,
    pool: Pool<f32>,
    max_frames: Option<u64>,
    /// Samples in all (`None`: endless).
    total: Option<u64>,
    /// Noise generator state (xorshift32), fixed seed: runs are identical.
    noise: u32,
}

impl AudioTestSrc {
    pub fn new(c: &AudioTestSrcConfig, pool_size: usize, max_frames: Option<u64>) -> Self {
        let rate = *c.sample_rate.get_ref();
        let window = (*c.window.get_ref()).max(1);
        AudioTestSrc {
            rate,
            window,
            hop: c.hop.unwrap_or(window).max(1),
            pool: Pool::new(pool_size),
            max_frames,
            total: c.duration.map(|d| (d.max(0.0) * rate as f64).round() as u64),
            noise: 0x9e37_79b9,
            c: c.clone(),
        }
    }

    /// Sample `n` (from the start): the tone inside a burst, quiet noise (about -60 dBFS) between.
    fn sample(&mut self, n: u64) -> f32 {
        self.noise ^= self.noise << 13;
        self.noise ^= self.noise >> 17;
        self.noise ^= self.noise << 5;
        let noise = (self.noise as f32 / u32::MAX as f32 - 0.5) * 0.002;
        let period = (self.c.tone_ms + self.c.gap_ms) * self.rate as u64 / 1000;
        let tone = self.c.tone_ms * self.rate as u64 / 1000;
        let on = self.c.gap_ms == 0 || period == 0 || n % period < tone;
        if on {
            let t = n as f64 / self.rate as f64;
            (self.c.amplitude as f64 * (2.0 * std::f64::consts::PI * self.c.frequency * t).sin()) as f32 + noise
        } else {
            noise
        }
    }
}

impl Source for AudioTestSrc {
    fn expected_frames(&self) -> Option<u64> {
        let windows = self.total.map(|t| t.saturating_sub(1) / self.hop as u64 + 1);
        match (windows, self.max_frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn is_live(&self) -> bool {
        self.c.realtime
    }

    fn describe(&self) -> String {
        format!(
            "{} Hz tone {} ms on / {} ms off at {} Hz, windows of {} every {}{}",
            self.c.frequency,
            self.c.tone_ms,
            self.c.gap_ms,
            self.rate,
            self.window,
            self.hop,
            self.c.duration.map(|d| format!(", {d} s")).unwrap_or_else(|| ", endless".into())
        )
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let t0 = Instant::now();
        let mut start = 0u64;
        let mut seq = 0u64;
        while !ctx.stopping() && self.max_frames.is_none_or(|m| seq < m) && self.total.is_none_or(|t| start < t) {
            let valid = self.total.map_or(self.window, |t| ((t - start) as usize).min(self.window));
            let last = self.total.is_some_and(|t| start + self.hop as u64 >= t);
            let mut samples = self.pool.get(self.window);
            for (i, s) in samples.iter_mut().enumerate() {
                *s = if i < valid { self.sample(start + i as u64) } else { 0.0 };
            }
            if self.c.realtime {
                let due = t0 + Duration::from_secs_f64(start as f64 / self.rate as f64);
                while !ctx.stopping() && Instant::now() < due {
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(20)));
                }
            }
            let chunk = AudioChunk { samples, sample_rate: self.rate, start, valid, last };
            let mut frame = ctx.new_frame(seq, Some(start as i64), (1, self.rate as i32), None);
            frame.audio = Some(Arc::new(chunk));
            seq += 1;
            start += self.hop as u64;
            if !ctx.emit(frame) || last {
                break;
            }
        }
        Ok(())
    }
}

impl Build for AudioTestSrcConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Source(Box::new(AudioTestSrc::new(self, cx.pool_size, cx.max_frames()))))
    }
}
