//! The metrics endpoint on the real binary, scraped by a real Prometheus server
//! (Debian's `prometheus`, installed by scripts/setup.sh).

mod util;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use util::prometheus::{Prometheus, Reaped};
use util::*;

fn require_prometheus() {
    let found = Command::new("prometheus").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "`prometheus` is not installed: run scripts/setup.sh (it installs Debian's prometheus package)");
}

/// The value of the sample `series` (name and labels exactly as exposed) in a scrape.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The value of an instant PromQL query with one result, `None` while it has none.
fn query(prom: &Prometheus, promql: &str) -> Option<f64> {
    let result = prom.series(promql)?;
    assert!(result.len() <= 1, "{promql}: {result:?}");
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// Poll `promql` until it equals `want` (Prometheus applies new targets every 5 s).
fn wait_for(prom: &Prometheus, promql: &str, want: f64) {
    let t0 = Instant::now();
    let mut got = None;
    while t0.elapsed() < Duration::from_secs(60) {
        got = query(prom, promql);
        if got == Some(want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "Prometheus: `{promql}` is {got:?} after 60 s, expected {want}\nprometheus log:\n{}",
        std::fs::read_to_string(&prom.log).unwrap_or_default()
    );
}

/// The run is fed through a FIFO: it lasts as long as the test needs, on any
/// machine. Half the clip goes in, the pipeline drains it and waits for more;
/// with the counters still, Prometheus must have scraped exactly what
/// `/metrics` shows; then the rest goes in and the final report must agree.
#[test]
fn prometheus_scrapes_the_counters_the_summary_reports() {
    require_assets();
    require_prometheus();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.mp4");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // Read and write: opening does not wait for a reader, and the pipeline sees no end of file until it is closed.
    let mut input = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
    let clip = std::fs::read(root().join("samples/eval-720p.mp4")).unwrap();
    let report = dir.path().join("report.json");
    let mut child = bin()
        .args(["run", "tests/data/metrics.toml", "--progress", "never", "--metrics-addr", "127.0.0.1:0", "--report"])
        .arg(&report)
        .env("INFER_STREAM_TEST_OUT", dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err_pipe = child.stderr.take().unwrap();
    let mut child = Reaped(child);

    // Collect stderr; hand over the address the server took (port 0: a free one).
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let log2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
            if let Some(a) = line.split("metrics on http://").nth(1).and_then(|a| a.split('/').next()) {
                let _ = tx.send(a.parse::<SocketAddr>().unwrap());
            }
            log2.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let stderr = || log.lock().unwrap().clone();
    let addr = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("no metrics address logged:\n{}", stderr()));

    // Listening before the pipeline is built: alive, not ready (its source waits for data).
    assert_eq!(get(addr, "/healthz"), Some((200, "ok\n".into())));
    assert_eq!(get(addr, "/readyz"), Some((503, "not ready: building the pipeline (opening sources, loading models)\n".into())));

    let prom = Prometheus::start(dir.path(), addr, None);

    // Half the clip; the FIFO stays open.
    let (written_tx, written) = mpsc::channel();
    let (rest_tx, rest) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let half = clip.len() / 2;
        input.write_all(&clip[..half]).unwrap();
        written_tx.send(()).unwrap();
        if rest.recv().is_ok() {
            input.write_all(&clip[half..]).unwrap();
        }
        // Dropping `input` closes the FIFO: end of file.
    });
    written.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| panic!("the pipeline does not read its input:\n{}", stderr()));

    // Wait until every decoded frame is settled and nothing moves for a while.
    let series = |name: &str| format!("{name}{{pipeline=\"metrics\"}}");
    let det = "infer_stream_node_frames_out_total{pipeline=\"metrics\",node=\"det\",kind=\"infer\"}";
    let t0 = Instant::now();
    let (mut last, mut still, mut scrape) = (None, 0, String::new());
    while still < 4 {
        assert!(t0.elapsed() < Duration::from_secs(120), "the pipeline never settled; last scrape:\n{scrape}\n{}", stderr());
        std::thread::sleep(Duration::from_millis(400));
        let (status, body) = get(addr, "/metrics").unwrap_or_else(|| panic!("/metrics does not answer:\n{}", stderr()));
        assert_eq!(status, 200, "{body}");
        let n = |name: &str| sample(&body, &series(name)).unwrap_or_else(|| panic!("no {name} in\n{body}"));
        let now = (n("infer_stream_frames_decoded_total"), n("infer_stream_frames_processed_total"), sample(&body, det));
        let settled = now.0 > 0.0 && now.0 == now.1 && now.2 == Some(now.1);
        still = if settled && Some(now) == last { still + 1 } else { 0 };
        last = Some(now);
        scrape = body;
    }
    let (decoded, processed, _) = last.unwrap();
    assert!(processed > 0.0 && processed < 300.0, "half the clip: {processed} frames");
    for (line, want) in [
        (det.to_string(), processed),
        ("infer_stream_node_frames_in_total{pipeline=\"metrics\",node=\"det\",kind=\"infer\"}".into(), processed),
        ("infer_stream_node_latency_seconds_count{pipeline=\"metrics\",node=\"det\",kind=\"infer\"}".into(), processed),
        ("infer_stream_node_latency_seconds_bucket{pipeline=\"metrics\",node=\"det\",kind=\"infer\",le=\"+Inf\"}".into(), processed),
        ("infer_stream_node_frames_out_total{pipeline=\"metrics\",node=\"cam\",kind=\"file\"}".into(), decoded),
        ("infer_stream_node_frames_out_total{pipeline=\"metrics\",node=\"results\",kind=\"ndjson\"}".into(), processed),
        ("infer_stream_sink_end_to_end_latency_seconds_count{pipeline=\"metrics\",node=\"results\",kind=\"ndjson\"}".into(), processed),
        ("infer_stream_node_queue_depth{pipeline=\"metrics\",node=\"det\",kind=\"infer\"}".into(), 0.0),
        ("infer_stream_node_queue_capacity{pipeline=\"metrics\",node=\"det\",kind=\"infer\"}".into(), 8.0),
        ("infer_stream_frames_dropped_total{pipeline=\"metrics\"}".into(), 0.0),
        ("infer_stream_frames_failed_total{pipeline=\"metrics\"}".into(), 0.0),
        ("infer_stream_execution_provider_info{pipeline=\"metrics\",node=\"det\",provider=\"cpu\"}".into(), 1.0),
    ] {
        assert_eq!(sample(&scrape, &line), Some(want), "{line} in\n{scrape}");
    }
    assert_eq!(get(addr, "/readyz"), Some((200, "ready\n".into())), "the source has produced frames");

    // Prometheus scraped the same numbers.
    wait_for(&prom, "infer_stream_node_frames_out_total{job=\"infer-stream\",pipeline=\"metrics\",node=\"det\"}", processed);
    for (q, want) in [
        ("up{job=\"infer-stream\"}", 1.0),
        ("infer_stream_frames_decoded_total{pipeline=\"metrics\"}", decoded),
        ("infer_stream_frames_processed_total{pipeline=\"metrics\"}", processed),
        ("infer_stream_node_latency_seconds_count{node=\"det\"}", processed),
        ("infer_stream_execution_provider_info{node=\"det\",provider=\"cpu\"}", 1.0),
        ("infer_stream_build_info", 1.0),
    ] {
        // Still the same scrape maybe: one taken as `det` emitted its last frame, before the sink wrote it.
        wait_for(&prom, q, want);
    }
    let p50 = query(&prom, "histogram_quantile(0.5, infer_stream_node_latency_seconds_bucket{node=\"det\"})").unwrap();
    assert!(p50 > 0.0 && p50 < 10.0, "det p50 {p50} s");

    // The rest of the clip, then end of file: the run ends and the port closes.
    rest_tx.send(()).unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(180), "the run did not end:\n{}", stderr());
        std::thread::sleep(Duration::from_millis(100));
    };
    // The stderr thread may still be copying the last lines.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(status.code(), Some(0), "{}", stderr());
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(), "the metrics port closed with the run");

    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let node = |name: &str| r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap().clone();
    let final_det = node("det")["frames_out"].as_f64().unwrap();
    assert_eq!(final_det, truth("eval-720p.truth.json").frames as f64, "every frame through det");
    assert_eq!(r["frames"]["processed"].as_f64(), Some(final_det));
    // What Prometheus last saw is between the still point and the summary.
    let seen = query(&prom, "max_over_time(infer_stream_node_frames_out_total{node=\"det\"}[10m])").unwrap();
    assert!(processed <= seen && seen <= final_det, "Prometheus saw {seen}; still at {processed}, summary {final_det}");
}

