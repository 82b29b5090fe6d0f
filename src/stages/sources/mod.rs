//! Sources: where frames come from.

pub mod audio;
pub mod audiotest;
mod batch;
pub mod detections;
pub mod dir;
pub mod file;
#[cfg(feature = "gstreamer")]
pub mod gst;
pub mod images;
#[cfg(feature = "bus")]
pub mod kafka;
pub mod request;
pub mod rtsp;
pub mod template;
pub mod testsrc;
pub mod uri_rules;

use std::sync::{Arc, OnceLock};

use crate::backend::ffmpeg::Interrupt;
use crate::runtime::Shutdown;

/// The pipeline's stop, for FFmpeg's waits on a network input or stdin opened
/// before the run starts: armed at build when the run's stop is known then
/// (else when the source runs), it lets a stop abort a read from a stalled
/// stream or a silent pipe (which would otherwise wait for ever).
#[derive(Clone, Default)]
pub struct StopCell(Arc<OnceLock<Arc<Shutdown>>>);

impl StopCell {
    /// The question FFmpeg asks while it waits: is the pipeline stopping?
    pub fn interrupt(&self) -> Interrupt {
        let cell = self.0.clone();
        Interrupt(Arc::new(move || cell.get().is_some_and(|s| s.stopping())))
    }

    /// From now on a stop of `shutdown` aborts the waits (the first one armed stays).
    pub fn arm(&self, shutdown: Arc<Shutdown>) {
        let _ = self.0.set(shutdown);
    }

    /// A cell armed with `shutdown` when there is one (the run's, at build).
    pub fn armed(shutdown: Option<&Arc<Shutdown>>) -> Self {
        let cell = StopCell::default();
        if let Some(s) = shutdown {
            cell.arm(s.clone());
        }
        cell
    }
}

/// What building a source that opens its input gives: the source, or, when
/// the run was stopped (Ctrl-C, SIGTERM) while the input was still being
/// opened (a pipe that has sent nothing yet, or too little to tell its
/// streams), a source that yields nothing, so the run stops at once as for
/// any stop, with its summary and exit code.
pub enum Built<S> {
    Ready(S),
    StoppedAtOpen(StoppedAtOpen),
}

impl<S: crate::stages::Source + 'static> Built<S> {
    pub fn boxed(self) -> Box<dyn crate::stages::Source> {
        match self {
            Built::Ready(s) => Box::new(s),
            Built::StoppedAtOpen(s) => Box::new(s),
        }
    }
}

/// A source whose input the pipeline stopped waiting for before its first frame.
pub struct StoppedAtOpen {
    /// The input as messages name it (`stdin`, a masked URL).
    input: String,
}

impl StoppedAtOpen {
    pub fn new(input: String) -> Self {
        tracing::info!("{input}: stopped while the input was being opened");
        StoppedAtOpen { input }
    }
}

impl crate::stages::Source for StoppedAtOpen {
    fn describe(&self) -> String {
        format!("{} (stopped while being opened, before its first frame)", self.input)
    }

    fn run(&mut self, _ctx: &mut crate::runtime::SourceCtx<'_>) -> Result<(), String> {
        Ok(())
    }
}

/// Audio windows a source cuts: (sample rate, window, hop) in samples.
pub type AudioWindows = (u32, usize, usize);

/// `media` with its audio keys: `None` for video (where the audio keys are a
/// located error), else the sample rate (default 16000 Hz), window (512) and
/// hop (the window), each positive.
pub fn audio_windows(
    cfg: &crate::config::PipelineConfig,
    node: &crate::config::NodeConfig,
    media: crate::config::MediaKind,
    sample_rate: Option<&toml::Spanned<u32>>,
    window: Option<&toml::Spanned<usize>>,
    hop: Option<&toml::Spanned<usize>>,
) -> Result<Option<AudioWindows>, crate::config::Diagnostic> {
    if media == crate::config::MediaKind::Video {
        return match [sample_rate.map(|v| v.span()), window.map(|v| v.span()), hop.map(|v| v.span())].into_iter().flatten().next() {
            Some(span) => Err(cfg
                .diag(span, format!("source `{}`: `sample_rate`, `window` and `hop` are for audio", node.name))
                .with_help("add media = \"audio\" to read the audio")),
            None => Ok(None),
        };
    }
    for (v, what) in [
        (sample_rate.map(|v| (*v.get_ref() as usize, v.span())), "sample_rate"),
        (window.map(|v| (*v.get_ref(), v.span())), "window"),
        (hop.map(|v| (*v.get_ref(), v.span())), "hop"),
    ] {
        if let Some((0, span)) = v {
            return Err(cfg.diag(span, format!("source `{}`: `{what}` must be positive", node.name)));
        }
    }
    let rate = sample_rate.map_or(16000, |v| *v.get_ref());
    let window = window.map_or(512, |v| *v.get_ref());
    Ok(Some((rate, window, hop.map_or(window, |v| *v.get_ref()))))
}
