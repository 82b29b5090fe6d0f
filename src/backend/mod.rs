//! Wrappers over the native libraries. This is the only part of the crate
//! allowed `unsafe`; every block says why it is sound.

/// `i32`s per overlay primitive: x0, y0, x1, y1 (inclusive), hole x0, y0,
/// x1, y1 (exclusive; empty when x0 >= x1), alpha offset (-1: solid), colour
/// (Y | U << 8 | V << 16). The layout `cuda/kernels.cu` reads; the CPU
/// painter in `stages::sinks::overlay` reads the same.
pub const PRIM_INTS: usize = 10;

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

#[cfg(feature = "python")]
pub mod python;
