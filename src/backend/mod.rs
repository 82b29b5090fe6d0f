//! Wrappers over the native libraries. This is the only part of the crate
//! allowed `unsafe`; every block says why it is sound.

pub mod ffmpeg;
pub mod memory;
pub mod ort;
pub mod process;

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod nvdec;

#[cfg(feature = "gstreamer")]
pub mod gstreamer;