/// `[pipeline] metrics_addr` from the file; `--metrics-addr` wins; a busy port stops the run before it starts.
#[test]
fn metrics_addr_from_the_file_or_the_command_line() {
    require_assets();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let run = |env_addr: &str, cli: Option<&str>| {
        let mut c = bin();
        c.args(["run", "tests/data/metrics-addr.toml", "--progress", "never"]).env("INFER_STREAM_TEST_METRICS_ADDR", env_addr);
        if let Some(a) = cli {
            c.args(["--metrics-addr", a]);
        }
        let o = c.output().unwrap();
        (o.status.code(), stderr(&o))
    };

    // Busy port from the file: a located error, exit 2, nothing ran.
    let (code, err) = run(&busy, None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("error: cannot listen on {busy}: Address already in use")), "{err}");
    assert!(err.contains("  --> tests/data/metrics-addr.toml:3:16\n"), "{err}");
    assert!(err.contains("= help: another process listens on this port: stop it or choose another port"), "{err}");
    assert!(!err.contains("frames: decoded"), "{err}");

    // Busy port from the command line.
    let (code, err) = run("127.0.0.1:0", Some(&busy));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("error: --metrics-addr: cannot listen on {busy}: Address already in use")), "{err}");

    // The command line wins over a busy port in the file.
    let (code, err) = run(&busy, Some("127.0.0.1:0"));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("metrics on http://127.0.0.1:"), "{err}");
    assert_eq!(accounting(&err), (3, 3, 0, 0));

    // A bad address in the file is a located config error.
    let (code, err) = run("localhost:9464", None);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("error: invalid `metrics_addr` `localhost:9464`: expected PORT or IP:PORT\n  --> tests/data/metrics-addr.toml:3:16\n"),
        "{err}"
    );

    // And on the command line, a usage error.
    let o = bin().args(["run", "tests/data/metrics-addr.toml", "--metrics-addr", "localhost"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("invalid value 'localhost' for '--metrics-addr <[IP:]PORT>'"), "{}", stderr(&o));
}
