//! A short soak (the CI version of `scripts/soak.sh`): endless synthetic video
//! through text detection with metrics on and scraped, for about a minute.
//! After warm-up, resident memory may not grow more than 5%, and open file
//! descriptors and threads may not grow at all; Ctrl-C then drains with every
//! frame accounted for.

mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use util::*;

const WARMUP: Duration = Duration::from_secs(15);
const RUN: Duration = Duration::from_secs(50);
const EVERY: Duration = Duration::from_millis(2500);

struct Sample {
    at: f64,
    rss_kib: u64,
    fds: usize,
    threads: usize,
}

fn sample(pid: u32, at: f64) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let count = |d: &str| std::fs::read_dir(format!("/proc/{pid}/{d}")).unwrap().count();
    // A descriptor open for a moment (a file or socket in use right then) is
    // not a leak: the least of three looks 50 ms apart. A leak stays.
    let fds = (0..3)
        .map(|i| {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(50));
            }
            count("fd")
        })
        .min()
        .unwrap_or(0);
    Sample { at, rss_kib, fds, threads: count("task") }
}

/// GET /metrics; the frames decoded so far.
fn scrape(addr: &str) -> Option<u64> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines().find(|l| l.starts_with("infer_stream_frames_decoded_total{"))?.rsplit(' ').next()?.parse().ok()
}

#[test]
fn a_minute_of_endless_work_leaks_no_memory_descriptors_or_threads() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["run", "tests/data/soak.toml", "--progress", "never", "--metrics-addr", "0"])
        .env("INFER_STREAM_TEST_OUT", out.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    // Read stderr on a thread (so the pipe never fills); the metrics address comes first.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = BufReader::new(child.stderr.take().unwrap());
    let lines = std::thread::spawn(move || {
        let mut all = Vec::new();
        for l in reader.lines().map_while(Result::ok) {
            let _ = tx.send(l.clone());
            all.push(l);
        }
        all.join("\n")
    });
    let addr = loop {
        let l = rx.recv_timeout(Duration::from_secs(120)).expect("no metrics address logged");
        if let Some(a) = l.split("metrics on http://").nth(1).and_then(|a| a.split('/').next()) {
            break a.to_string();
        }
    };
    let mut samples = Vec::new();
    let mut frames = Vec::new();
    while start.elapsed() < RUN {
        std::thread::sleep(EVERY);
        assert!(child.try_wait().unwrap().is_none(), "infer-stream stopped early");
        // Sample before scraping: the scrape's own connection is an extra descriptor for a moment.
        samples.push(sample(pid, start.elapsed().as_secs_f64()));
        frames.push(scrape(&addr).expect("/metrics answers"));
    }
    std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    let err = lines.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let (decoded, _, _, _) = accounting(&err);

    println!("{:>7} {:>9} {:>4} {:>7} {:>8}", "seconds", "rss MiB", "fds", "threads", "frames");
    for (s, f) in samples.iter().zip(&frames) {
        println!("{:>7.1} {:>9.1} {:>4} {:>7} {:>8}", s.at, s.rss_kib as f64 / 1024.0, s.fds, s.threads, f);
    }
    let warm = samples.iter().find(|s| s.at >= WARMUP.as_secs_f64()).unwrap();
    let end = samples.last().unwrap();
    let ratio = end.rss_kib as f64 / warm.rss_kib as f64;
    println!(
        "rss after warm-up {:.1} MiB, at the end {:.1} MiB (ratio {ratio:.3}); fds {} -> {}; threads {} -> {}; {decoded} frames",
        warm.rss_kib as f64 / 1024.0,
        end.rss_kib as f64 / 1024.0,
        warm.fds,
        end.fds,
        warm.threads,
        end.threads
    );
    assert!(frames.windows(2).all(|w| w[1] >= w[0]) && frames.last() > frames.first(), "frames kept flowing: {frames:?}");
    assert!(ratio <= 1.05, "memory grew {:.1}% after warm-up", (ratio - 1.0) * 100.0);
    // A leak grows steadily; a descriptor or thread that comes and goes does not.
    // Compare the most of each in the first and the second half after warm-up.
    let after: Vec<_> = samples.iter().filter(|s| s.at >= WARMUP.as_secs_f64()).collect();
    let (first, second) = after.split_at(after.len() / 2);
    let most = |h: &[&Sample], f: fn(&Sample) -> usize| h.iter().map(|s| f(s)).max().unwrap_or(0);
    let (fd1, fd2) = (most(first, |s| s.fds), most(second, |s| s.fds));
    let (th1, th2) = (most(first, |s| s.threads), most(second, |s| s.threads));
    assert!(fd2 <= fd1, "open file descriptors grew: at most {fd1} in the first half, {fd2} in the second");
    assert!(th2 <= th1, "threads grew: at most {th1} in the first half, {th2} in the second");
}
