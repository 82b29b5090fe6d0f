//! The live view (`/ui/`) in a real headless Chromium: Debian's `chromium`
//! (scripts/install-deps.sh) driven by Playwright for Python
//! (scripts/fetch-playwright.sh), against the real server, the RTSP test
//! camera and a clip through text detection. The browser's steps and checks
//! are in tests/support/ui_browser.py.

mod util;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use util::serve::{Camera, Serve, free_port, serial, wait_for};

const VIEWER: &str = "ui-viewer-token-0123456789";
const OPERATOR: &str = "ui-operator-token-0123456789";

/// The venv's python: `PLAYWRIGHT_PYTHON`, else .deps/playwright-venv's.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("PLAYWRIGHT_PYTHON") {
        return PathBuf::from(p);
    }
    let p = util::root().join(".deps/playwright-venv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/fetch-playwright.sh (scripts/setup.sh does)", p.display());
    p
}

/// PP-OCRv4 text detection on `{INPUT}`, then tracks and a line (`gate`) and
/// a zone (`right`) on the plates, as pipelines/lines.toml: boxes to draw,
/// events for the feed. (`{root}`: filled by `Serve`.)
const STAGES: &str = r#"[stages.pre]
kind = "preprocess"
inputs = ["{INPUT}"]
width = 640
height = 384
color = "bgr"
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]

[stages.det]
kind = "infer"
inputs = ["pre"]
model = "{root}/models/ppocr/ch_PP-OCRv4_det_infer.onnx"

[stages.boxes]
kind = "text_detection"
inputs = ["det"]

[stages.tracks]
kind = "track"
inputs = ["boxes"]
frame_rate = 15

[stages.counts]
kind = "analytics"
inputs = ["tracks"]
margin = 4
anchor = "center"

[[stages.counts.lines]]
name = "gate"
from = [640, 0]
to = [640, 720]

[[stages.counts.zones]]
name = "right"
points = [[640, 0], [1280, 0], [1280, 720], [640, 720]]
"#;

fn chromium() -> String {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(std::path::Path::new(&chromium).exists(), "{chromium} is missing: scripts/install-deps.sh installs Debian's chromium");
    chromium
}

#[test]
fn the_live_view_in_a_real_browser() {
    let _g = serial();
    util::require_assets();
    let py = python();
    let chromium = chromium();
    let cam_port = free_port();
    let camera = Camera::start(cam_port);
    let camera_uri = format!("rtsp://127.0.0.1:{cam_port}/cam");
    let pipeline = format!(
        r#"
[pipeline]
name = "live-view"
api = {{ tokens = [{{ role = "viewer", token = "{VIEWER}" }}, {{ role = "operator", token = "{OPERATOR}" }}] }}

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri"]
uri = "{camera_uri}"
transport = "tcp"
watchdog_ms = 1000
wait_at_start = true
required = false

[sources.clips]
kind = "file"
dynamic = true
uri = "{{root}}/samples/plates.mp4"
realtime = true
restart = "always"
restart_backoff_ms = 0

{{STAGES}}
[sinks.out]
kind = "null"
inputs = ["counts", "cams"]
"#
    )
    .replace("{STAGES}", &STAGES.replace("{INPUT}", "clips"));
    let s = Serve::start(&pipeline, &[]);
    let auth = format!("Authorization: Bearer {OPERATOR}");
    for (source, id) in [("cams", "door"), ("clips", "plates")] {
        let o = Command::new("curl")
            .args(["-s", "-H", &auth, "-H", "Content-Type: application/json", "-d", &json!({ "source": source, "id": id }).to_string()])
            .arg(s.url("/v1/streams"))
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&o.stdout).contains("\"id\""), "{}", String::from_utf8_lossy(&o.stdout));
    }
    wait_for("both streams delivering", Duration::from_secs(30), || {
        let o = Command::new("curl").args(["-s", "-H", &auth, &s.url("/v1/streams")]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).matches("\"state\":\"running\"").count() == 2
    });
    let shot = s.path("live-view.png");
    let o = Command::new(&py)
        .arg(util::root().join("tests/support/ui_browser.py"))
        .args([&s.url(""), VIEWER, OPERATOR, &camera.0.id().to_string(), &camera_uri])
        .arg(&shot)
        .env("CHROMIUM", &chromium)
        .output()
        .expect("run tests/support/ui_browser.py");
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.contains("ok"), "the browser's checks failed:\n{out}\nserver log:\n{}", s.log());
    assert!(shot.exists(), "no screenshot");
    if let Some(to) = std::env::var_os("LIVE_VIEW_SCREENSHOT") {
        std::fs::copy(&shot, to).unwrap();
    }
    // Tokens never reach the log.
    assert!(!s.log().contains(VIEWER) && !s.log().contains(OPERATOR), "a token in the log");
}

