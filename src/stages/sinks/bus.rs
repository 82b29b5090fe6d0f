//! The sink that `kind = "kafka"` and `kind = "mqtt"` share: one message per
//! frame (the ndjson sink's JSON, with the run's id) and per stream event,
//! keyed by stream, handed to an [`Outbox`] over the client's [`Transport`]
//! (which keeps each message until acknowledged, spools what does not fit in
//! memory and what is left at exit, and counts deliveries). The clients and
//! their settings are in `kafka.rs` and `mqtt.rs`.

use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::bus::{Delivery, Limits, Message, Note, Outbox, RunId, Transport};
use crate::config::{Diagnostic, NodeConfig, PipelineConfig};
use crate::frame::{Event, Frame};
use crate::stages::{Sink, StageError};

/// Where a stream's messages go.
pub enum Topics {
    /// One topic for frames and events, `{stream}` replaced by the stream's file name (Kafka).
    Template(String),
    /// `{prefix}/{stream}/results` for frames, `{prefix}/{stream}/events` for events (MQTT).
    Prefix(String),
}

impl Topics {
    fn of(&self, stream: &str, event: bool) -> String {
        let stream = super::stream_file_name(stream);
        match self {
            Topics::Template(t) => t.replace("{stream}", &stream),
            Topics::Prefix(p) => format!("{p}/{stream}/{}", if event { "events" } else { "results" }),
        }
    }
}

/// A message-bus sink over the transport `T`.
pub struct BusSink<T: Transport> {
    name: String,
    /// What `describe` says before the spool and the run (the broker, the topics, masked).
    target: String,
    topics: Topics,
    only_with_results: bool,
    outbox: Outbox<T>,
    run: RunId,
    body: Vec<u8>,
}

/// Open the outbox of sink `node` over `transport` (its notes on `notes`),
/// spooling in `spool_dir` (or the default folder): a spool that cannot be
/// opened is a diagnostic at `spool_dir` (or the node's kind).
pub fn open_outbox<T: Transport>(
    cfg: &PipelineConfig,
    node: &NodeConfig,
    transport: T,
    notes: Receiver<Note>,
    spool_dir: Option<&toml::Spanned<String>>,
    limits: Limits,
) -> Result<Outbox<T>, Diagnostic> {
    let spool = crate::bus::spool_path(cfg, &node.name, spool_dir)?;
    Outbox::open(&node.name, transport, notes, &spool, limits, Arc::new(Delivery::default()))
        .map_err(|e| cfg.diag(spool_dir.map_or(node.kind_span.clone(), |d| d.span()), format!("sink `{}`: {e}", node.name)))
}

impl<T: Transport> BusSink<T> {
    pub fn new(node: &NodeConfig, outbox: Outbox<T>, run: &RunId, target: String, topics: Topics, only_with_results: bool) -> Self {
        BusSink { name: node.name.clone(), target, topics, only_with_results, outbox, run: run.clone(), body: Vec::with_capacity(4096) }
    }

    fn send(&mut self, stream: &str, event: bool, id: String) -> Result<(), String> {
        let msg = Message { topic: self.topics.of(stream, event), key: stream.to_string(), body: self.body.clone(), id };
        self.outbox.push(msg)
    }
}

/// Whether a stage attached something to `frame`: a result that is not
/// empty (no boxes, no text, no objects).
pub fn has_results(frame: &Frame) -> bool {
    fn something(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Null => false,
            serde_json::Value::Array(a) => !a.is_empty(),
            serde_json::Value::Object(o) => o.values().any(something),
            _ => true,
        }
    }
    frame.results.iter().any(|a| a.payload.to_json().is_some_and(|v| something(&v)))
}

/// The body (into `body`) and id of a frame's message: the frame JSON with `"run"`.
pub fn frame_message(run: &RunId, frame: &Frame, body: &mut Vec<u8>) -> Result<String, serde_json::Error> {
    body.clear();
    serde_json::to_writer(&mut *body, &crate::frame::json::FrameLine::of(frame).in_run(run.as_str()))?;
    Ok(crate::bus::identity::frame_id(run, &frame.stream, frame.seq))
}

/// The body (into `body`) and id of a stream event's message: the event JSON with `"run"` after `"schema"`.
pub fn event_message(run: &RunId, event: &Event, body: &mut Vec<u8>) -> Result<String, serde_json::Error> {
    let mut v = event.to_json();
    if let serde_json::Value::Object(m) = &mut v {
        m.shift_insert(1, "run".into(), run.as_str().into());
    }
    body.clear();
    serde_json::to_writer(&mut *body, &v)?;
    Ok(crate::bus::identity::event_id(run, &event.stream, event.name(), event.at_ms))
}

impl<T: Transport> Sink for BusSink<T> {
    fn describe(&self) -> String {
        format!("{} (spool {}, run {})", self.target, crate::config::tidy_path(self.outbox.spool_path()).display(), self.run)
    }

    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        if self.only_with_results && !has_results(frame) {
            return Ok(());
        }
        let id = frame_message(&self.run, frame, &mut self.body).map_err(|e| StageError::Frame(e.to_string()))?;
        self.send(&frame.stream, false, id).map_err(StageError::Fatal)
    }

    fn event(&mut self, event: &Event) -> Result<(), String> {
        let id = event_message(&self.run, event, &mut self.body).map_err(|e| e.to_string())?;
        self.send(&event.stream, true, id)
    }

    /// Ok once every message of `stream` has been acknowledged (by the Kafka
    /// broker; by its PUBACK at MQTT QoS 1).
    fn end_stream(&mut self, stream: &str) -> Result<(), String> {
        self.outbox.flush(Some(stream))
    }

    fn finish(&mut self) -> Result<(), String> {
        let left = self.outbox.close()?;
        tracing::debug!("sink `{}`: {left} message(s) left in the spool", self.name);
        Ok(())
    }

    fn delivery(&self) -> Option<Arc<Delivery>> {
        Some(self.outbox.stats().clone())
    }
}
