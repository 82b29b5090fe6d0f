//! Sources: where frames come from.

pub mod audio;
pub mod dir;
pub mod file;
pub mod rtsp;
pub mod testsrc;
