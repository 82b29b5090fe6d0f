//! Streams added to `infer-stream serve` at run time, with curl against the
//! real server: the stream limits (`429`), a real RTSP camera that requires
//! authentication (tests/support/rtsp_server.py) refusing a stream's
//! credentials, what a failed stream leaves behind and what the shutdown
//! summary says of the added streams, and the server's memory and threads
//! over 200 streams added and removed.

mod util;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::serve::{Camera, Serve, add, curl, json_of, resources, serial, stream_status, wait_for};

/// A small clip made with the ffmpeg CLI into `dir`: `frames` frames of 96x64.
fn clip(dir: &std::path::Path, frames: u32) {
    let made = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", "testsrc=size=96x64:rate=30", "-frames:v", &frames.to_string()])
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", "30"])
        .arg(dir.join("clip.mp4"))
        .status()
        .expect("run ffmpeg");
    assert!(made.success(), "ffmpeg could not make the clip");
}

fn delete(s: &Serve, id: &str) -> (u16, String) {
    curl(&s.url(&format!("/v1/streams/{id}")), &["-X", "DELETE"])
}

#[test]
fn added_streams_are_limited_per_template_and_in_total_with_429() {
    let _g = serial();
    // Cameras that never answer (port 9): streams that stay listed, cheaply.
    let pipeline = r#"
[pipeline]
api = { max_streams = 3 }

[sources.front]
kind = "rtsp"
dynamic = true
max_streams = 2
uri = "rtsp://127.0.0.1:9/cam"
wait_at_start = true
required = false

[sources.back]
kind = "rtsp"
dynamic = true
uri = "rtsp://127.0.0.1:9/cam"
wait_at_start = true
required = false

[sinks.out]
kind = "null"
inputs = ["front", "back"]
"#;
    let s = Serve::start(pipeline, &[]);
    for id in ["f1", "f2"] {
        let (code, st) = add(&s, json!({ "source": "front", "id": id }));
        assert_eq!(code, 201, "{st}");
    }
    // The template's own limit.
    let (code, e) = add(&s, json!({ "source": "front", "id": "f3" }));
    assert_eq!(code, 429, "{e}");
    assert_eq!((e["status"].as_u64(), e["limit"].as_str(), e["max_streams"].as_u64()), (Some(429), Some("template"), Some(2)), "{e}");
    assert!(e["error"].as_str().unwrap().contains("source `front` has 2 added stream(s), its `max_streams`"), "{e}");
    // The pipeline's limit, all templates together.
    let (code, st) = add(&s, json!({ "source": "back", "id": "b1" }));
    assert_eq!(code, 201, "{st}");
    let (code, e) = add(&s, json!({ "source": "back", "id": "b2" }));
    assert_eq!(code, 429, "{e}");
    assert_eq!((e["limit"].as_str(), e["max_streams"].as_u64()), (Some("total"), Some(3)), "{e}");
    assert!(e["error"].as_str().unwrap().contains("api.max_streams"), "{e}");
    // A refused request changed nothing.
    let (_, body) = curl(&s.url("/v1/streams"), &[]);
    let ids: Vec<String> = json_of(&body)["streams"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, ["b1", "f1", "f2"]);
    // Room again once one is removed.
    assert_eq!(delete(&s, "f1").0, 200);
    let (code, st) = add(&s, json!({ "source": "front", "id": "f3" }));
    assert_eq!(code, 201, "{st}");
    for id in ["f2", "f3", "b1"] {
        assert_eq!(delete(&s, id).0, 200);
    }
    // Many requests at once: exactly the limit gets in.
    let url = s.url("/v1/streams");
    let burst: Vec<_> = (0..8)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let body = json!({ "source": "back", "id": format!("burst-{i}") }).to_string();
                curl(&url, &["-X", "POST", "-H", "content-type: application/json", "-d", &body]).0
            })
        })
        .collect();
    let mut codes: Vec<u16> = burst.into_iter().map(|t| t.join().unwrap()).collect();
    codes.sort_unstable();
    assert_eq!(codes, [201, 201, 201, 429, 429, 429, 429, 429]);
    let (_, body) = curl(&s.url("/v1/streams"), &[]);
    assert_eq!(json_of(&body)["streams"].as_array().unwrap().len(), 3, "{body}");
}

