//! `infer-stream serve` with real clients: curl against the REST API and its
//! live results, a real RTSP camera (tests/support/rtsp_server.py) whose
//! streams are added and removed while others run, TLS with certificates made
//! here by openssl, tokens and roles, and schemathesis against the served
//! OpenAPI document.

mod util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::certs::certificates;
use util::root;
use util::serve::{Camera, Serve, add, curl, free_port, get, json_of, ndjson, resources, serial, stream_status, wait_for};

const CAMERAS: &str = r#"
[pipeline]
name = "cameras"

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri", "required"]
uri = "rtsp://127.0.0.1:18590/cam"
wait_at_start = true

[sinks.out]
kind = "ndjson"
inputs = ["cams"]
path = "{dir}/out/{stream}.ndjson"
"#;

#[test]
fn cameras_added_and_removed_fifty_times_while_two_others_run() {
    let _g = serial();
    let _cam = Camera::start(18590);
    let s = Serve::start(CAMERAS, &[]);
    let (code, body) = curl(&s.url("/v1/streams"), &[]);
    assert_eq!((code, json_of(&body)), (200, json!({ "streams": [] })));
    for id in ["steady-1", "steady-2"] {
        let (code, st) = add(&s, json!({ "source": "cams", "id": id }));
        assert_eq!(code, 201, "{st}");
        assert_eq!(st["state"], "starting");
    }
    wait_for("both steady streams running", Duration::from_secs(20), || {
        ["steady-1", "steady-2"].iter().all(|id| stream_status(s.port, id)["state"] == "running")
    });
    // Watch the steady streams' frame counts while the churn goes on: the longest time either went without a new frame.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, port) = (stop.clone(), s.port);
        std::thread::spawn(move || {
            let mut last = [(0u64, Instant::now()); 2];
            let mut worst = [Duration::ZERO; 2];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, id) in ["steady-1", "steady-2"].iter().enumerate() {
                    let frames = stream_status(port, id)["frames"].as_u64().unwrap();
                    if frames > last[i].0 {
                        last[i] = (frames, Instant::now());
                    }
                    worst[i] = worst[i].max(last[i].1.elapsed());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (worst, [last[0].0, last[1].0])
        })
    };
    let cycle = |i: usize| {
        let id = format!("churn-{i}");
        let (code, st) = add(&s, json!({ "source": "cams", "id": id, "uri": "rtsp://viewer:s3cret-pass@127.0.0.1:18590/cam" }));
        assert_eq!(code, 201, "{st}");
        assert_eq!(st["uri"], "rtsp://viewer:***@127.0.0.1:18590/cam");
        wait_for(&format!("{id} delivering"), Duration::from_secs(20), || stream_status(s.port, &id)["frames"].as_u64().unwrap() >= 3);
        let (code, body) = curl(&s.url(&format!("/v1/streams/{id}")), &["-X", "DELETE"]);
        assert_eq!(code, 200, "{body}");
        let last = json_of(&body);
        assert_eq!(last["state"], "ended", "{last}");
        assert_eq!(last["complete"], true, "{last}");
        // Its output is whole and closed: every frame it delivered that was not dropped, in order, one stream.
        let lines = ndjson(&s.path(&format!("out/{id}.ndjson")));
        let expected = last["frames"].as_u64().unwrap() - last["drops"].as_u64().unwrap() - last["failures"].as_u64().unwrap();
        assert_eq!(lines.len() as u64, expected, "{id}: {last}");
        assert!(lines.iter().all(|l| l["stream"] == id.as_str()));
        let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{id}: frames out of order: {seqs:?}");
        let (code, _) = get(s.port, &format!("/v1/streams/{id}"));
        assert_eq!(code, 404, "a removed stream is forgotten");
    };
    // A few rounds first: thread pools, allocator arenas and buffers reach their working size.
    for i in 0..5 {
        cycle(i);
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = resources(s.pid());
    let started = Instant::now();
    for i in 5..55 {
        cycle(i);
        if i % 10 == 4 {
            eprintln!("after {} cycles: {:?}", i - 4, resources(s.pid()));
        }
    }
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let after = resources(s.pid());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (worst, frames) = watcher.join().unwrap();
    eprintln!(
        "50 add/remove cycles in {took:?}; steady streams' longest gaps {worst:?} ({frames:?} frames); before {before:?} after {after:?}"
    );
    for (i, w) in worst.iter().enumerate() {
        assert!(*w < Duration::from_secs(1), "steady-{} went {w:?} without a frame during the churn", i + 1);
    }
    assert_eq!(after.0, before.0, "threads (before, after)");
    let within = |a: f64, b: f64| (a - b).abs() <= 0.05 * b.max(1.0) + 1.0;
    assert!(within(after.1 as f64, before.1 as f64), "file descriptors: {} before, {} after", before.1, after.1);
    assert!(within(after.2 as f64, before.2 as f64), "RSS: {} KiB before, {} KiB after", before.2, after.2);
    // The steady streams never noticed: still running, and their files whole so far.
    for id in ["steady-1", "steady-2"] {
        let st = stream_status(s.port, id);
        assert_eq!(st["state"], "running", "{st}");
        assert_eq!(st["gaps"], 0, "{st}");
    }
    assert!(!s.log().contains("s3cret-pass"), "a password in the log:\n{}", s.log());
}

