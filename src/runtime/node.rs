//! The contract between the runtime and the nodes it drives: the
//! [`Source`], [`Stage`] and [`Sink`] traits, how a stage fails
//! ([`StageError`]), a built node ([`Body`]), and a source template's way to
//! the API ([`Template`], the [`Command`]s it receives and the [`Prepared`]
//! source of an added stream). Stages implement it; the registry in
//! `stages` builds bodies; nothing here knows a kind of node.

use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender, unbounded};
use serde_json::{Map, Value};

use super::SourceCtx;
use super::slot::StreamSlot;
use crate::frame::{Event, Frame};

/// How a stage failed on one frame.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// This frame failed; the next one may succeed (handled by `on_error`).
    #[error("{0}")]
    Frame(String),
    /// The stage cannot go on (always stops the pipeline).
    #[error("{0}")]
    Fatal(String),
    /// The stage keeps this frame from the nodes after it on purpose (a
    /// `redact` stage's `on_miss = "drop"`): counted as dropped, whatever `on_error` says.
    #[error("{0}")]
    Withheld(String),
}

/// Produces frames until its input ends or the pipeline stops.
pub trait Source: Send {
    /// Frames expected in total, when known (progress bar, ETA).
    fn expected_frames(&self) -> Option<u64> {
        None
    }
    /// A live source (camera) defaults its queues to `drop_oldest`.
    fn is_live(&self) -> bool {
        false
    }
    /// Whether `/readyz` waits for this source's stream while it is lost.
    fn required(&self) -> bool {
        true
    }
    /// One line for the start-up log.
    fn describe(&self) -> String;
    /// How this source decodes, for the summary (video files).
    fn decode(&self) -> Option<String> {
        None
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String>;
    /// Done for good (its `max_frames` reached): not started again.
    fn exhausted(&self) -> bool {
        false
    }
    /// Get ready to run again from the start of the input (`restart`):
    /// reopen it. Frame numbers go on from where they were.
    fn reopen(&mut self) -> Result<(), String> {
        Err("this kind of source cannot start again".into())
    }
    /// A request source: the handle a service submits pictures through (the
    /// runtime answers them from the sinks).
    fn request_hub(&self) -> Option<super::request::RequestHub> {
        None
    }
    /// A template of streams added at run time (`dynamic = true`): how to add them.
    fn template(&self) -> Option<Arc<Template>> {
        None
    }
}

/// One frame in, the same frame out with a result attached.
pub trait Stage: Send {
    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError>;
    fn describe(&self) -> String;
    /// `(max frames, longest wait for the oldest)` when this stage takes frames in batches.
    fn batching(&self) -> Option<(usize, std::time::Duration)> {
        None
    }
    /// Process a batch (default: one frame at a time). One result per frame, in order.
    fn process_batch(&mut self, frames: &mut [Frame]) -> Vec<Result<(), StageError>> {
        frames.iter_mut().map(|f| self.process(f)).collect()
    }
    /// The execution provider in use, with any fallback, for the summary.
    fn provider(&self) -> Option<String> {
        None
    }
    /// The input has ended (every stream of it): events still due, sent
    /// after the last frame (tracks still alive end with the stream).
    fn finish(&mut self) -> Vec<Event> {
        Vec::new()
    }
}

/// Consumes frames; `finish` flushes and closes.
pub trait Sink: Send {
    fn write(&mut self, frame: &Frame) -> Result<(), StageError>;
    /// A stream event (camera lost, reconnected), in order with the frames. Default: ignored.
    fn event(&mut self, _event: &Event) -> Result<(), String> {
        Ok(())
    }
    fn finish(&mut self) -> Result<(), String>;
    fn describe(&self) -> String;
    /// A stream has ended and every frame of it has been written here: flush
    /// and close what belongs to it alone (per-stream files, open cues).
    fn end_stream(&mut self, _stream: &str) -> Result<(), String> {
        Ok(())
    }
    /// Outputs to servers, after `finish`: times a server went away, times it
    /// came back, and frames not delivered meanwhile. Default: none.
    fn output_losses(&self) -> OutputLosses {
        OutputLosses::default()
    }
    /// `clips` sinks: the hub they share with the sources' packet rings.
    fn clip_hub(&self) -> Option<Arc<super::clips::ClipHub>> {
        None
    }
    /// Message-bus sinks: their live delivery counters (summary, report, `/metrics`).
    fn delivery(&self) -> Option<Arc<crate::bus::Delivery>> {
        None
    }
}

/// What a sink's server outputs lost during a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputLosses {
    pub lost: u64,
    pub reconnects: u64,
    pub undelivered: u64,
}

/// A built node body.
pub enum Body {
    Source(Box<dyn Source>),
    Stage(Box<dyn Stage>),
    Sink(Box<dyn Sink>),
}

/// Makes the source of one added stream: checked when the stream is asked
/// for, built (and connected) on the stream's own thread.
pub struct Prepared {
    /// The input as shown (credentials masked).
    pub shown: String,
    /// Whether readiness waits for this stream while it is down.
    pub required: bool,
    /// Build the source (may take a while: an RTSP camera is connected here).
    pub build: Box<dyn FnOnce() -> Result<Box<dyn Source>, String> + Send>,
}

/// Checks an added stream's settings (`id`, then the keys the template
/// allows) and prepares its source; `Err` says what to fix.
pub type Prepare = Box<dyn Fn(&str, &Map<String, Value>) -> Result<Prepared, String> + Send + Sync>;

/// What the API asks of a template's node.
pub(crate) enum Command {
    Start(Arc<StreamSlot>, Prepared),
}

/// A source template: its name, the keys added streams may set, and the way
/// to its node.
pub struct Template {
    pub source: String,
    pub kind: &'static str,
    pub allow: Vec<String>,
    /// The most streams of this template listed at once (`max_streams`; `None`: only the pipeline's limit).
    pub max_streams: Option<usize>,
    pub(crate) prepare: Prepare,
    tx: Sender<Command>,
    pub(crate) rx: Mutex<Option<Receiver<Command>>>,
}

impl Template {
    pub fn new(source: String, kind: &'static str, allow: Vec<String>, max_streams: Option<usize>, prepare: Prepare) -> Arc<Self> {
        let (tx, rx) = unbounded();
        Arc::new(Template { source, kind, allow, max_streams, prepare, tx, rx: Mutex::new(Some(rx)) })
    }

    pub(crate) fn send(&self, c: Command) -> bool {
        self.tx.send(c).is_ok()
    }
}
