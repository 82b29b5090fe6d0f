//! Postprocessors: model outputs → results in source coordinates.

pub mod centerface;
pub mod classify;
pub mod ctc;
pub mod db;
pub mod geometry;
pub mod nms;
pub mod yolo;

use crate::frame::{Frame, ModelOutputs, Tensor};
use crate::stages::StageError;

/// The model outputs on `frame`: an infer stage upstream attached them.
pub fn outputs(frame: &Frame) -> Result<&ModelOutputs, StageError> {
    frame.model_outputs().ok_or_else(|| StageError::Frame("no model outputs on the frame (is an infer stage upstream?)".into()))
}

/// The output `want` names (the model's first when `None`).
pub fn output<'a>(out: &'a ModelOutputs, want: Option<&str>) -> Result<&'a Tensor, StageError> {
    out.get(want).ok_or_else(|| StageError::Frame(format!("model output `{}` not found", want.unwrap_or("0"))))
}

/// Parse ultralytics' `names` metadata (`{0: 'person', 1: 'bicycle', ...}`).
pub fn parse_names(meta: &str) -> Vec<String> {
    let mut names: Vec<(usize, String)> = Vec::new();
    let mut rest = meta.trim().trim_start_matches('{').trim_end_matches('}');
    while let Some(colon) = rest.find(':') {
        let key = rest[..colon].trim().trim_start_matches(',').trim();
        let after = rest[colon + 1..].trim_start();
        let Some(q) = after.chars().next().filter(|c| *c == '\'' || *c == '"') else { break };
        let Some(end) = after[1..].find(q) else { break };
        if let Ok(k) = key.parse() {
            names.push((k, after[1..1 + end].to_string()));
        }
        rest = &after[end + 2..];
    }
    names.sort();
    names.into_iter().map(|(_, n)| n).collect()
}
