//! Postprocessors: model outputs → results in source coordinates.

pub mod classify;
pub mod ctc;
pub mod db;
pub mod geometry;
pub mod nms;
pub mod yolo;