#[test]
fn bad_requests_get_4xx_with_what_to_fix_and_disturb_nothing() {
    let _g = serial();
    let _cam = Camera::start(18591);
    let mut s = Serve::start(&CAMERAS.replace("18590", "18591"), &[]);
    let (code, st) = add(&s, json!({ "source": "cams", "id": "door" }));
    assert_eq!(code, 201, "{st}");
    wait_for("door running", Duration::from_secs(20), || stream_status(s.port, "door")["state"] == "running");
    let cases = [
        (json!({ "source": "nope", "id": "x" }), 422, "no source template `nope`; templates: cams"),
        (json!({ "source": "cams", "id": "door" }), 409, "a stream `door` exists already"),
        (
            json!({ "source": "cams", "id": "x", "watchdog_ms": 1 }),
            422,
            "does not let an added stream set `watchdog_ms`; it may set: uri, required",
        ),
        (json!({ "source": "cams", "id": "x", "uri": "http://127.0.0.1/cam" }), 422, "is not an RTSP address"),
        (json!({ "source": "cams", "id": "x", "uri": "rtsp:///cam" }), 422, "names no host"),
        (json!({ "source": "cams", "id": "x", "uri": "rtsp://${HOME}/cam" }), 422, "is not expanded"),
        (json!({ "source": "cams", "id": "x", "required": "yes" }), 422, "expected a boolean"),
        (json!({ "source": "cams", "id": "../x" }), 422, "may hold only letters"),
        (json!({ "source": "cams" }), 422, "`id` (a string) is needed"),
        (json!(["cams"]), 400, "must be a JSON object"),
    ];
    for (body, want, says) in cases {
        let (code, e) = add(&s, body.clone());
        assert_eq!(code, want, "{body} → {e}");
        assert_eq!(e["status"], want);
        assert!(e["error"].as_str().unwrap().contains(says), "{body} → {e}");
    }
    let (code, body) = curl(&s.url("/v1/streams"), &["-X", "POST", "-d", "{not json"]);
    assert_eq!(code, 400, "{body}");
    let big = format!("{{\"source\":\"cams\",\"id\":\"x\",\"uri\":\"{}\"}}", "a".repeat(2 << 20));
    let big_file = s.path("big.json");
    std::fs::write(&big_file, big).unwrap();
    let (code, _) = curl(&s.url("/v1/streams"), &["-X", "POST", "--data-binary", &format!("@{}", big_file.display())]);
    assert_eq!(code, 413);
    let (code, e) = curl(&s.url("/v1/streams/nope"), &["-X", "DELETE"]);
    assert_eq!(code, 404, "{e}");
    let (code, e) = curl(&s.url("/v1/nothing"), &[]);
    assert_eq!((code, json_of(&e)["status"].as_u64()), (404, Some(404)));
    // Nothing was disturbed: the one stream runs, nothing else was added.
    let (_, body) = curl(&s.url("/v1/streams"), &[]);
    let all = json_of(&body);
    assert_eq!(all["streams"].as_array().unwrap().len(), 1, "{all}");
    let before = stream_status(s.port, "door")["frames"].as_u64().unwrap();
    wait_for("door still delivering", Duration::from_secs(5), || stream_status(s.port, "door")["frames"].as_u64().unwrap() > before + 5);
    // The pipeline view: graph, counters, templates, readiness.
    let (code, body) = curl(&s.url("/v1/pipeline"), &[]);
    assert_eq!(code, 200);
    let p = json_of(&body);
    assert_eq!(p["nodes"][1]["inputs"], json!(["cams"]), "{p}");
    assert_eq!(p["templates"][0]["allow"], json!(["uri", "required"]));
    assert!(p["nodes"][1]["frames_in"].as_u64().unwrap() > 0);
    assert_eq!(p["ready"], true);
    let (code, _) = curl(&s.url("/readyz"), &[]);
    assert_eq!(code, 200);
    // A required camera that is down holds readiness back; one not required does not.
    let (code, _) = add(&s, json!({ "source": "cams", "id": "gone", "uri": "rtsp://127.0.0.1:9/cam", "required": false }));
    assert_eq!(code, 201);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(curl(&s.url("/readyz"), &[]).0, 200);
    let (code, _) = add(&s, json!({ "source": "cams", "id": "gone-required", "uri": "rtsp://127.0.0.1:9/cam" }));
    assert_eq!(code, 201);
    wait_for("not ready", Duration::from_secs(5), || curl(&s.url("/readyz"), &[]).0 == 503);
    let (_, why) = curl(&s.url("/readyz"), &[]);
    assert!(why.contains("gone-required"), "{why}");
    let (code, _) = curl(&s.url("/v1/streams/gone-required"), &["-X", "DELETE"]);
    assert_eq!(code, 200);
    assert_eq!(curl(&s.url("/readyz"), &[]).0, 200);
    let (code, body) = curl(&s.url("/metrics"), &[]);
    assert_eq!(code, 200);
    assert!(body.contains("stream=\"door\""), "per-stream metric labels for an added stream:\n{body}");
    // SIGTERM drains and exits as `run` does.
    assert_eq!(s.stop(), Some(143), "{}", s.log());
    assert!(s.log().contains("all accounted for"), "{}", s.log());
}

