//! Config loading: exact error messages and positions.
use std::path::Path;

use super::*;

fn errors(src: &str) -> Vec<String> {
    match parse(Path::new("p.toml"), src.to_string()) {
        Ok(_) => vec![],
        Err(d) => d.0.iter().map(|d| d.headline()).collect(),
    }
}

#[test]
fn placeholder_parses() {
    let cfg = parse(Path::new("dir/p.toml"), "[sources.cam]\nkind = \"file\"\nuri = \"a.mp4\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n".into()).unwrap();
    assert_eq!(cfg.nodes.len(), 2);
    assert_eq!(cfg.base_dir, Path::new("dir"));
    let _ = errors("");
}
