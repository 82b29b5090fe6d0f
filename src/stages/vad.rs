//! `kind = "vad"`: Silero VAD, streaming. Each stream keeps its own recurrent
//! state and 64-sample context; probabilities go through hysteresis
//! (threshold / neg_threshold), minimum speech and silence durations and
//! padding into speech segments, reported when they open and close, and all
//! together on the stream's last window.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ort::value::{Tensor, TensorRef};

use crate::backend::ort::{ModelSession, OrtRuntime, SessionOptions, open_session};
use crate::config::{Diagnostic, PipelineConfig, VadConfig};
use crate::frame::{Frame, Payload, Spans, Speech, SpeechSegment};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};

/// Hysteresis over window probabilities, in samples.
#[derive(Debug, Clone)]
pub struct Segmenter {
    threshold: f32,
    neg_threshold: f32,
    min_speech: u64,
    min_silence: u64,
    pad: u64,
    rate: f64,
    /// Start of the open segment (before padding), and whether it was announced.
    open: Option<(u64, bool)>,
    /// Where speech last dropped below neg_threshold while the segment is open.
    quiet_since: Option<u64>,
    pub segments: Vec<SpeechSegment>,
}

impl Segmenter {
    pub fn new(c: &VadConfig, rate: u32) -> Self {
        let neg = c.neg_threshold.unwrap_or((c.threshold - 0.15).max(0.01));
        Self::with_ms(c.threshold, neg, c.min_speech_ms, c.min_silence_ms, c.speech_pad_ms, rate)
    }

    /// Thresholds on the probability, durations in ms, at `rate` samples per second.
    pub fn with_ms(threshold: f32, neg_threshold: f32, min_speech_ms: u32, min_silence_ms: u32, pad_ms: u32, rate: u32) -> Self {
        let ms = |v: u32| v as u64 * rate as u64 / 1000;
        Segmenter {
            threshold,
            neg_threshold,
            min_speech: ms(min_speech_ms),
            min_silence: ms(min_silence_ms),
            pad: ms(pad_ms),
            rate: rate as f64,
            open: None,
            quiet_since: None,
            segments: Vec::new(),
        }
    }

    fn secs(&self, s: u64) -> f64 {
        (s as f64 / self.rate * 1000.0).round() / 1000.0
    }

    /// Feed the probability of the window `[start, end)`; returns segments that
    /// opened (announced once they last `min_speech`) and that closed.
    pub fn push(&mut self, p: f32, start: u64, end: u64) -> (Vec<SpeechSegment>, Vec<SpeechSegment>) {
        let (mut opened, mut closed) = (Vec::new(), Vec::new());
        if p >= self.threshold {
            self.quiet_since = None;
            if self.open.is_none() {
                self.open = Some((start, false));
            }
        } else if p < self.neg_threshold
            && let Some((s, announced)) = self.open
        {
            let q = *self.quiet_since.get_or_insert(start);
            if end - q >= self.min_silence {
                if let Some(seg) = self.close(s, q, announced) {
                    closed.push(seg);
                }
                self.open = None;
                self.quiet_since = None;
            }
        }
        if let Some((s, false)) = self.open
            && end - s >= self.min_speech
            && self.quiet_since.is_none()
        {
            self.open = Some((s, true));
            opened.push(SpeechSegment { start: self.secs(s.saturating_sub(self.pad)), end: None });
        }
        (opened, closed)
    }

    fn close(&mut self, s: u64, e: u64, announced: bool) -> Option<SpeechSegment> {
        if !announced && e - s < self.min_speech {
            return None;
        }
        let seg = SpeechSegment { start: self.secs(s.saturating_sub(self.pad)), end: Some(self.secs(e + self.pad)) };
        self.segments.push(seg.clone());
        Some(seg)
    }

    /// End of stream at sample `end`: close what is open.
    pub fn finish(&mut self, end: u64) -> Option<SpeechSegment> {
        let (s, announced) = self.open.take()?;
        let e = self.quiet_since.take().unwrap_or(end);
        self.close(s, e, announced)
    }
}

struct StreamState {
    state: Vec<f32>,
    context: Vec<f32>,
    segmenter: Segmenter,
    audio_seconds: f64,
    busy: Duration,
}

pub struct Vad {
    name: Arc<str>,
    cfg: VadConfig,
    model: String,
    m: ModelSession,
    streams: HashMap<Arc<str>, StreamState>,
    input: Vec<f32>,
}

