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

#[test]
fn the_live_view_in_a_real_browser() {
    let _g = serial();
    util::require_assets();
    let py = python();
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(std::path::Path::new(&chromium).exists(), "{chromium} is missing: scripts/install-deps.sh installs Debian's chromium");
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

[stages.pre]
kind = "preprocess"
inputs = ["clips"]
width = 640
height = 384
color = "bgr"
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]

[stages.det]
kind = "infer"
inputs = ["pre"]
model = "{{root}}/models/ppocr/ch_PP-OCRv4_det_infer.onnx"

[stages.boxes]
kind = "text_detection"
inputs = ["det"]

[sinks.out]
kind = "null"
inputs = ["boxes", "cams"]
"#
    );
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
