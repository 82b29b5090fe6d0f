//! Request/response inference against the real server: `infer-stream serve`
//! with a `kind = "request"` source and PP-OCRv4 det, driven by curl and by
//! the Python gRPC client (stubs generated from proto/ at test time). The
//! reference is `infer-stream run` on the same pictures through the same
//! stages (an `image_sequence` source).

mod util;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use util::{bin, require_assets, root};

const OPERATOR: &str = "operator-token-0123456789";
const VIEWER: &str = "viewer-token-0123456789ab";

/// The stages of pipelines/serve-infer.toml behind `source`, into `sink`.
fn pipeline(api: &str, sources: &str, sink: &str) -> String {
    let text = std::fs::read_to_string(root().join("pipelines/serve-infer.toml")).unwrap();
    let stages = &text[text.find("[stages.pre]").unwrap()..text.find("# Requests are answered").unwrap()];
    let stages = stages.replace("../models/", &format!("{}/models/", root().display()));
    format!("[pipeline]\nname = \"serve-infer-test\"\n{api}\n\n{sources}\n\n{stages}\n{sink}\n")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A served pipeline, stopped (SIGTERM) when dropped.
struct Served {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Served {
    fn start(dir: &Path, toml: &str) -> Served {
        let file = dir.join("serve.toml");
        std::fs::write(&file, toml).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = dir.join("serve.log");
        let child = bin()
            .args(["serve", file.to_str().unwrap(), "--listen", &addr])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut s = Served { child, addr, log };
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let o = curl(&["-sf", "-m", "1", "-o", "/dev/null", &format!("http://{}/healthz", s.addr)]);
            if o.status.success() {
                break;
            }
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("serve exited ({st}): {}", std::fs::read_to_string(&s.log).unwrap_or_default());
            }
            assert!(Instant::now() < until, "serve not up: {}", std::fs::read_to_string(&s.log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(100));
        }
        s.addr = s.addr.clone();
        s
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl").args(args).output().expect("curl")
}

/// POST `args` (curl's body options) to /v1/infer: (status, headers, body).
fn post(s: &Served, query: &str, token: Option<&str>, args: &[&str]) -> (u16, String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let (h, b) = (dir.path().join("h"), dir.path().join("b"));
    let mut a: Vec<String> = ["-s", "-m", "120", "-D", h.to_str().unwrap(), "-o", b.to_str().unwrap(), "-w", "%{http_code}"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(t) = token {
        a.extend(["-H".into(), format!("Authorization: Bearer {t}")]);
    }
    a.extend(args.iter().map(|s| s.to_string()));
    a.push(s.url(&format!("/v1/infer{query}")));
    let o = Command::new("curl").args(&a).output().unwrap();
    let code: u16 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0);
    let body = std::fs::read(&b).unwrap_or_default();
    let json = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    (code, std::fs::read_to_string(&h).unwrap_or_default().to_ascii_lowercase(), json)
}

/// The Python gRPC client, its output as JSON lines.
fn grpc(args: &[&str]) -> Vec<Value> {
    let python = root().join(".deps/grpc-venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/fetch-grpc-client.sh", python.display());
    let o = Command::new(python).arg(root().join("tests/support/grpc_client.py")).args(args).output().unwrap();
    assert!(o.status.success(), "grpc client: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// One 720p frame of samples/eval-720p.mp4 as PNG and JPEG.
fn pictures(dir: &Path) -> (PathBuf, PathBuf) {
    let pics = dir.join("pics");
    std::fs::create_dir_all(&pics).unwrap();
    for name in ["frame.png", "frame.jpg"] {
        let o = Command::new("ffmpeg")
            .args(["-nostdin", "-y", "-loglevel", "error", "-ss", "2", "-i"])
            .arg(root().join("samples/eval-720p.mp4"))
            .args(["-frames:v", "1"])
            .arg(pics.join(name))
            .output()
            .unwrap();
        assert!(o.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&o.stderr));
    }
    (pics.join("frame.png"), pics.join("frame.jpg"))
}

/// `run` on the pictures through the same stages: each picture's `results`, by file (natural order: jpg, png).
fn reference(dir: &Path) -> (Value, Value) {
    let out = dir.join("ref.ndjson");
    let src = format!("[sources.req]\nkind = \"image_sequence\"\npath = \"{}\"", dir.join("pics").display());
    let sink = format!("[sinks.out]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{}\"", out.display());
    let file = dir.join("ref.toml");
    std::fs::write(&file, pipeline("", &src, &sink)).unwrap();
    let o = bin().args(["-q", "run", file.to_str().unwrap(), "--progress", "never"]).output().unwrap();
    assert!(o.status.success(), "reference run: {}", String::from_utf8_lossy(&o.stderr));
    let lines = util::read_ndjson(&out);
    assert_eq!(lines.len(), 2);
    (lines[0]["results"].clone(), lines[1]["results"].clone())
}

fn text_boxes(results: &Value) -> &Vec<Value> {
    results["boxes"]["text_boxes"].as_array().expect("text boxes")
}

#[test]
fn requests_over_http_and_grpc_are_answered_as_run_answers_them() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let (png, jpg) = pictures(dir.path());
    let (want_jpg, want_png) = reference(dir.path());
    assert!(!text_boxes(&want_png).is_empty(), "the frame has text: {want_png}");

    let api = format!(
        "api = {{ tokens = [{{ role = \"operator\", token = \"{OPERATOR}\" }}, {{ role = \"viewer\", token = \"{VIEWER}\" }}], results_buffer = 4 }}"
    );
    // `req` takes the load; `small` (one waiting request at most) is there to be refused when busy.
    let sources = "[sources.req]\nkind = \"request\"\nmax_waiting = 128\nmax_bytes = 4000000\ntimeout_ms = 120000\n\n\
                   [sources.small]\nkind = \"request\"\nmax_waiting = 1\n"
        .to_string();
    let toml = pipeline(&api, &sources, "[sinks.reply]\nkind = \"null\"\ninputs = [\"boxes\"]")
        .replace("inputs = [\"req\"]", "inputs = [\"req\", \"small\"]");
    let s = Served::start(dir.path(), &toml);
    let op = Some(OPERATOR);

    // curl: the PNG as the body, the JPEG as a multipart file; the same results as `run`.
    let (code, _, got) = post(&s, "?source=req", op, &["-H", "content-type: image/png", "--data-binary", &format!("@{}", png.display())]);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["results"], want_png, "POST /v1/infer and run disagree");
    assert_eq!((got["stream"].as_str(), got["width"].as_u64(), got["height"].as_u64()), (Some("req"), Some(1280), Some(720)));
    let (code, _, got) = post(&s, "?source=req", op, &["-F", &format!("image=@{}", jpg.display())]);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["results"], want_jpg, "multipart JPEG and run disagree");

    // No token: 401; a viewer may not ask for inference: 403.
    let (code, headers, _) = post(&s, "?source=req", None, &["--data-binary", &format!("@{}", png.display())]);
    assert_eq!(code, 401);
    assert!(headers.contains("www-authenticate: bearer"), "{headers}");
    assert_eq!(post(&s, "?source=req", Some(VIEWER), &["--data-binary", &format!("@{}", png.display())]).0, 403);

    // Two request sources: a request must name one.
    let (code, _, got) = post(&s, "", op, &["--data-binary", &format!("@{}", png.display())]);
    assert_eq!(code, 400);
    assert!(got["error"].as_str().unwrap().contains("?source=NAME"), "{got}");

    // Oversized: 413, before the picture is looked at.
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![0u8; 4_000_001]).unwrap();
    let (code, _, got) = post(&s, "?source=req", op, &["--data-binary", &format!("@{}", big.display())]);
    assert_eq!(code, 413, "{got}");
    assert!(got["error"].as_str().unwrap().contains("over the limit of 4000000 bytes"), "{got}");

    // Garbage: 400 saying what is wrong; a cut-short PNG too.
    let (code, _, got) = post(&s, "?source=req", op, &["--data-binary", "this is not a picture"]);
    assert_eq!(code, 400, "{got}");
    assert!(got["error"].as_str().unwrap().contains("not a JPEG or PNG picture"), "{got}");
    let cut = dir.path().join("cut.png");
    let bytes = std::fs::read(&png).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, got) = post(&s, "?source=req", op, &["--data-binary", &format!("@{}", cut.display())]);
    assert_eq!(code, 400, "{got}");
    assert!(got["error"].as_str().unwrap().contains("PNG picture cannot be decoded"), "{got}");

    // A deadline that cannot be met: 504.
    let (code, _, got) = post(&s, "?source=req", op, &["-H", "x-timeout-ms: 1", "--data-binary", &format!("@{}", png.display())]);
    assert_eq!(code, 504, "{got}");

    // gRPC: Infer with the operator's token gives the same results, typed boxes
    // included; without a token it is refused.
    let r = grpc(&[&s.addr, "infer", png.to_str().unwrap(), "--token", OPERATOR, "--source", "req"]);
    let ok = &r[0]["ok"];
    assert_eq!(ok["frame"]["results"], want_png, "gRPC Infer and run disagree: {}", r[0]);
    assert_eq!(ok["frame"]["seq"], ok["request_id"]);
    let want: Vec<&Value> = text_boxes(&want_png).iter().collect();
    let boxes = ok["boxes"].as_array().unwrap();
    assert_eq!(boxes.len(), want.len());
    for (b, w) in boxes.iter().zip(want) {
        for k in 0..4 {
            assert!((b["bbox"][k].as_f64().unwrap() - w["bbox"][k].as_f64().unwrap()).abs() < 0.01, "{b} vs {w}");
        }
        assert_eq!(b["node"], "boxes");
    }
    let r = grpc(&[&s.addr, "infer", png.to_str().unwrap(), "--source", "req"]);
    assert_eq!(r[0]["error"], "UNAUTHENTICATED", "{}", r[0]);
    let r = grpc(&[&s.addr, "infer", big.to_str().unwrap(), "--token", OPERATOR, "--source", "req"]);
    assert!(r[0]["error"] == "INVALID_ARGUMENT" || r[0]["error"] == "RESOURCE_EXHAUSTED", "{}", r[0]);

    // gRPC Results, filtered by stream, read slowly (results_buffer = 4): each
    // message says how many the reader missed before it.
    let python = root().join(".deps/grpc-venv/bin/python");
    let reader = Command::new(python)
        .arg(root().join("tests/support/grpc_client.py"))
        .args([&s.addr, "results", "--stream", "req", "--count", "6", "--slow-ms", "700", "--token", VIEWER])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));

    // 100 concurrent requests: every one answered 200 with run's results; batches formed.
    let before = batches(&s);
    let answers: Vec<(u16, Value)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..100)
            .map(|_| {
                sc.spawn(|| {
                    let (c, _, b) = post(&s, "?source=req", op, &["--data-binary", &format!("@{}", png.display())]);
                    (c, b)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ids: Vec<u64> = Vec::new();
    for (code, got) in &answers {
        assert_eq!(*code, 200, "{got}");
        assert_eq!(got["results"], want_png);
        ids.push(got["seq"].as_u64().unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 100, "each request is its own frame");
    let after = batches(&s);
    let (runs, frames) = (after.0 - before.0, after.1 - before.1);
    assert!(frames >= 100.0, "the batch-size histogram counts the requests: {before:?} -> {after:?}");
    assert!(runs < frames, "concurrent requests were batched: {runs} model runs for {frames} frames");

    let out = reader.wait_with_output().unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 6, "results: {}", String::from_utf8_lossy(&out.stderr));
    assert!(lines.iter().all(|l| l["kind"] == "frame" && l["stream"] == "req" && l["json"]["stream"] == "req"), "{lines:?}");
    // Every frame of `req` goes to this reader in order: a gap in `seq` is exactly what `dropped` says it missed.
    for w in lines.windows(2) {
        let gap = w[1]["json"]["seq"].as_u64().unwrap() - w[0]["json"]["seq"].as_u64().unwrap() - 1;
        assert_eq!(w[1]["dropped"].as_u64(), Some(gap), "{w:?}");
    }

    // Busy: `small` holds one waiting request; a burst gets 503 with Retry-After.
    let answers: Vec<(u16, String)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..40)
            .map(|_| {
                sc.spawn(|| {
                    let (c, h, _) = post(&s, "?source=small", op, &["--data-binary", &format!("@{}", png.display())]);
                    (c, h)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let busy: Vec<&(u16, String)> = answers.iter().filter(|(c, _)| *c == 503).collect();
    assert!(!busy.is_empty(), "a burst over a queue of one is refused: {:?}", answers.iter().map(|a| a.0).collect::<Vec<_>>());
    assert!(busy.iter().all(|(_, h)| h.contains("retry-after: 1")), "{busy:?}");
    assert!(answers.iter().all(|(c, _)| *c == 200 || *c == 503));
}

/// (batches, frames) the `det` stage has run so far, from /metrics.
fn batches(s: &Served) -> (f64, f64) {
    let o = curl(&["-sf", "-H", &format!("Authorization: Bearer {VIEWER}"), &s.url("/metrics")]);
    let text = String::from_utf8_lossy(&o.stdout);
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains("node=\"det\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("infer_stream_node_batch_size_count"), value("infer_stream_node_batch_size_sum"))
}
