//! `validate` on pipeline files, with the real binary: errors located exactly,
//! with a hint; and warnings about pipelines that work, but not as meant.

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

fn model() -> String {
    root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx").display().to_string()
}

/// Batching on the CPU and a stage whose results reach no sink are warnings
/// (located) in `validate` and in the run's log; neither stops anything.
#[test]
fn cpu_batching_and_stages_feeding_no_sink_are_warned_about() {
    require_assets();
    let text = format!(
        "[sources.cam]\nkind = \"testsrc\"\nwidth = 320\nheight = 192\nframes = 4\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 320\nheight = 192\n\
         [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\nbatch = {{ max = 2, timeout_ms = 5 }}\n\
         [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         [stages.spare]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         [sinks.out]\nkind = \"null\"\ninputs = [\"boxes\"]\n",
        model()
    );
    let (_dir, p) = pipeline(&text);
    let batching = "stage `det` batches up to 2 frames on the CPU: batching helps on GPU providers";
    let spare = "stage `spare` feeds no sink: its results are computed and discarded";
    let v = infer_stream(&["validate"], &p);
    let e = stderr(&v);
    assert_eq!(v.status.code(), Some(0), "{e}");
    assert!(e.contains(&format!("warning: {batching}")) && e.contains(&format!("--> {}:15:9\n", p.display())), "{e}");
    assert!(e.contains(&format!("warning: {spare}\n  --> {}:19:9\n", p.display())), "{e}");
    assert!(e.contains(": ok (6 nodes, 2 warnings)"), "{e}");
    let r = infer_stream(&["run", "--progress", "never"], &p);
    let e = stderr(&r);
    assert_eq!(r.status.code(), Some(0), "{e}");
    assert!(e.contains(&format!("{}:15:9: {batching}", p.display())), "{e}");
    assert!(e.contains(&format!("{}:19:9: {spare}", p.display())), "{e}");
    // Batching behind a GPU provider, and every stage feeding a sink: no warning.
    let quiet = text
        .replace("batch = {", "providers = [\"cuda\", \"cpu\"]\nbatch = {")
        .replace("inputs = [\"boxes\"]", "inputs = [\"boxes\", \"spare\"]");
    let (_dir, p) = pipeline(&quiet);
    let v = infer_stream(&["validate"], &p);
    let e = stderr(&v);
    assert_eq!(v.status.code(), Some(0), "{e}");
    assert!(!e.contains("warning"), "{e}");
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