#[test]
fn a_camera_refusing_the_credentials_makes_the_stream_failed_unauthorized_until_they_match() {
    let _g = serial();
    let pipeline = r#"
[pipeline]
name = "cameras"

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri"]
uri = "rtsp://127.0.0.1:18593/cam"
wait_at_start = true
connect_timeout_ms = 2000
backoff_initial_ms = 100
backoff_max_ms = 500

[sinks.out]
kind = "ndjson"
inputs = ["cams"]
path = "{dir}/out/{stream}.ndjson"
"#;
    let cam = Camera::with_credentials(18593, "viewer", "right-pass");
    let s = Serve::start(pipeline, &[]);
    let (code, st) = add(&s, json!({ "source": "cams", "id": "door", "uri": "rtsp://viewer:wrong-pass@127.0.0.1:18593/cam" }));
    assert_eq!(code, 201, "{st}");
    let (code, st) = add(&s, json!({ "source": "cams", "id": "yard", "uri": "rtsp://viewer:right-pass@127.0.0.1:18593/cam" }));
    assert_eq!(code, 201, "{st}");
    // The camera takes the right password and refuses the wrong one: after 3 refusals, `failed`.
    wait_for("yard running", Duration::from_secs(20), || stream_status(s.port, "yard")["state"] == "running");
    wait_for("door failed", Duration::from_secs(20), || stream_status(s.port, "door")["state"] == "failed");
    let door = stream_status(s.port, "door");
    let why = door["last_error"].as_str().unwrap_or_else(|| panic!("a failed stream says why: {door}"));
    assert!(why.starts_with("unauthorized"), "{door}");
    assert!(why.contains("viewer:***@") && !why.contains("wrong-pass"), "{door}");
    let (code, why) = curl(&s.url("/readyz"), &[]);
    assert_eq!(code, 503, "a required stream refused by its camera holds readiness back: {why}");
    assert!(why.contains("door"), "{why}");
    // The camera's password is changed to the one `door` has: it is picked up, and `yard` is refused now.
    drop(cam);
    let _cam = Camera::with_credentials(18593, "viewer", "wrong-pass");
    wait_for("door running", Duration::from_secs(20), || stream_status(s.port, "door")["state"] == "running");
    let door = stream_status(s.port, "door");
    assert_eq!(door["last_error"], Value::Null, "{door}");
    wait_for("yard failed", Duration::from_secs(30), || stream_status(s.port, "yard")["state"] == "failed");
    assert!(stream_status(s.port, "yard")["last_error"].as_str().unwrap().starts_with("unauthorized"));
    let log = s.log();
    assert!(log.contains("refused the credentials"), "{log}");
    assert!(!log.contains("wrong-pass") && !log.contains("right-pass"), "a password in the log:\n{log}");
}

#[test]
fn failed_streams_leave_no_file_and_the_summary_tells_each_added_streams_fate() {
    let _g = serial();
    let pipeline = r#"
[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri"]
uri = "rtsp://127.0.0.1:9/cam"
connect_timeout_ms = 1000

[sources.clips]
kind = "file"
dynamic = true
uri = "{dir}/clip.mp4"

[sinks.out]
kind = "ndjson"
inputs = ["cams", "clips"]
queue = { when_full = "block" }
path = "{dir}/out/{stream}.ndjson"
"#;
    let dir = tempfile::tempdir().unwrap();
    clip(dir.path(), 30);
    let mut s = Serve::start_in(dir, pipeline, &[]);
    let started = Instant::now();
    // A while after the start, so that a first result counted from the start would show it.
    std::thread::sleep(Duration::from_secs(2));
    let (code, st) = add(&s, json!({ "source": "cams", "id": "gone" }));
    assert_eq!(code, 201, "{st}");
    let (code, st) = add(&s, json!({ "source": "clips", "id": "clip" }));
    assert_eq!(code, 201, "{st}");
    let added_after = started.elapsed();
    wait_for("gone failed", Duration::from_secs(20), || stream_status(s.port, "gone")["state"] == "failed");
    wait_for("clip ended and flushed", Duration::from_secs(30), || stream_status(s.port, "clip")["complete"] == true);
    let gone = stream_status(s.port, "gone");
    assert!(gone["last_error"].as_str().is_some_and(|e| e.contains("127.0.0.1:9")), "{gone}");
    assert_eq!(util::read_ndjson(&s.path("out/clip.ndjson")).len(), 30);
    // The failed stream never started: it leaves no output behind, not even an empty file.
    let (code, last) = delete(&s, "gone");
    assert_eq!(code, 200, "{last}");
    assert!(!s.path("out/gone.ndjson").exists(), "a stream that never started left {}", s.path("out/gone.ndjson").display());
    // A stream that fails while listed at the stop is in the summary too.
    let (code, st) = add(&s, json!({ "source": "cams", "id": "down", "uri": "rtsp://127.0.0.1:9/other" }));
    assert_eq!(code, 201, "{st}");
    wait_for("down failed", Duration::from_secs(20), || stream_status(s.port, "down")["state"] == "failed");
    assert_eq!(s.stop(), Some(143), "{}", s.log());
    let log = s.log();
    let summary = &log[log.find("frames: decoded").unwrap_or_else(|| panic!("no summary:\n{log}")).saturating_sub(2000)..];
    assert!(summary.contains("added streams: 3, failed 2, without a result 2"), "{summary}");
    assert!(summary.contains("failed: `gone` (cams): ") && summary.contains("failed: `down` (cams): "), "{summary}");
    // The first result counts from the stream's POST, not from the server's start.
    assert!(!summary.contains("time to first result"), "{summary}");
    let line = summary.lines().find(|l| l.starts_with("added streams:")).unwrap();
    let p50: f64 = line.split("p50 ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap();
    eprintln!("{line} (streams added {:.0} ms after the start)", added_after.as_secs_f64() * 1e3);
    assert!(p50 < added_after.as_secs_f64() * 1e3, "first result {p50} ms: counted from the start, not the stream's POST:\n{line}");
}

/// (threads, resident KiB) of `serve` once it has settled: the lowest RSS of a few readings.
fn settled(pid: u32) -> (usize, u64) {
    let mut best = (usize::MAX, u64::MAX);
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(200));
        let (threads, _, rss) = resources(pid);
        best = (best.0.min(threads), best.1.min(rss));
    }
    best
}

