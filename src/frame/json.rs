//! A frame as one JSON object (docs/messages.md): the line the `ndjson`,
//! `kafka` and `mqtt` sinks write, the live results publish and a request's
//! reply carries.

use serde_json::Value;

use super::Frame;

/// The JSON object written for one frame (docs/messages.md), serialised
/// straight to text: what the `ndjson`, `kafka` and `mqtt` sinks write and
/// the live results publish; [`frame_json`] is the same as a value. The bus
/// sinks add the run's id ([`FrameLine::in_run`]): `"run"` after `"schema"`.
pub struct FrameLine<'a> {
    frame: &'a Frame,
    run: Option<&'a str>,
    /// Each stage's results, by stage (a later result of the same stage replaces the earlier, in its place).
    results: Vec<(&'a str, Value)>,
}

impl<'a> FrameLine<'a> {
    pub fn of(frame: &'a Frame) -> Self {
        let mut results: Vec<(&'a str, Value)> = Vec::with_capacity(frame.results.len());
        for a in &frame.results {
            if let Some(v) = a.payload.to_json() {
                match results.iter_mut().find(|(n, _)| *n == &*a.node) {
                    Some(slot) => slot.1 = v,
                    None => results.push((&a.node, v)),
                }
            }
        }
        FrameLine { frame, run: None, results }
    }

    /// The same object with `"run": run` (a message's identity across runs is `run`, `stream`, `seq`).
    pub fn in_run(mut self, run: &'a str) -> Self {
        self.run = Some(run);
        self
    }
}

impl serde::Serialize for FrameLine<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Results<'b>(&'b [(&'b str, Value)]);
        impl serde::Serialize for Results<'_> {
            fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                ser.collect_map(self.0.iter().map(|(k, v)| (*k, v)))
            }
        }
        let f = self.frame;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("schema", &crate::frame::event::SCHEMA_VERSION)?;
        if let Some(run) = self.run {
            m.serialize_entry("run", run)?;
        }
        m.serialize_entry("stream", &*f.stream)?;
        m.serialize_entry("seq", &f.seq)?;
        m.serialize_entry("pts", &f.pts_seconds())?;
        if let Some(img) = &f.image {
            m.serialize_entry("width", &img.width)?;
            m.serialize_entry("height", &img.height)?;
        }
        m.serialize_entry("results", &Results(&self.results))?;
        m.end()
    }
}

// Serialising cannot fail: string keys and JSON values only.

/// The JSON object written for one frame, as a value.
pub fn frame_json(frame: &Frame) -> Value {
    serde_json::to_value(FrameLine::of(frame)).unwrap_or_default()
}

/// The JSON object written for one frame, as one line of text.
pub fn frame_json_string(frame: &Frame) -> String {
    serde_json::to_string(&FrameLine::of(frame)).unwrap_or_default()
}
