//! `validate` on pipeline files, with the real binary: errors located exactly, with a hint.

mod util;

use std::path::{Path, PathBuf};
use std::process::Output;

use util::*;

/// `text` written as `p.toml` in a fresh folder.
fn pipeline(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

fn infer_stream(args: &[&str], file: &Path) -> Output {
    bin().args(args).arg(file).output().expect("run infer-stream")
}

/// `${VAR}` written without quotes is a TOML error; its help says to quote it.
#[test]
fn unquoted_environment_references_get_a_hint() {
    let (_dir, p) = pipeline("[sources.cam]\nkind = \"file\"\nuri = ${VIDEO}\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n");
    let o = infer_stream(&["validate"], &p);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let hint = "  = help: environment references work inside quoted strings: write \"${VAR}\"\n";
    let at = e.find(&format!("--> {}:3:7\n", p.display())).unwrap_or_else(|| panic!("{e}"));
    assert!(e[at..].contains(hint), "{e}");
}

/// A queue too large is reported at its `capacity` key, however the queue is written.
#[test]
fn queue_capacity_errors_point_at_the_capacity_key() {
    let head = "[sources.cam]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n";
    for (queue, at) in [
        ("queue = { when_full = \"block\", capacity = 100000 }\n", "6:32"),
        ("[sinks.out.queue]\nwhen_full = \"block\"\ncapacity = 100000\n", "8:1"),
    ] {
        let (_dir, p) = pipeline(&format!("{head}{queue}"));
        let o = infer_stream(&["validate"], &p);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(&format!("error: sink `out`: queue capacity 100000 is over 4096\n  --> {}:{at}\n", p.display())), "{e}");
    }
}
