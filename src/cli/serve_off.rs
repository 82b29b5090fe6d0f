//! `infer-stream serve` in a build without the `serve` feature: says so, names
//! the feature and how to build it in, and exits 2 (nothing ran).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;

use infer_stream::features::{not_compiled, rebuild_help};

use super::exit;

pub fn serve(_path: &Path, _listen: Option<SocketAddr>, _ort_library: Option<PathBuf>, _report: Option<&Path>, _quiet: bool) -> Result<u8> {
    eprintln!("error: {}\n  = help: {}", not_compiled("`infer-stream serve`", "serve"), rebuild_help("serve"));
    Ok(exit::CONFIG)
}
