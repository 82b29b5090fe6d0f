//! Signals during a run: SIGINT and SIGTERM drain and exit 128 + signal; a
//! second Ctrl-C right after the first is the same stop.

use std::time::{Duration, Instant};

use crate::util::*;

/// Start `run tests/data/eval.toml` (plus `extra` arguments) writing into
/// `out`, and return once its NDJSON has `lines` lines.
fn spawn_until_lines(out: &std::path::Path, extra: &[&str], lines: usize) -> std::process::Child {
    require_assets();
    let child = bin()
        .args(["run", "tests/data/eval.toml", "--progress", "never"])
        .args(extra)
        .env("INFER_STREAM_TEST_OUT", out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ndjson = out.join("eval.ndjson");
    let t0 = Instant::now();
    while std::fs::read_to_string(&ndjson).map(|s| s.lines().count()).unwrap_or(0) < lines {
        assert!(t0.elapsed() < Duration::from_secs(60), "no output after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Interrupt a run mid-way: it drains, leaves complete NDJSON, and exits 128 + signal.
fn interrupt(signal: &str, code: i32) {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report.json");
    let child = spawn_until_lines(out.path(), &["--report", report.to_str().unwrap()], 10);
    let ndjson = out.path().join("eval.ndjson");
    let st = std::process::Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    let text = std::fs::read_to_string(&ndjson).unwrap();
    assert!(text.ends_with('\n'), "last line complete");
    let lines = read_ndjson(&ndjson);
    assert!(lines.len() < 300, "stopped early ({} lines)", lines.len());
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert_eq!((dropped, failed), (0, 0));
    assert_eq!(decoded, processed, "frames in flight drained");
    assert_eq!(lines.len() as u64, processed, "every processed frame has its line");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["frames"]["processed"], processed);
}

#[test]
fn sigint_drains_and_exits_130() {
    interrupt("-INT", 130);
}

#[test]
fn sigterm_drains_and_exits_143() {
    interrupt("-TERM", 143);
}

/// A second Ctrl-C 30 ms after the first is the same stop (a key held, a
/// supervisor signalling the process and its group): the run drains and
/// exits 130. Only one a second or more later exits at once
/// (`tests/shutdown.rs`).
#[test]
fn second_signal_within_a_second_is_the_same_stop() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let child = spawn_until_lines(out.path(), &[], 3);
    let ndjson = out.path().join("eval.ndjson");
    let pid = child.id().to_string();
    for _ in 0..2 {
        assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
        std::thread::sleep(Duration::from_millis(30));
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(!err.contains("exiting now"), "{err}");
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert_eq!((dropped, failed), (0, 0), "{err}");
    assert_eq!(decoded, processed, "frames in flight drained");
    assert_eq!(read_ndjson(&ndjson).len() as u64, processed);
}