#[test]
fn live_results_by_stream_and_a_subscriber_that_reads_nothing() {
    let _g = serial();
    let pipeline = r#"
[pipeline]
api = { results_buffer = 32 }

[sources.clips]
kind = "file"
dynamic = true
allow = ["uri"]
uri = "{dir}/clip.mp4"
restart = "always"
restart_backoff_ms = 0

[sinks.out]
kind = "ndjson"
inputs = ["clips"]
path = "{dir}/out/{stream}.ndjson"
"#;
    // A small clip decoded as fast as it goes, played again and again: many results a second.
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=30", "-t", "20", "-c:v", "libx264", "-preset", "ultrafast"])
        .args(["-pix_fmt", "yuv420p", "-g", "30"])
        .arg(dir.path().join("clip.mp4"))
        .status()
        .unwrap();
    assert!(made.success());
    let s = Serve::start_in(dir, pipeline, &[]);
    for id in ["fast", "other"] {
        let (code, st) = add(&s, json!({ "source": "clips", "id": id }));
        assert_eq!(code, 201, "{st}");
    }
    // curl reads the live results of one stream.
    let o = Command::new("curl").args(["-s", "-N", "--max-time", "3", &s.url("/v1/results?stream=fast")]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let frames: Vec<Value> =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).map(json_of).filter(|v| v.get("seq").is_some()).collect();
    assert!(frames.len() > 10, "few results in 3 s:\n{text}");
    assert!(frames.iter().all(|f| f["stream"] == "fast"), "results of another stream:\n{text}");
    assert!(text.contains("event: frame"), "{text}");
    // A subscriber that reads nothing for a while: the pipeline goes on, and its drops are told to it.
    let mut slow = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    write!(slow, "GET /v1/results?stream=fast HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let before = stream_status(s.port, "fast")["frames"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let during = stream_status(s.port, "fast")["frames"].as_u64().unwrap();
    assert!(during > before + 100, "the pipeline slowed with a subscriber reading nothing: {before} → {during} frames");
    // Stop publishing, then read everything this subscriber was sent.
    let (code, _) = curl(&s.url("/v1/streams/fast"), &["-X", "DELETE"]);
    assert_eq!(code, 200);
    let (_, body) = curl(&s.url("/v1/pipeline"), &[]);
    let view = json_of(&body);
    slow.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    while let Ok(n @ 1..) = slow.read(&mut chunk) {
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let mut items = 0u64;
    let mut dropped = Vec::new();
    let mut event = "";
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("event: ") {
            event = e;
        } else if let Some(d) = line.strip_prefix("data: ") {
            match event {
                "dropped" => dropped.push(json_of(d)),
                _ => items += 1,
            }
        }
    }
    let told: u64 = dropped.iter().map(|d| d["dropped"].as_u64().unwrap()).sum();
    assert!(told > 0, "no drops told to a subscriber that read nothing for 6 s");
    assert_eq!(dropped.last().unwrap()["total"].as_u64().unwrap(), told, "{dropped:?}");
    let subs = view["results"]["subscribers"].as_array().unwrap();
    assert_eq!(subs.len(), 1, "only the slow subscriber is left: {view}");
    assert_eq!(subs[0]["streams"], json!(["fast"]));
    assert_eq!(subs[0]["dropped"].as_u64().unwrap(), told, "the drops told are the drops made: {}", subs[0]);
    let offered = subs[0]["offered"].as_u64().unwrap();
    assert_eq!(items + told, offered, "every item meant for it either delivered or told as dropped ({items} delivered, {told} dropped)");
    let other = stream_status(s.port, "other");
    assert_eq!(other["state"], "running", "{other}");
}

const VIEWER: &str = "viewer-token-0123456789";
const OPERATOR: &str = "operator-token-0123456789";
const ADMIN: &str = "admin-token-0123456789abc";

#[test]
fn tls_tokens_and_roles_on_every_endpoint() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    std::fs::write(dir.path().join("tokens.txt"), format!("# role token\nviewer {VIEWER}\noperator {OPERATOR}\n")).unwrap();
    let pipeline = r#"
[pipeline]
api = { tls = { cert = "{dir}/server.crt", key = "{dir}/server.key" }, tokens_file = "{dir}/tokens.txt", tokens = [{ role = "admin", token = "${SERVE_TEST_ADMIN}" }] }

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri", "required"]
uri = "rtsp://127.0.0.1:9/cam"
wait_at_start = true

[sinks.out]
kind = "ndjson"
inputs = ["cams"]
path = "{dir}/out/{stream}.ndjson"
"#;
    // SAFETY of the environment: set before the child starts, read by the child only.
    let s = {
        let port_dir = dir;
        let text = pipeline.to_string();
        let port = free_port();
        let file = port_dir.path().join("serve.toml");
        std::fs::write(&file, text.replace("{dir}", &port_dir.path().to_string_lossy())).unwrap();
        let log = std::fs::File::create(port_dir.path().join("serve.log")).unwrap();
        let child = util::bin()
            .args(["serve", &file.to_string_lossy(), "--listen", &format!("127.0.0.1:{port}")])
            .env("SERVE_TEST_ADMIN", ADMIN)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let s = Serve { dir: port_dir, port, child: Some(child), scheme: "https" };
        wait_for("serve listening", Duration::from_secs(30), || TcpStream::connect(("127.0.0.1", port)).is_ok());
        s
    };
    let ca = s.path("ca.crt").to_string_lossy().into_owned();
    let call = |method: &str, path: &str, token: Option<&str>, body: Option<&str>| {
        let mut args = vec!["--cacert".to_string(), ca.clone(), "-X".into(), method.into()];
        if let Some(t) = token {
            args.extend(["-H".into(), format!("Authorization: Bearer {t}")]);
        }
        if let Some(b) = body {
            args.extend(["-d".into(), b.into()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&s.url(path), &refs)
    };
    let add_body = r#"{"source":"cams","id":"cam-1","uri":"rtsp://admin:hunter2-secret@127.0.0.1:9/cam","required":false}"#;
    // (method, path, body, the role it needs; None: open)
    let routes: [(&str, &str, Option<&str>, Option<&str>); 9] = [
        ("GET", "/healthz", None, None),
        ("GET", "/readyz", None, Some("viewer")),
        ("GET", "/metrics", None, Some("viewer")),
        ("GET", "/v1/pipeline", None, Some("viewer")),
        ("GET", "/v1/openapi.json", None, Some("viewer")),
        ("GET", "/v1/streams", None, Some("viewer")),
        ("GET", "/v1/streams/cam-1", None, Some("viewer")),
        ("POST", "/v1/streams", Some(add_body), Some("operator")),
        ("DELETE", "/v1/streams/cam-1", None, Some("operator")),
    ];
    for (method, path, body, need) in routes {
        for (token, role) in
            [(None, None), (Some("not-a-valid-token-at-all"), None), (Some(VIEWER), Some("viewer")), (Some(OPERATOR), Some("operator"))]
        {
            let (code, text) = call(method, path, token, body);
            let want_denied = match (need, role) {
                (None, _) => None,
                (Some(_), None) => Some(401),
                (Some("operator"), Some("viewer")) => Some(403),
                _ => None,
            };
            match want_denied {
                Some(w) => {
                    assert_eq!(code, w, "{method} {path} with {token:?}: {text}");
                    assert_eq!(json_of(&text)["status"], w);
                }
                // Allowed: anything but an auth refusal (a GET of cam-1 before it exists is a 404).
                None => assert!(![401, 403].contains(&code) && code != 0, "{method} {path} with {token:?}: {code} {text}"),
            }
            assert!(!text.contains("hunter2-secret"), "a password in a response to {method} {path}: {text}");
        }
    }
    // The admin token (from the environment) may do everything.
    let (code, st) = call("POST", "/v1/streams", Some(ADMIN), Some(add_body));
    assert_eq!(code, 201, "{st}");
    assert_eq!(json_of(&st)["uri"], "rtsp://admin:***@127.0.0.1:9/cam");
    std::thread::sleep(Duration::from_millis(1500));
    for path in ["/v1/streams", "/v1/streams/cam-1", "/v1/pipeline", "/metrics", "/readyz?verbose"] {
        let (code, text) = call("GET", path, Some(ADMIN), None);
        assert_eq!(code, 200, "{path}: {text}");
        assert!(!text.contains("hunter2-secret"), "a password in {path}: {text}");
    }
    // Plain HTTP to the TLS listener fails cleanly, and the server goes on serving.
    let (code, _) = curl(&format!("http://127.0.0.1:{}/healthz", s.port), &[]);
    assert_ne!(code, 200);
    assert_eq!(call("GET", "/healthz", None, None).0, 200);
    // An unknown CA is refused by the client: the certificate really is the one made here.
    assert_eq!(curl(&s.url("/healthz"), &[]).0, 0);
    let log = s.log();
    assert!(!log.contains("hunter2-secret") && !log.contains(ADMIN) && !log.contains(OPERATOR), "a secret in the log:\n{log}");
}

#[test]
fn client_certificates_are_required_with_a_client_ca() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let pipeline = r#"
[pipeline]
api = { tls = { cert = "{dir}/server.crt", key = "{dir}/server.key", client_ca = "{dir}/ca.crt" } }

[sources.cams]
kind = "rtsp"
dynamic = true
uri = "rtsp://127.0.0.1:9/cam"

[sinks.out]
kind = "null"
inputs = ["cams"]
"#;
    let s = Serve::start_in(dir, pipeline, &[]);
    let ca = s.path("ca.crt").to_string_lossy().into_owned();
    let (cert, key) = (s.path("client.crt").to_string_lossy().into_owned(), s.path("client.key").to_string_lossy().into_owned());
    assert_eq!(curl(&s.url("/v1/streams"), &["--cacert", &ca]).0, 0, "no client certificate: the handshake fails");
    let (code, body) = curl(&s.url("/v1/streams"), &["--cacert", &ca, "--cert", &cert, "--key", &key]);
    assert_eq!((code, json_of(&body)), (200, json!({ "streams": [] })));
    // gRPC and HTTP/2 are offered on the same port.
    let (code, _) = curl(&s.url("/healthz"), &["--http2", "--cacert", &ca, "--cert", &cert, "--key", &key, "-o", "/dev/null"]);
    assert_eq!(code, 200);
}

#[test]
fn schemathesis_finds_no_server_error_and_no_response_off_the_schema() {
    let _g = serial();
    let st = root().join(".deps/schemathesis-venv/bin/st");
    assert!(st.exists(), "{} is missing: run scripts/fetch-schemathesis.sh (scripts/setup.sh does)", st.display());
    let pipeline = r#"
[pipeline]
api = { tokens = [{ role = "admin", token = "schemathesis-admin-token" }] }

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri", "required"]
uri = "rtsp://127.0.0.1:9/cam"
wait_at_start = true

[sinks.out]
kind = "ndjson"
inputs = ["cams"]
path = "{dir}/out/{stream}.ndjson"
"#;
    let s = Serve::start(pipeline, &[]);
    let o = Command::new(&st)
        .args(["run", &s.url("/v1/openapi.json")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance",
        ])
        .args(["--header", "Authorization: Bearer schemathesis-admin-token"])
        .args(["--exclude-path", "/v1/results", "--exclude-path", "/v1/live/streams", "--exclude-path", "/v1/streams/{id}/live.mjpeg"])
        .args(["--max-examples", "25", "--request-timeout", "15", "--seed", "1"])
        .env("NO_COLOR", "1")
        // Its cache (`.schemathesis/`) goes in the test's folder, not the checkout.
        .current_dir(s.dir.path())
        .output()
        .expect("run schemathesis");
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "schemathesis found problems:\n{out}");
    assert!(out.contains("passed"), "{out}");
    assert!(!out.contains("No operations"), "{out}");
}

