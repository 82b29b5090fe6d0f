//! What `process(frame)` returned, applied to the frame: the dict becomes the
//! stage's result (its `detections`, in the detection schema, usable by
//! track, analytics and the overlay as a detection stage's boxes), its
//! `events` follow the frame in order, `"drop": true` takes the frame out.
//! Everything is checked before anything is applied: a wrong return value
//! fails the frame with a message saying what to fix.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::frame::{CustomResult, Event, EventKind, Frame, Object, Payload};

/// Keys an event may not set: the pipeline writes them.
const RESERVED: &[&str] = &["schema", "run", "stream", "stage", "at_ms"];
/// Names of the pipeline's own events (docs/messages.schema.json), not for a python stage's.
const BUILT_IN: &[&str] = &["lost", "reconnected", "track_ended", "crossed", "entered", "left", "clip"];

/// Apply the JSON text of a returned dict to `frame` as stage `stage`'s result.
pub fn apply(stage: &Arc<str>, frame: &mut Frame, text: &str) -> Result<(), String> {
    let mut m = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err("process() must return a dict or None".into()),
        Err(e) => return Err(format!("the returned dict is not JSON: {e}")),
    };
    let drop = match m.shift_remove("drop") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(v) => return Err(format!("\"drop\" must be true or false, got {v}")),
    };
    let events = match m.shift_remove("events") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.into_iter().enumerate().map(|(i, e)| event(stage, frame.seq, i, e)).collect::<Result<Vec<_>, _>>()?,
        Some(v) => return Err(format!("\"events\" must be a list of dicts, got {v}")),
    };
    let objects = match m.get("detections") {
        Some(v) => Some(detections(v)?),
        None => None,
    };
    frame.events.extend(events.into_iter().map(|k| Event::new(frame.stream.clone(), k)));
    if !m.is_empty() {
        frame.attach(stage, Payload::Custom(CustomResult { json: m, objects }));
    }
    frame.filtered = drop;
    Ok(())
}

/// One returned event: a dict with a string `event` (its name); `seq` is the frame's unless given.
fn event(stage: &Arc<str>, seq: u64, i: usize, e: Value) -> Result<EventKind, String> {
    let Value::Object(mut e) = e else { return Err(format!("events[{i}] must be a dict, got {e}")) };
    let name = match e.shift_remove("event") {
        Some(Value::String(s)) if !s.is_empty() => s,
        _ => return Err(format!("events[{i}] needs \"event\": its name, a non-empty string (e.g. {{\"event\": \"loitering\", ...}})")),
    };
    if BUILT_IN.contains(&name.as_str()) {
        return Err(format!("events[{i}]: \"{name}\" is the name of a built-in event; give yours another (e.g. \"{name}_rule\")"));
    }
    if let Some(k) = RESERVED.iter().find(|k| e.contains_key(**k)) {
        return Err(format!("events[{i}] sets \"{k}\", which the pipeline writes (reserved: {})", RESERVED.join(", ")));
    }
    let mut fields = Map::new();
    if !e.contains_key("seq") {
        fields.insert("seq".into(), Value::from(seq));
    }
    fields.extend(e);
    Ok(EventKind::Custom { name, stage: stage.clone(), fields })
}

/// `detections` in the detection schema (docs/messages.md): a list of
/// `{"bbox": [x0, y0, x1, y1], "score": s, "class": c, "label": "..."}` in
/// source pixels, optionally with `"keypoints": [[x, y], ...]`.
fn detections(v: &Value) -> Result<Vec<Object>, String> {
    let Value::Array(items) = v else { return Err(format!("\"detections\" must be a list of boxes, got {v}")) };
    let schema = "each box is {\"bbox\": [x0, y0, x1, y1], \"score\": 0.9, \"class\": 0} in source pixels, \"label\" optional";
    items
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let bad = |what: &str| format!("detections[{i}]: {what} ({schema})");
            let bbox = d.get("bbox").and_then(Value::as_array).filter(|b| b.len() == 4).ok_or_else(|| bad("\"bbox\" must be 4 numbers"))?;
            let mut xy = [0f32; 4];
            for (x, v) in xy.iter_mut().zip(bbox) {
                *x = v.as_f64().ok_or_else(|| bad("\"bbox\" must be 4 numbers"))? as f32;
            }
            let score = d.get("score").and_then(Value::as_f64).ok_or_else(|| bad("\"score\" must be a number"))? as f32;
            let class = d
                .get("class")
                .and_then(Value::as_u64)
                .and_then(|c| u32::try_from(c).ok())
                .ok_or_else(|| bad("\"class\" must be a whole number, 0 or more"))?;
            let label = match d.get("label") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(Arc::from(s.as_str())),
                Some(_) => return Err(bad("\"label\" must be a string")),
            };
            let keypoints = match d.get("keypoints") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(points)) => points
                    .iter()
                    .map(|p| match p.as_array().map(|a| a.iter().map(Value::as_f64).collect::<Vec<_>>()).as_deref() {
                        Some([Some(x), Some(y)]) => Ok([*x as f32, *y as f32]),
                        _ => Err(bad("\"keypoints\" must be a list of [x, y]")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(bad("\"keypoints\" must be a list of [x, y]")),
            };
            Ok(Object { bbox: xy, score, class, label, keypoints })
        })
        .collect()
}
