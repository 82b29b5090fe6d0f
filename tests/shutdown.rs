//! Shutdown at random moments, the way users and supervisors stop us:
//! SIGINT / SIGTERM drain and exit 130 / 143 with every result line complete;
//! SIGKILL leaves at most one partial last line. Moments come from a fixed
//! seed so a failure can be replayed.

mod util;

use std::process::{Command, Stdio};
use std::time::Duration;

use util::*;

/// A small deterministic generator (no extra dependency): xorshift64*.
struct Moments(u64);

impl Moments {
    fn next_ms(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        lo + self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % (hi - lo)
    }
}

fn spawn(out: &std::path::Path) -> std::process::Child {
    bin()
        .args(["run", "tests/data/shutdown.toml", "--progress", "never"])
        .env("INFER_STREAM_TEST_OUT", out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn kill(pid: u32, signal: &str) {
    assert!(Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success());
}

#[test]
fn sigint_and_sigterm_at_random_moments_leave_complete_results() {
    require_assets();
    let mut moments = Moments(0x5eed_1234_abcd_0001);
    let mut before_first = 0;
    for round in 0..20 {
        let out = tempfile::tempdir().unwrap();
        let (signal, code) = if round % 2 == 0 { ("-INT", 130) } else { ("-TERM", 143) };
        // From start-up (models still loading) to well into the run.
        let after = moments.next_ms(5, 2500);
        let child = spawn(out.path());
        std::thread::sleep(Duration::from_millis(after));
        kill(child.id(), signal);
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        let ctx = format!("round {round}: {signal} after {after} ms:\n{err}");
        assert_eq!(o.status.code(), Some(code), "{ctx}");
        assert!(!err.contains("panicked"), "{ctx}");
        let nd = out.path().join("shutdown.ndjson");
        let text = std::fs::read_to_string(&nd).unwrap_or_default();
        assert!(text.is_empty() || text.ends_with('\n'), "last line complete: {ctx}");
        let lines = if text.is_empty() { Vec::new() } else { read_ndjson(&nd) };
        if err.lines().any(|l| l.starts_with("frames: decoded")) {
            let (decoded, processed, dropped, failed) = accounting(&err);
            assert_eq!(decoded, processed + dropped + failed, "{ctx}");
            assert_eq!(lines.len() as u64, processed, "every processed frame has its line: {ctx}");
        } else {
            // Stopped before the pipeline started: nothing ran, nothing written.
            assert!(lines.is_empty(), "{ctx}");
        }
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["seq"], i as u64, "results in order, none missing: {ctx}");
        }
        before_first += lines.is_empty() as usize;
    }
    eprintln!("20 interrupts, {before_first} of them before the first result");
}

#[test]
fn sigkill_leaves_at_most_a_partial_last_line() {
    require_assets();
    let mut moments = Moments(0x5eed_5678_0000_0002);
    for round in 0..5 {
        let out = tempfile::tempdir().unwrap();
        let after = moments.next_ms(800, 3000);
        let child = spawn(out.path());
        std::thread::sleep(Duration::from_millis(after));
        kill(child.id(), "-KILL");
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), None, "killed");
        let text = std::fs::read_to_string(out.path().join("shutdown.ndjson")).unwrap_or_default();
        // Readers skip an unterminated last line; every terminated line is whole JSON.
        let complete = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        for (i, l) in complete.lines().enumerate() {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("round {round} after {after} ms: line {}: {e}: {l}", i + 1));
            assert_eq!(v["seq"], i as u64);
        }
        let partial = &text[complete.len()..];
        assert!(!partial.contains('\n'));
    }
}

/// Spawn a run with a `--report`, wait until it has written `lines` results.
fn spawn_running(out: &std::path::Path, lines: usize) -> std::process::Child {
    let child = bin()
        .args(["run", "tests/data/shutdown.toml", "--progress", "never", "--report"])
        .arg(out.join("report.json"))
        .env("INFER_STREAM_TEST_OUT", out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let nd = out.join("shutdown.ndjson");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&nd).map(|s| s.lines().count()).unwrap_or(0) < lines {
        assert!(t0.elapsed() < Duration::from_secs(60), "no output after 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// The run drained: exit `code`, summary balanced with nothing failed, one
/// line per processed frame, and the report written with the same counts.
fn assert_drained(out: &std::path::Path, o: &std::process::Output, code: i32, ctx: &str) {
    let err = stderr(o);
    let ctx = format!("{ctx}:\n{err}");
    assert_eq!(o.status.code(), Some(code), "{ctx}");
    assert!(!err.contains("exiting now"), "{ctx}");
    assert!(err.lines().any(|l| l.starts_with("frames: decoded")), "summary written: {ctx}");
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert_eq!(failed, 0, "no frame failed: {ctx}");
    assert_eq!(decoded, processed + dropped, "{ctx}");
    let lines = read_ndjson(&out.join("shutdown.ndjson"));
    assert_eq!(lines.len() as u64, processed, "every processed frame has its line: {ctx}");
    let report = std::fs::read(out.join("report.json")).unwrap_or_else(|e| panic!("report written: {e}: {ctx}"));
    let r: serde_json::Value = serde_json::from_slice(&report).unwrap();
    assert_eq!(r["frames"]["processed"], processed, "{ctx}");
}

/// `timeout -s TERM`, and anything that signals a whole process group, hands
/// the same signal over twice within microseconds: that is one stop, which
/// drains, writes the summary and the report, and exits 128 + signal.
#[test]
fn a_signal_delivered_twice_at_once_is_one_drained_stop() {
    require_assets();
    for round in 0..12 {
        let out = tempfile::tempdir().unwrap();
        let (signal, code) = if round % 2 == 0 { ("TERM", 143) } else { ("INT", 130) };
        let child = spawn_running(out.path(), 2);
        let pid = child.id().to_string();
        // One `kill` with the pid twice: two deliveries back to back.
        assert!(Command::new("kill").args(["-s", signal, "--", &pid, &pid]).status().unwrap().success());
        let o = child.wait_with_output().unwrap();
        assert_drained(out.path(), &o, code, &format!("round {round}: SIG{signal} twice"));
    }
}

/// SIGHUP (the terminal or SSH session went away) is a stop that drains: exit 129.
#[test]
fn sighup_drains_and_exits_129() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let child = spawn_running(out.path(), 2);
    kill(child.id(), "-HUP");
    let o = child.wait_with_output().unwrap();
    assert_drained(out.path(), &o, 129, "SIGHUP");
}

/// A second signal well after the first, while the stop has not finished
/// (here a sink stuck opening a FIFO nobody reads), exits at once with its
/// own code, 4, not the code of a drained stop.
#[test]
fn a_later_second_signal_exits_at_once_with_its_own_code() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let fifo = out.path().join("shutdown.ndjson");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let child = spawn(out.path());
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    kill(child.id(), "-TERM");
    std::thread::sleep(Duration::from_millis(1500));
    kill(child.id(), "-TERM");
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("second signal"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{err}");
}
