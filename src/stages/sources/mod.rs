//! Sources: where frames come from.

pub mod audio;
pub mod audiotest;
pub mod dir;
pub mod file;
#[cfg(feature = "gstreamer")]
pub mod gst;
pub mod rtsp;
pub mod testsrc;
