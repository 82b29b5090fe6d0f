//! Postprocessors: model outputs → results in source coordinates.

pub mod db;
pub mod geometry;
pub mod nms;