/// nginx as a TLS reverse proxy: `https://127.0.0.1:port/cameras/` to `upstream` (the API, itself over TLS).
struct Proxy(std::process::Child);

impl Proxy {
    fn start(dir: &std::path::Path, port: u16, upstream: &str) -> Proxy {
        let d = dir.display();
        // A reverse proxy as one is usually written: nothing here for the live view in particular
        // (its streams ask nginx not to buffer them with `X-Accel-Buffering: no`).
        let conf = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log;\nevents {{}}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/cb; proxy_temp_path {d}/pt; fastcgi_temp_path {d}/ft; \
             uwsgi_temp_path {d}/ut; scgi_temp_path {d}/st;\n\
             server {{\n  listen 127.0.0.1:{port} ssl;\n  ssl_certificate {d}/server.crt;\n  ssl_certificate_key {d}/server.key;\n\
               location /cameras/ {{\n   proxy_pass {upstream}/;\n   proxy_http_version 1.1;\n   proxy_set_header Host $host;\n\
                 proxy_read_timeout 1h;\n  }}\n }}\n}}\n"
        );
        let file = dir.join("nginx.conf");
        std::fs::write(&file, conf).unwrap();
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&file)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("nginx-error.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nginx (scripts/install-deps.sh installs it)");
        wait_for("nginx listening", Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        Proxy(child)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_live_view_over_tls_behind_a_reverse_proxy_path_prefix() {
    let _g = serial();
    util::require_assets();
    let py = python();
    let chromium = chromium();
    let dir = tempfile::tempdir().unwrap();
    util::certs::certificates(dir.path());
    let pipeline = format!(
        r#"
[pipeline]
name = "live-view-proxied"
api = {{ tls = {{ cert = "{d}/server.crt", key = "{d}/server.key" }}, tokens = [{{ role = "viewer", token = "{VIEWER}" }}] }}

[sources.plates]
kind = "file"
uri = "{{root}}/samples/plates.mp4"
realtime = true
restart = "always"
restart_backoff_ms = 0

{{STAGES}}
[sinks.out]
kind = "null"
inputs = ["counts"]
"#,
        d = dir.path().display()
    )
    .replace("{STAGES}", &STAGES.replace("{INPUT}", "plates"));
    let s = Serve::start(&pipeline, &[]);
    assert!(s.url("").starts_with("https://"), "the API is not on TLS: {}", s.url(""));
    let port = free_port();
    let _proxy = Proxy::start(dir.path(), port, s.url("").trim_end_matches('/'));
    let page = format!("https://127.0.0.1:{port}/cameras/");
    let o = Command::new(&py)
        .arg(util::root().join("tests/support/ui_browser.py"))
        .args(["proxy", &page, VIEWER])
        .env("CHROMIUM", &chromium)
        .output()
        .expect("run tests/support/ui_browser.py");
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let nginx_log = std::fs::read_to_string(dir.path().join("nginx-error.log")).unwrap_or_default();
    assert!(
        o.status.success() && out.contains("ok"),
        "the browser's checks behind the proxy failed:\n{out}\nserver log:\n{}\nnginx:\n{nginx_log}",
        s.log()
    );
    assert!(!s.log().contains(VIEWER), "a token in the log");
}
