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
