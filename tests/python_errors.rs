//! `kind = "python"` stages that go wrong, through the real binary
//! (docs/python.md, "Errors"): a syntax error is a start-up error located in
//! the script, a wrong return value fails its frame and the run goes on with
//! every frame accounted for, and a `process` that never returns does not
//! keep a stopped run from draining and exiting.

mod util;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::*;

/// Write `plugin.py` and `p.toml` (a testsrc `cam` of `frames` frames, the
/// python stage `mine` with `keys`, an ndjson sink) into `dir`.
fn pipeline(dir: &Path, plugin: &str, frames: u32, keys: &str) -> PathBuf {
    std::fs::write(dir.join("plugin.py"), plugin).unwrap();
    let p = dir.join("p.toml");
    let text = format!(
        "[sources.cam]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nframes = {frames}\n\n\
         [stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\n{keys}\n\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"mine\"]\npath = \"out.ndjson\"\n"
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// A script with a syntax error: `run` stops before any frame, exit 2, with
/// the stage's key in the pipeline (file:line:column), the script's file and
/// line, and Python's message.
#[test]
fn a_syntax_error_is_a_startup_error_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "import math\n\ndef process(frame):\n    x = = math.pi\n    return None\n";
    let p = pipeline(dir.path(), plugin, 5, "");
    let o = run_in(dir.path(), &["run", p.to_str().unwrap(), "--progress", "never"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("p.toml:10:10") && err.contains("stage `mine`: cannot import plugin.py"), "{err}");
    assert!(err.contains("plugin.py\", line 4") && err.contains("SyntaxError: invalid syntax"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = dir.path().join("out.ndjson");
    assert!(!out.exists() || std::fs::read_to_string(&out).unwrap().is_empty(), "nothing ran");
    // `validate` says the same.
    let o = bin().args(["validate", p.to_str().unwrap()]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("p.toml:10:10") && err.contains("plugin.py\", line 4") && err.contains("SyntaxError"), "{err}");
}

/// `process` returning something else than a dict or None (an int, a
/// string, a tuple) fails that frame with what to return; the run goes on
/// and every frame is accounted for: decoded = processed + failed.
#[test]
fn a_wrong_return_type_fails_its_frame_and_every_frame_is_accounted_for() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "def process(frame):\n    if frame.seq % 4 == 1:\n        return 7\n    \
                  if frame.seq % 4 == 2:\n        return \"text\"\n    if frame.seq == 7:\n        return (1, 2)\n    \
                  return {\"ok\": frame.seq}\n";
    let p = pipeline(dir.path(), plugin, 12, "");
    let o = run_in(dir.path(), &["run", p.to_str().unwrap(), "--progress", "never"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let seqs: Vec<u64> = read_ndjson(&dir.path().join("out.ndjson")).iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 3, 4, 8, 11]);
    assert_eq!(accounting(&err), (12, 5, 0, 7), "{err}");
    let fix = "return None (pass the frame on) or a dict (its results)";
    assert!(err.contains(&format!("stage `mine`: stream `cam` frame 1: plugin.py:process returned an int: {fix}")), "{err}");
    assert!(err.contains(&format!("stream `cam` frame 2: plugin.py:process returned a str: {fix}")), "{err}");
}

/// A `process` that never returns (frame 3 sleeps forever): SIGTERM stops
/// the run anyway. Once the stop is `stop_timeout_ms` (5 s, the default) old,
/// the stuck call is abandoned: frame 3 fails with a message naming the
/// stage, stream and frame, the frames queued after it fail too, the sink
/// flushes and the run exits 143 with every frame accounted for.
#[test]
fn a_process_that_never_returns_does_not_stop_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "import pathlib, time\n\ndef process(frame):\n    if frame.seq == 3:\n        \
                  pathlib.Path(\"stuck\").touch()\n        while True:\n            time.sleep(1)\n    return {\"ok\": frame.seq}\n";
    let p = pipeline(dir.path(), plugin, 100_000, "");
    let mut child = Command::new(env!("CARGO_BIN_EXE_infer-stream"))
        .args(["run", p.to_str().unwrap(), "--progress", "never"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr_pipe.read_to_string(&mut s).unwrap();
        s
    });
    // Wait (up to a minute) for the stage to be stuck in frame 3.
    let started = Instant::now();
    while !dir.path().join("stuck").exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "frame 3 never reached");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early: {}", reader.join().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    // A hang is a failure: give it a minute (the deadline is 5 s), then kill it.
    let signalled = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if signalled.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the run did not end a minute after SIGTERM: {}", reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains(
            "stage `mine`: stream `cam` frame 3: plugin.py:process was still running 5000 ms after the stop (stop_timeout_ms): abandoned"
        ),
        "{err}"
    );
    let (decoded, processed, dropped, failed) = accounting(&err);
    let seqs: Vec<u64> = read_ndjson(&dir.path().join("out.ndjson")).iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 1, 2], "{err}");
    assert_eq!((processed, dropped), (3, 0), "{err}");
    assert_eq!(failed, decoded - 3, "frame 3 and every frame after it failed: {err}");
    assert!(!err.contains("panicked"), "{err}");
}