impl Vad {
    pub fn build(cfg: &PipelineConfig, name: Arc<str>, c: &VadConfig, rt: &OrtRuntime) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.model)?;
        let m =
            open_session(rt, &path, &SessionOptions::cpu_single()).map_err(|e| cfg.diag(c.model.span(), format!("stage `{name}`: {e}")))?;
        let names: Vec<&str> = m.inputs.iter().map(|i| i.name.as_str()).collect();
        if !(names.contains(&"input") && names.contains(&"state") && names.contains(&"sr")) {
            return Err(cfg.diag(
                c.model.span(),
                format!("stage `{name}`: not a Silero VAD model (inputs {names:?}; expected `input`, `state`, `sr`)"),
            ));
        }
        Ok(Vad { name, cfg: c.clone(), model: path.display().to_string(), m, streams: HashMap::new(), input: Vec::new() })
    }

    fn probability(&mut self, stream: &Arc<str>, window: &[f32], rate: u32) -> Result<f32, String> {
        let ctx_len = if rate == 8000 { 32 } else { 64 };
        let cfg = &self.cfg;
        let st = self.streams.entry(stream.clone()).or_insert_with(|| StreamState {
            state: vec![0.0; 2 * 128],
            context: vec![0.0; ctx_len],
            segmenter: Segmenter::new(cfg, rate),
            audio_seconds: 0.0,
            busy: Duration::ZERO,
        });
        self.input.clear();
        self.input.extend_from_slice(&st.context);
        self.input.extend_from_slice(window);
        let n = self.input.len();
        // Views, not copies: the model reads the window and the state where they are.
        let input = TensorRef::from_array_view(([1usize, n], &self.input[..])).map_err(|e| e.to_string())?;
        let state = TensorRef::from_array_view(([2usize, 1, 128], &st.state[..])).map_err(|e| e.to_string())?;
        let sr = Tensor::from_array(((), vec![rate as i64])).map_err(|e| e.to_string())?;
        let out = self.m.session.run(ort::inputs!["input" => input, "state" => state, "sr" => sr]).map_err(|e| e.to_string())?;
        let p = out["output"].try_extract_tensor::<f32>().map_err(|e| e.to_string())?.1.first().copied().unwrap_or(0.0);
        let new_state = out["stateN"].try_extract_tensor::<f32>().map_err(|e| e.to_string())?.1;
        let n_state = st.state.len();
        st.state.copy_from_slice(&new_state[..n_state]);
        st.context.copy_from_slice(&window[window.len() - ctx_len..]);
        Ok(p)
    }
}

impl Stage for Vad {
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "{} (Silero VAD, threshold {}, min speech {} ms, min silence {} ms, pad {} ms)",
            self.model, c.threshold, c.min_speech_ms, c.min_silence_ms, c.speech_pad_ms
        )
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let chunk = frame.audio.clone().ok_or_else(|| StageError::Frame("frame has no audio".into()))?;
        let t0 = Instant::now();
        let p = self.probability(&frame.stream, &chunk.samples, chunk.sample_rate).map_err(StageError::Frame)?;
        let st = self.streams.get_mut(&frame.stream).expect("created by probability()");
        let (start, end) = (chunk.start, chunk.start + chunk.valid as u64);
        let (started, mut ended) = st.segmenter.push(p, start, end);
        st.audio_seconds += chunk.valid as f64 / chunk.sample_rate as f64;
        st.busy += t0.elapsed();
        let segments = if chunk.last {
            ended.extend(st.segmenter.finish(end));
            tracing::info!(
                "stage `{}`: stream `{}`: {} speech segment(s) in {:.1} s of audio; real-time factor {:.4} ({:.3} s of model time)",
                self.name,
                frame.stream,
                st.segmenter.segments.len(),
                st.audio_seconds,
                st.busy.as_secs_f64() / st.audio_seconds.max(1e-9),
                st.busy.as_secs_f64()
            );
            // The stream is over (a batch may have thousands): its state goes.
            self.streams.remove(&frame.stream).map(|st| st.segmenter.segments)
        } else {
            None
        };
        frame.attach(&self.name, Payload::Speech(Speech { probability: p, spans: Spans { started, ended, segments } }));
        Ok(())
    }
}

impl Build for VadConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Vad::build(cx.cfg, cx.name.clone(), self, cx.ort()?).map(|s| Body::Stage(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> VadConfig {
        toml::from_str("model = \"m\"\nmin_speech_ms = 64\nmin_silence_ms = 64\nspeech_pad_ms = 0").unwrap()
    }

    /// Probabilities per 512-sample window at 16 kHz (32 ms each).
    fn run(probs: &[f32]) -> Segmenter {
        let mut s = Segmenter::new(&cfg(), 16000);
        for (i, &p) in probs.iter().enumerate() {
            s.push(p, i as u64 * 512, (i as u64 + 1) * 512);
        }
        s.finish(probs.len() as u64 * 512);
        s
    }

    #[test]
    fn hysteresis_and_minimum_durations() {
        // speech 0.096-0.288 s; a one-window dip (32 ms < 64 ms) does not split it; 0.4 is between thresholds.
        let s = run(&[0.1, 0.1, 0.1, 0.9, 0.9, 0.1, 0.4, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1]);
        assert_eq!(s.segments, vec![SpeechSegment { start: 0.096, end: Some(0.288) }]);
    }

    #[test]
    fn short_blips_are_ignored_and_open_speech_closes_at_the_end() {
        let s = run(&[0.9, 0.1, 0.1, 0.1, 0.1, 0.9, 0.9, 0.9]);
        assert_eq!(s.segments, vec![SpeechSegment { start: 0.16, end: Some(0.256) }]);
    }

    #[test]
    fn start_is_announced_once_speech_lasts() {
        let mut s = Segmenter::new(&cfg(), 16000);
        assert!(s.push(0.9, 0, 512).0.is_empty(), "32 ms is not yet 64 ms");
        assert_eq!(s.push(0.9, 512, 1024).0, vec![SpeechSegment { start: 0.0, end: None }]);
        assert!(s.push(0.9, 1024, 1536).0.is_empty(), "announced once");
    }
}