#[test]
fn memory_and_threads_return_after_two_hundred_streams_added_and_removed() {
    let _g = serial();
    let pipeline = r#"
[pipeline]
api = { max_streams = 200 }

[sources.clips]
kind = "file"
dynamic = true
uri = "{dir}/clip.mp4"
restart = "always"
restart_backoff_ms = 50

[stages.pre]
kind = "preprocess"
inputs = ["clips"]
width = 640
height = 384
color = "bgr"

[sinks.out]
kind = "ndjson"
inputs = ["pre"]
path = "{dir}/out/{stream}.ndjson"
"#;
    let dir = tempfile::tempdir().unwrap();
    clip(dir.path(), 10);
    let s = Serve::start_in(dir, pipeline, &[]);
    let pid = s.pid();
    let cycle = |n: usize, round: usize| {
        for i in 0..n {
            let (code, st) = add(&s, json!({ "source": "clips", "id": format!("r{round}-{i}") }));
            assert_eq!(code, 201, "{st}");
        }
        let up = resources(pid);
        wait_for("every stream delivering", Duration::from_secs(120), || {
            let (_, body) = curl(&s.url("/v1/streams"), &[]);
            json_of(&body)["streams"].as_array().unwrap().iter().all(|st| st["frames"].as_u64().unwrap_or(0) > 0)
        });
        for i in 0..n {
            let (code, body) = delete(&s, &format!("r{round}-{i}"));
            assert_eq!(code, 200, "{body}");
        }
        up
    };
    let start = settled(pid);
    // The first cycle brings thread pools, allocator arenas and buffers to their working size.
    let up = cycle(200, 0);
    let first = settled(pid);
    eprintln!("at the start: {start:?}; with 200 streams: {up:?}; after the first 200 added and removed: {first:?}");
    // Later rounds: memory returns to the working size, and does not grow from
    // round to round (a stream that kept anything would add to every round).
    // One round's RSS may sit a few MB higher than another's as the
    // allocator's free pages fall; the lowest and the last say whether it leaks.
    let mut afters = Vec::new();
    for round in 1..=3 {
        let up = cycle(200, round);
        let after = settled(pid);
        eprintln!("round {round}: with 200 streams {up:?}; after removing them {after:?} (threads, RSS KiB)");
        // Idle threads of the API's blocking pool may linger a few seconds: the first round's count is the reference.
        assert!(after.0 <= first.0, "threads: {} after the first round, {} after round {round}", first.0, after.0);
        afters.push(after.1);
    }
    let lowest = *afters.iter().min().unwrap();
    assert!(
        lowest as f64 <= first.1 as f64 * 1.10,
        "RSS after each later round {afters:?} KiB: all more than 10% over the {} KiB after the first round",
        first.1
    );
    assert!(
        afters[afters.len() - 1] as f64 <= afters[0] as f64 * 1.10,
        "RSS grows from round to round: {afters:?} KiB after rounds 1 to 3 (first round: {} KiB)",
        first.1
    );
    // Most of what the 200 streams took is given back when they go.
    let (took, kept) = (up.2.saturating_sub(start.1) as f64, first.1.saturating_sub(start.1) as f64);
    assert!(
        kept <= took / 3.0,
        "RSS {} KiB at the start, {} KiB with 200 streams, {} KiB once they were removed: {:.0}% of it kept",
        start.1,
        up.2,
        first.1,
        100.0 * kept / took
    );
}
