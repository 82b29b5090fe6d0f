//! Stream events: what happened to a stream between frames (a camera lost, a
//! camera back), or to what a stage follows in it (a track ended, a track
//! crossed a line, entered or left a zone). They travel through the pipeline's queues in order with the
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
    /// A confirmed track ended: lost longer than the tracker's buffer, or
    /// still alive when the stream ended (`with_stream`).
    TrackEnded {
        track: TrackRef,
        /// Frame numbers (`seq`) of its first and last match.
        first_seq: u64,
        last_seq: u64,
        /// Frames it was matched in.
        hits: u64,
        /// From its first to its last match, by the frames' timestamps.
        duration_ms: Option<u64>,
        with_stream: bool,
    },
    /// A track's anchor crossed a counting line.
    Crossed { line: Arc<str>, track: TrackRef, direction: Direction, seq: u64 },
    /// A track's anchor entered a zone (or was first seen inside it).
    Entered { zone: Arc<str>, track: TrackRef, seq: u64 },
    /// A track's anchor left a zone, or its track ended inside it (`track_ended`).
    Left {
        zone: Arc<str>,
        track: TrackRef,
        seq: u64,
        /// Frames and milliseconds from entering to the last frame seen inside.
        dwell_frames: u64,
        dwell_ms: Option<u64>,
        track_ended: bool,
    },
    /// A `clips` sink closed a clip (docs/clips.md).
    Clip(Box<ClipInfo>),
    /// An event a `python` stage returned: its name (`event`), the stage, and
    /// the other fields as given.
    Custom { name: String, stage: Arc<str>, fields: serde_json::Map<String, Value> },
}

/// A clip a `clips` sink wrote: where, which span of the source's timeline
/// (seconds), how many frames, the events that made it, and the stretches
/// the stream was away within it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClipInfo {
    pub sink: Arc<str>,
    pub path: String,
    pub start_pts: f64,
    pub end_pts: f64,
    pub frames: u64,
    /// (event name, frame `seq`) of each trigger, in order.
    pub triggers: Vec<(String, u64)>,
    /// (from, to) in seconds of the source's timeline: the stream was lost in between.
    pub gaps: Vec<(f64, f64)>,
    /// The clip ended early: the pipeline stopped, or the stream ended.
    pub cut: bool,
}

impl Eq for ClipInfo {}

/// The track an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackRef {
    pub id: u64,
    pub class: u32,
    pub label: Option<Arc<str>>,
}

impl TrackRef {
    /// The class as counted and labelled: its name when known, else its number.
    pub fn class_name(&self) -> String {
        self.label.as_deref().map_or_else(|| self.class.to_string(), str::to_string)
    }
}

/// Which way a track crossed a line (see docs/analytics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    In,
    Out,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
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

    /// `lost`, `reconnected`, `track_ended`, `crossed`, `entered`, `left`, or
    /// the name a `python` stage gave.
    pub fn name(&self) -> &str {
        match &self.kind {
            EventKind::Lost { .. } => "lost",
            EventKind::Reconnected { .. } => "reconnected",
            EventKind::TrackEnded { .. } => "track_ended",
            EventKind::Crossed { .. } => "crossed",
            EventKind::Entered { .. } => "entered",
            EventKind::Left { .. } => "left",
            EventKind::Clip(_) => "clip",
            EventKind::Custom { name, .. } => name,
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
            EventKind::TrackEnded { track, first_seq, last_seq, hits, duration_ms, with_stream } => {
                put_track(&mut v, track);
                v["first_seq"] = json!(first_seq);
                v["last_seq"] = json!(last_seq);
                v["hits"] = json!(hits);
                if let Some(d) = duration_ms {
                    v["duration_ms"] = json!(d);
                }
                v["with_stream"] = json!(with_stream);
            }
            EventKind::Crossed { line, track, direction, seq } => {
                v["line"] = json!(&**line);
                v["direction"] = json!(direction.name());
                put_track(&mut v, track);
                v["seq"] = json!(seq);
            }
            EventKind::Entered { zone, track, seq } => {
                v["zone"] = json!(&**zone);
                put_track(&mut v, track);
                v["seq"] = json!(seq);
            }
            EventKind::Left { zone, track, seq, dwell_frames, dwell_ms, track_ended } => {
                v["zone"] = json!(&**zone);
                put_track(&mut v, track);
                v["seq"] = json!(seq);
                v["dwell_frames"] = json!(dwell_frames);
                if let Some(d) = dwell_ms {
                    v["dwell_ms"] = json!(d);
                }
                v["track_ended"] = json!(track_ended);
            }
            EventKind::Clip(c) => {
                v["sink"] = json!(&*c.sink);
                v["path"] = json!(c.path);
                v["start_pts"] = json!(c.start_pts);
                v["end_pts"] = json!(c.end_pts);
                v["frames"] = json!(c.frames);
                v["triggers"] = c.triggers.iter().map(|(e, s)| json!({"event": e, "seq": s})).collect();
                v["gaps"] = c.gaps.iter().map(|(a, b)| json!({"from": a, "to": b})).collect();
                v["cut"] = json!(c.cut);
            }
            EventKind::Custom { stage, fields, .. } => {
                v["stage"] = json!(&**stage);
                for (k, x) in fields {
                    v[k.as_str()] = x.clone();
                }
            }
        }
        v["at_ms"] = json!(self.at_ms);
        v
    }
}

fn put_track(v: &mut Value, t: &TrackRef) {
    v["track_id"] = json!(t.id);
    v["class"] = json!(t.class);
    if let Some(l) = &t.label {
        v["label"] = json!(&**l);
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
        let track = TrackRef { id: 3, class: 0, label: Some(Arc::from("person")) };
        let crossed = Event {
            stream: Arc::from("cam"),
            at_ms: 1,
            kind: EventKind::Crossed { line: Arc::from("door"), track: track.clone(), direction: Direction::Out, seq: 7 },
        };
        assert_eq!(
            crossed.to_json().to_string(),
            r#"{"schema":1,"stream":"cam","event":"crossed","line":"door","direction":"out","track_id":3,"class":0,"label":"person","seq":7,"at_ms":1}"#
        );
        let left = Event {
            stream: Arc::from("cam"),
            at_ms: 2,
            kind: EventKind::Left { zone: Arc::from("desk"), track, seq: 9, dwell_frames: 4, dwell_ms: Some(160), track_ended: false },
        };
        assert_eq!(
            left.to_json().to_string(),
            r#"{"schema":1,"stream":"cam","event":"left","zone":"desk","track_id":3,"class":0,"label":"person","seq":9,"dwell_frames":4,"dwell_ms":160,"track_ended":false,"at_ms":2}"#
        );
    }
}
