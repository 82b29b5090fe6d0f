//! `kind = "audio_level"`: the RMS and peak level of each audio window in dBFS,
//! and the stretches where the RMS level stays at or above a threshold
//! (a beep, an alarm, a loud event), reported when they open and close and all
//! together on the stream's last window — the same events as `vad`, without a model.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{AudioLevelConfig, Diagnostic};
use crate::frame::{Frame, Level, Payload, Spans};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::vad::Segmenter;
use crate::stages::{Body, Stage, StageError};

/// Level in dBFS of an amplitude (1.0 = full scale), floored at -120.
pub fn dbfs(amplitude: f32) -> f32 {
    if amplitude <= 1e-6 { -120.0 } else { 20.0 * amplitude.log10() }
}

/// RMS and peak of `samples`, both in dBFS.
pub fn levels(samples: &[f32]) -> (f32, f32) {
    if samples.is_empty() {
        return (-120.0, -120.0);
    }
    let sum: f64 = samples.iter().map(|&s| s as f64 * s as f64).sum();
    let rms = (sum / samples.len() as f64).sqrt() as f32;
    let peak = samples.iter().fold(0f32, |m, &s| m.max(s.abs()));
    (dbfs(rms), dbfs(peak))
}

pub struct AudioLevel {
    name: Arc<str>,
    cfg: AudioLevelConfig,
    streams: HashMap<Arc<str>, Segmenter>,
}

impl AudioLevel {
    pub fn new(name: Arc<str>, cfg: AudioLevelConfig) -> Self {
        AudioLevel { name, cfg, streams: HashMap::new() }
    }
}

impl Stage for AudioLevel {
    fn describe(&self) -> String {
        format!(
            "RMS/peak dBFS per window; loud at ≥ {} dBFS (min duration {} ms, min silence {} ms)",
            self.cfg.threshold_db.get_ref(),
            self.cfg.min_duration_ms,
            self.cfg.min_silence_ms
        )
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let chunk = frame.audio.clone().ok_or_else(|| StageError::Frame("frame has no audio".into()))?;
        let (rms_db, peak_db) = levels(&chunk.samples[..chunk.valid]);
        let loud = rms_db >= *self.cfg.threshold_db.get_ref();
        // Loud/quiet decisions go through the VAD's segmenter as 1/0 "probabilities".
        let (min_ms, silence_ms, rate) = (self.cfg.min_duration_ms, self.cfg.min_silence_ms, chunk.sample_rate);
        let seg = self.streams.entry(frame.stream.clone()).or_insert_with(|| Segmenter::with_ms(0.5, 0.5, min_ms, silence_ms, 0, rate));
        let (start, end) = (chunk.start, chunk.start + chunk.valid as u64);
        let (started, mut ended) = seg.push(if loud { 1.0 } else { 0.0 }, start, end);
        let segments = if chunk.last {
            ended.extend(seg.finish(end));
            tracing::info!("stage `{}`: stream `{}`: {} loud segment(s)", self.name, frame.stream, seg.segments.len());
            // The stream is over (a batch may have thousands): its state goes.
            self.streams.remove(&frame.stream).map(|seg| seg.segments)
        } else {
            None
        };
        frame.attach(&self.name, Payload::Level(Level { rms_db, peak_db, loud, spans: Spans { started, ended, segments } }));
        Ok(())
    }
}

impl Build for AudioLevelConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Ok(Body::Stage(Box::new(AudioLevel::new(cx.name.clone(), self.clone()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_of_known_signals() {
        // A full-scale sine: RMS 1/√2 (-3.01 dBFS), peak 0 dBFS.
        let sine: Vec<f32> = (0..16000).map(|i| (i as f32 * 2.0 * std::f32::consts::PI * 1000.0 / 16000.0).sin()).collect();
        let (rms, peak) = levels(&sine);
        assert!((rms + 3.01).abs() < 0.01, "{rms}");
        assert!(peak.abs() < 0.01, "{peak}");
        let half: Vec<f32> = sine.iter().map(|s| s * 0.5).collect();
        assert!((levels(&half).0 + 9.03).abs() < 0.01);
        assert_eq!(levels(&[0.0; 512]), (-120.0, -120.0));
        assert_eq!(levels(&[]), (-120.0, -120.0));
    }
}