/// The value of a `/metrics` sample, by its name and labels as they are written.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn an_added_cameras_outage_and_reconnect_are_in_metrics() {
    let _g = serial();
    let pipeline = r#"
[pipeline]
name = "cameras"

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri"]
uri = "rtsp://127.0.0.1:18592/cam"
watchdog_ms = 1000
connect_timeout_ms = 1000
backoff_initial_ms = 100
backoff_max_ms = 300

[sinks.out]
kind = "ndjson"
inputs = ["cams"]
path = "{dir}/out/{stream}.ndjson"
"#;
    let cam = Camera::start(18592);
    let s = Serve::start(pipeline, &[]);
    let (code, st) = add(&s, json!({ "source": "cams", "id": "porch", "uri": "rtsp://viewer:s3cret-pass@127.0.0.1:18592/cam" }));
    assert_eq!(code, 201, "{st}");
    wait_for("porch running", Duration::from_secs(20), || stream_status(s.port, "porch")["state"] == "running");
    let lost = "infer_stream_stream_lost_total{pipeline=\"cameras\",stream=\"porch\"}";
    let back = "infer_stream_stream_reconnects_total{pipeline=\"cameras\",stream=\"porch\"}";
    let scrape = || {
        let (code, body) = get(s.port, "/metrics");
        assert_eq!(code, 200, "{body}");
        body
    };
    let m = scrape();
    assert_eq!((metric(&m, lost), metric(&m, back)), (Some(0.0), Some(0.0)), "an added stream's series, before any outage:\n{m}");
    // The camera goes away, then comes back on the same port.
    drop(cam);
    wait_for("porch lost", Duration::from_secs(10), || metric(&scrape(), lost).is_some_and(|v| v >= 1.0));
    let down = stream_status(s.port, "porch");
    assert!(down["state"] == "lost" || down["state"] == "reconnecting", "{down}");
    let _cam = Camera::start(18592);
    wait_for("porch reconnected", Duration::from_secs(20), || metric(&scrape(), back).is_some_and(|v| v >= 1.0));
    wait_for("porch running again", Duration::from_secs(10), || stream_status(s.port, "porch")["state"] == "running");
    let m = scrape();
    let st = stream_status(s.port, "porch");
    assert_eq!(metric(&m, lost), Some(st["gaps"].as_f64().unwrap()), "/metrics and the stream's status agree: {st}\n{m}");
    assert!(metric(&m, back).unwrap() >= 1.0, "{m}");
    assert!(!m.contains("s3cret-pass"), "a password in /metrics:\n{m}");
    // Removed, the stream's series go with it.
    let (code, _) = curl(&s.url("/v1/streams/porch"), &["-X", "DELETE"]);
    assert_eq!(code, 200);
    assert_eq!(metric(&scrape(), lost), None, "a removed stream's series are gone");
}

