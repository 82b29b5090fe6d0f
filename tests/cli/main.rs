//! Integration tests: the real binary on the real samples and models, one
//! module per concern.

#[path = "../util/mod.rs"]
mod util;

mod files;
mod models;
mod onnx_runtime;
mod runs;
mod signals;
