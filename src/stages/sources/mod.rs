//! Sources: where frames come from.

pub mod file;