#[test]
fn a_source_of_the_file_that_fails_shows_failed_and_a_clean_end_shows_ended() {
    let _g = serial();
    let pipeline = r#"
[pipeline]
name = "files"

[sources.broken]
kind = "file"
uri = "{root}/samples/truncated.mp4"

[sources.good]
kind = "file"
uri = "{root}/samples/text-720p.mp4"

[sinks.out]
kind = "ndjson"
inputs = ["broken", "good"]
path = "{dir}/out/{stream}.ndjson"
"#;
    let s = Serve::start(pipeline, &[]);
    wait_for("both sources done", Duration::from_secs(60), || {
        ["broken", "good"].iter().all(|id| !matches!(stream_status(s.port, id)["state"].as_str(), Some("starting" | "running")))
    });
    let broken = stream_status(s.port, "broken");
    assert_eq!(broken["state"], "failed", "{broken}");
    assert_eq!(broken["dynamic"], false, "{broken}");
    let why = broken["last_error"].as_str().unwrap_or_else(|| panic!("a failed source says why: {broken}"));
    assert!(why.contains("truncated"), "{broken}");
    assert!(broken["frames"].as_u64().unwrap() > 0, "it decoded the frames before the cut: {broken}");
    let good = stream_status(s.port, "good");
    assert_eq!(good["state"], "ended", "{good}");
    assert_eq!(good["last_error"], Value::Null, "{good}");
    // The list says the same.
    let (_, body) = curl(&s.url("/v1/streams"), &[]);
    let all = json_of(&body);
    let states: Vec<(&str, &str)> =
        all["streams"].as_array().unwrap().iter().map(|v| (v["id"].as_str().unwrap(), v["state"].as_str().unwrap())).collect();
    assert_eq!(states, [("broken", "failed"), ("good", "ended")], "{all}");
    // A required source that failed holds readiness back, and is named.
    let (code, why) = curl(&s.url("/readyz"), &[]);
    assert_eq!(code, 503, "{why}");
    assert!(why.contains("source `broken` failed") && why.contains("truncated"), "{why}");
}

