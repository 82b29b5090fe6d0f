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
