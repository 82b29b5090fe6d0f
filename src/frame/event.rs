//! Stream events: what happened to a stream between frames (a camera lost, a
//! camera back). They travel through the pipeline's queues in order with the
//! frames, through every stage untouched, to the sinks. They are not frames:
//! they carry no accounting ticket, so decoded = processed + dropped + failed
//! holds whatever events flow, and queues never drop them.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The stream stopped delivering frames (end of stream, read error, watchdog).
    Lost { reason: String },
    /// Frames flow again after a loss.
    Reconnected {
        /// From the loss to the reconnection.
        gap_ms: u64,
        /// Connection attempts it took.
        attempts: u32,
    },
}

/// One event of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The source node's name (as in frames' `stream`).
    pub stream: Arc<str>,
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub kind: EventKind,
}

/// Version of the frame and event JSON (docs/messages.schema.json): the
/// `schema` field of every object the ndjson, Kafka and MQTT sinks write.
pub const SCHEMA_VERSION: u64 = 1;

/// Milliseconds since the Unix epoch, now.
pub fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Event {
    pub fn new(stream: Arc<str>, kind: EventKind) -> Self {
        Event { stream, at_ms: wall_ms(), kind }
    }

    /// `lost` or `reconnected`.
    pub fn name(&self) -> &'static str {
        match self.kind {
            EventKind::Lost { .. } => "lost",
            EventKind::Reconnected { .. } => "reconnected",
        }
    }

    /// The JSON object sinks write: `{"schema", "stream", "event", ..., "at_ms"}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "schema": SCHEMA_VERSION, "stream": &*self.stream, "event": self.name() });
        match &self.kind {
            EventKind::Lost { reason } => v["reason"] = json!(reason),
            EventKind::Reconnected { gap_ms, attempts } => {
                v["gap_ms"] = json!(gap_ms);
                v["attempts"] = json!(attempts);
            }
        }
        v["at_ms"] = json!(self.at_ms);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines() {
        let lost = Event { stream: Arc::from("cam"), at_ms: 5, kind: EventKind::Lost { reason: "end of stream".into() } };
        assert_eq!(lost.to_json().to_string(), r#"{"schema":1,"stream":"cam","event":"lost","reason":"end of stream","at_ms":5}"#);
        let back = Event { stream: Arc::from("cam"), at_ms: 9, kind: EventKind::Reconnected { gap_ms: 4, attempts: 2 } };
        assert_eq!(back.to_json().to_string(), r#"{"schema":1,"stream":"cam","event":"reconnected","gap_ms":4,"attempts":2,"at_ms":9}"#);
    }
}