/// A client process, killed if the test fails before it is waited for.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_grpc_results_client_that_reads_nothing_is_told_what_it_missed() {
    let _g = serial();
    let python = root().join(".deps/grpc-venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/fetch-grpc-client.sh (scripts/setup.sh does)", python.display());
    let pipeline = r#"
[pipeline]
api = { results_buffer = 16 }

[sources.clips]
kind = "file"
dynamic = true
uri = "{dir}/clip.mp4"

# Every frame reaches the sink (an added stream is live: its queues would drop).
[sinks.out]
kind = "ndjson"
inputs = ["clips"]
queue = { when_full = "block" }
path = "{dir}/out/{stream}.ndjson"
"#;
    // 4500 small frames decoded as fast as they go: far more results than the
    // client's buffer (16) and the HTTP/2 windows and buffers hold.
    const FRAMES: u64 = 4500;
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", "testsrc=size=96x64:rate=30", "-frames:v", &FRAMES.to_string()])
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", "30"])
        .arg(dir.path().join("clip.mp4"))
        .status()
        .unwrap();
    assert!(made.success());
    let s = Serve::start_in(dir, pipeline, &[]);
    let go = s.path("read-now");
    let addr = format!("127.0.0.1:{}", s.port);
    let mut client = KillOnDrop(Some(
        Command::new(&python)
            .arg(root().join("tests/support/grpc_client.py"))
            .args([&addr, "results", "--stream", "burst", "--count", "1000000", "--silent-until"])
            .arg(&go)
            .args(["--then-ms", "3000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let subscribers = || json_of(&curl(&s.url("/v1/pipeline"), &[]).1)["results"]["subscribers"].as_array().unwrap().len();
    wait_for("the gRPC client subscribed", Duration::from_secs(30), || subscribers() == 1);
    let (code, st) = add(&s, json!({ "source": "clips", "id": "burst" }));
    assert_eq!(code, 201, "{st}");
    wait_for("the burst stream ended and flushed", Duration::from_secs(120), || {
        let st = stream_status(s.port, "burst");
        st["state"] == "ended" && st["complete"] == true
    });
    // Every frame went through as if nobody were subscribed.
    let st = stream_status(s.port, "burst");
    assert_eq!((st["frames"].as_u64(), st["drops"].as_u64(), st["failures"].as_u64()), (Some(FRAMES), Some(0), Some(0)), "{st}");
    assert_eq!(ndjson(&s.path("out/burst.ndjson")).len() as u64, FRAMES);
    let view = json_of(&curl(&s.url("/v1/pipeline"), &[]).1);
    let sub = view["results"]["subscribers"][0].clone();
    assert_eq!(sub["streams"], json!(["burst"]), "{view}");
    let (offered, dropped) = (sub["offered"].as_u64().unwrap(), sub["dropped"].as_u64().unwrap());
    assert!(offered >= FRAMES, "every frame was meant for the client: {sub}");
    // Now the client reads what is left for it.
    std::fs::write(&go, "").unwrap();
    let out = client.0.take().unwrap().wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "grpc client: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout.lines().map(json_of).collect();
    let (last, messages) = lines.split_last().expect("the client printed something");
    assert_eq!(last["error"], "CANCELLED", "the client read until it cancelled: {last}");
    let received = messages.len() as u64;
    let told: u64 = messages.iter().map(|m| m["dropped"].as_u64().unwrap()).sum();
    eprintln!("offered {offered}, received {received}, told dropped {told}, the hub's count {dropped}");
    assert!(told > 0, "a client that read nothing while {offered} results went by was told of no drop");
    assert_eq!(told, offered - received, "drops told = messages meant for it − messages it got");
    assert_eq!(told, dropped, "the drops told are the hub's: {sub}");
    assert!(received < offered / 2, "buffers on the way held at most half the burst: {received} of {offered} received");
    assert!(messages.iter().all(|m| m["stream"] == "burst"), "{stdout}");
    // The frames it got are in order; a `dropped` comes on the first message after a gap.
    let seqs: Vec<u64> = messages.iter().filter(|m| m["kind"] == "frame").map(|m| m["json"]["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(seqs.last(), Some(&(FRAMES - 1)), "the newest results are the ones kept");
}
