//! Live pictures of `infer-stream serve` (GET /v1/streams/{id}/live.mjpeg and
//! /snapshot.jpg) and the live view's page, against the real server with real
//! HTTP clients (curl, a raw socket): pictures only while someone watches,
//! the pipeline's boxes drawn on them, one encode per picture however many
//! watch, a viewer that stops reading losing only its own pictures (counted),
//! the page's sign-in and security headers, roles as the API's.

mod util;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use util::serve::{Serve, add, curl, json_of, serial, stream_status, wait_for};

/// The JPEG pictures of an MJPEG body (each part has its `Content-Length`).
fn parts(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = find(&body[at..], b"Content-Length: ") {
        let start = at + i + 16;
        let Some(eol) = find(&body[start..], b"\r\n") else { break };
        let len: usize = std::str::from_utf8(&body[start..start + eol]).unwrap().parse().unwrap();
        let Some(head_end) = find(&body[start..], b"\r\n\r\n") else { break };
        let data = start + head_end + 4;
        if data + len > body.len() {
            break;
        }
        out.push(body[data..data + len].to_vec());
        at = data + len;
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// curl reading `url` for `secs` seconds into a file of the test's folder.
fn viewer(s: &Serve, url: &str, secs: u32, out: &str, args: &[&str]) -> Child {
    Command::new("curl")
        .args(["-s", "-N", "--max-time", &secs.to_string(), "-o"])
        .arg(s.path(out))
        .args(args)
        .arg(url)
        .stdout(Stdio::null())
        .spawn()
        .expect("run curl")
}

fn live(s: &Serve) -> Value {
    json_of(&curl(&s.url("/v1/pipeline"), &[]).1)["live"].clone()
}

/// Pixels of the drawn text boxes' green (`draw::TEXT_BOX`), JPEG's blur allowed.
fn green(jpeg: &[u8]) -> usize {
    let img = image::load_from_memory(jpeg).expect("a JPEG picture").to_rgb8();
    img.pixels().filter(|p| p[1] > 200 && p[0] < 90 && p[2] < 90).count()
}

#[test]
fn live_pictures_only_while_watched_with_the_boxes_drawn_once_for_all_viewers() {
    let _g = serial();
    util::require_assets();
    // One template through text detection, one straight to the sink (the same footage, nothing drawn).
    let pipeline = r#"
[pipeline]
api = { live_fps = 10 }

[sources.cams]
kind = "file"
dynamic = true
allow = ["uri"]
uri = "{root}/samples/plates.mp4"
realtime = true
restart = "always"
restart_backoff_ms = 0

[sources.plain]
kind = "file"
dynamic = true
uri = "{root}/samples/plates.mp4"
realtime = true
restart = "always"
restart_backoff_ms = 0

[stages.pre]
kind = "preprocess"
inputs = ["cams"]
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

[sinks.out]
kind = "null"
inputs = ["boxes", "plain"]
"#;
    let mut s = Serve::start(pipeline, &[]);
    for (source, id) in [("cams", "door"), ("plain", "raw")] {
        let (code, st) = add(&s, json!({ "source": source, "id": id }));
        assert_eq!(code, 201, "{st}");
    }
    wait_for("frames of `door`", Duration::from_secs(30), || stream_status(s.port, "door")["frames"].as_u64().unwrap_or(0) > 5);
    // Nobody watches: nothing is encoded.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(live(&s)["encoded"], 0, "pictures encoded with no viewer");

    // A snapshot: the latest picture, the detections drawn on it; none on the plain stream's.
    let snap = |id: &str| {
        let o = Command::new("curl")
            .args(["-s", "--max-time", "20", "-D", "-", &s.url(&format!("/v1/streams/{id}/snapshot.jpg"))])
            .output()
            .unwrap();
        let split = find(&o.stdout, b"\r\n\r\n").expect("a head");
        (String::from_utf8_lossy(&o.stdout[..split]).to_string(), o.stdout[split + 4..].to_vec())
    };
    let (head, door) = snap("door");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_lowercase().contains("content-type: image/jpeg"), "{head}");
    let img = image::load_from_memory(&door).unwrap();
    // The 1280x720 clip scaled down to the live pictures' width, aspect kept.
    assert_eq!((img.width(), img.height()), (960, 540));
    let (_, raw) = snap("raw");
    let (drawn, plain) = (green(&door), green(&raw));
    assert!(drawn > 500 && drawn > 10 * plain.max(1), "text boxes drawn: {drawn} green pixels with detection, {plain} without");

    // Twenty viewers at once: each picture encoded once, for all of them.
    let before = live(&s)["encoded"].as_u64().unwrap();
    let viewers: Vec<Child> =
        (0..20).map(|i| viewer(&s, &s.url("/v1/streams/door/live.mjpeg?fps=5"), 4, &format!("v{i}.mjpeg"), &[])).collect();
    for mut v in viewers {
        let _ = v.wait();
    }
    let encoded = live(&s)["encoded"].as_u64().unwrap() - before;
    let got: Vec<Vec<Vec<u8>>> = (0..20).map(|i| parts(&std::fs::read(s.path(&format!("v{i}.mjpeg"))).unwrap())).collect();
    let most = got.iter().map(Vec::len).max().unwrap();
    assert!(got.iter().all(|p| p.len() >= 2), "a viewer got fewer than 2 pictures: {:?}", got.iter().map(Vec::len).collect::<Vec<_>>());
    assert!(encoded as usize <= most + 3, "{encoded} encodes for 20 viewers that got at most {most} pictures each");
    // The picture changes over time.
    let p = &got[0];
    let (a, b) = (image::load_from_memory(&p[0]).unwrap().to_rgb8(), image::load_from_memory(&p[p.len() - 1]).unwrap().to_rgb8());
    assert_ne!(a.as_raw(), b.as_raw(), "the live picture did not change");

    // A viewer that stops reading: the pipeline goes on, its pictures are dropped and counted, another viewer is served.
    let mut stalled = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    write!(stalled, "GET /v1/streams/door/live.mjpeg?fps=10 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let frames = |id: &str| stream_status(s.port, id)["frames"].as_u64().unwrap();
    let before = frames("door");
    let mut other = viewer(&s, &s.url("/v1/streams/door/live.mjpeg"), 8, "other.mjpeg", &[]);
    let _ = other.wait();
    let after = frames("door");
    assert!(after > before + 10, "the pipeline stalled with a viewer reading nothing: {before} → {after} frames");
    assert!(parts(&std::fs::read(s.path("other.mjpeg")).unwrap()).len() >= 5, "the other viewer was not served");
    wait_for("pictures dropped for the stalled viewer", Duration::from_secs(20), || live(&s)["dropped"].as_u64().unwrap() > 0);
    drop(stalled);

    // Errors: an unknown stream, a bad rate.
    assert_eq!(curl(&s.url("/v1/streams/nope/live.mjpeg"), &[]).0, 404);
    assert_eq!(curl(&s.url("/v1/streams/nope/snapshot.jpg"), &[]).0, 404);
    let (code, body) = curl(&s.url("/v1/streams/door/live.mjpeg?fps=0"), &[]);
    assert_eq!(code, 400, "{body}");

    // Removing the stream ends its live picture.
    let mut watching = viewer(&s, &s.url("/v1/streams/door/live.mjpeg"), 60, "removed.mjpeg", &[]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(curl(&s.url("/v1/streams/door"), &["-X", "DELETE"]).0, 200);
    wait_for("the live picture to end with its stream", Duration::from_secs(15), || watching.try_wait().unwrap().is_some());
    // Every viewer gone: nothing more is encoded.
    wait_for("no viewers", Duration::from_secs(10), || live(&s)["viewers"] == 0);
    let idle = live(&s)["encoded"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(live(&s)["encoded"].as_u64().unwrap(), idle, "pictures encoded with no viewer");
    s.stop();
}

const VIEWER: &str = "viewer-token-0123456789";
const OPERATOR: &str = "operator-token-0123456789";

#[test]
fn the_page_signs_in_with_a_token_and_keeps_roles_and_security_headers() {
    let _g = serial();
    let pipeline = format!(
        r#"
[pipeline]
api = {{ tokens = [{{ role = "viewer", token = "{VIEWER}" }}, {{ role = "operator", token = "{OPERATOR}" }}] }}

[sources.cams]
kind = "rtsp"
dynamic = true
uri = "rtsp://127.0.0.1:9/cam"
wait_at_start = true
required = false

[sinks.out]
kind = "null"
inputs = ["cams"]
"#
    );
    let s = Serve::start(&pipeline, &[]);
    // The page and its files: open (they hold no data, and no credential), with the security headers.
    let o = Command::new("curl").args(["-s", "-D", "-", &s.url("/ui/")]).output().unwrap();
    let page = String::from_utf8_lossy(&o.stdout).to_string();
    let lower = page.to_lowercase();
    assert!(lower.starts_with("http/1.1 200"), "{page}");
    assert!(lower.contains("content-security-policy: default-src 'none'; script-src 'self'"), "{page}");
    assert!(lower.contains("x-content-type-options: nosniff"), "{page}");
    assert!(!page.contains("<script>") && page.contains("<script src=\"app.js\""), "inline script in the page");
    assert!(!page.contains("http://") && !page.contains("https://"), "a resource from elsewhere:\n{page}");
    for f in ["/ui/app.js", "/ui/app.css", "/ui/icon.svg"] {
        let (code, body) = curl(&s.url(f), &[]);
        assert_eq!(code, 200, "{f}");
        // (an SVG names its namespace by a URL it never loads)
        let body = body.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(!body.contains(VIEWER) && !body.contains("http://") && !body.contains("https://"), "{f}");
    }
    // `/` leads to the page, relatively (right behind a path prefix).
    let o = Command::new("curl").args(["-s", "-D", "-", "-o", "/dev/null", &s.url("/")]).output().unwrap();
    let head = String::from_utf8_lossy(&o.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 302") && head.contains("location: ui/\r\n"), "{head}");
    // The API behind it: 401 without a token, the role of each token.
    assert_eq!(curl(&s.url("/v1/me"), &[]).0, 401);
    assert_eq!(curl(&s.url("/v1/me"), &["-H", "Authorization: Bearer not-a-token-at-all"]).0, 401);
    let me = |t: &str| json_of(&curl(&s.url("/v1/me"), &["-H", &format!("Authorization: Bearer {t}")]).1);
    assert_eq!(me(VIEWER)["role"], "viewer");
    assert_eq!(me(OPERATOR)["role"], "operator");
    assert_eq!(me(OPERATOR)["auth"], true);
    // A viewer sees the status stream, and cannot add; an operator can.
    let o = Command::new("curl")
        .args(["-s", "-N", "--max-time", "2", "-H", &format!("Authorization: Bearer {VIEWER}"), &s.url("/v1/live/streams")])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("event: streams"), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(curl(&s.url("/v1/live/streams"), &["--max-time", "2"]).0, 401);
    let body = json!({ "source": "cams", "id": "door" }).to_string();
    let post = |t: &str| {
        curl(
            &s.url("/v1/streams"),
            &["-X", "POST", "-H", &format!("Authorization: Bearer {t}"), "-H", "Content-Type: application/json", "-d", &body],
        )
        .0
    };
    assert_eq!(post(VIEWER), 403);
    assert_eq!(post(OPERATOR), 201);
    // Pictures need a token too.
    assert_eq!(curl(&s.url("/v1/streams/door/snapshot.jpg"), &[]).0, 401);
    // The camera never answers: no picture, said so (404, a client's matter: no server error), not a hang.
    let (code, body) = curl(&s.url("/v1/streams/door/snapshot.jpg"), &["-H", &format!("Authorization: Bearer {VIEWER}")]);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("has no picture now"), "{body}");
    assert!(!s.log().contains(VIEWER) && !s.log().contains(OPERATOR), "a token in the log");
}

/// The face pipeline of pipelines/anonymize.toml on samples/Megamind.avi, in
/// real time, with `sinks` after its `redact` stage `anon`.
fn faces_pipeline(sinks: &str) -> String {
    let root = util::root();
    for f in ["models/centerface/centerface.onnx", "samples/Megamind.avi"] {
        assert!(root.join(f).exists(), "{f} is missing: scripts/setup.sh fetches it (scripts/fetch-vision.sh)");
    }
    format!(
        "[pipeline]\nname = \"live-redacted\"\n\n\
         [sources.cam]\nkind = \"file\"\nuri = \"{{root}}/samples/Megamind.avi\"\nrealtime = true\n\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 736\nheight = 544\nresize = \"stretch\"\ncolor = \"rgb\"\nscale = 1.0\n\n\
         [stages.centerface]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{{root}}/models/centerface/centerface.onnx\"\n\n\
         [stages.faces]\nkind = \"detection\"\ninputs = [\"centerface\"]\nformat = \"centerface\"\nconfidence = 0.2\niou = 0.3\n\n\
         [stages.anon]\nkind = \"redact\"\ninputs = [\"faces\"]\nmethod = \"blur\"\non_miss = \"full\"\n\n{sinks}"
    )
}

/// Mean absolute difference of two RGB pictures over the pixels `inside` says.
fn mean_diff(a: &image::RgbImage, b: &image::RgbImage, inside: impl Fn(u32, u32) -> bool) -> f64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for (x, y, p) in a.enumerate_pixels() {
        if inside(x, y) {
            let q = b.get_pixel(x, y);
            sum += (0..3).map(|c| (p[c] as i32 - q[c] as i32).unsigned_abs() as u64).sum::<u64>();
            n += 3;
        }
    }
    sum as f64 / n.max(1) as f64
}

/// With a `redact` stage, viewers get the redacted picture: a sink before it
/// (listed first) is passed over for the first sink after it, and the
/// snapshot differs from the raw frame (decoded by the ffmpeg CLI) inside the
/// faces CenterFace found in that frame, not outside. With no sink after it,
/// there is no picture at all: `409` saying why.
#[test]
fn a_redacting_pipeline_shows_only_redacted_pictures() {
    let _g = serial();
    util::require_assets();
    let s = Serve::start(
        &faces_pipeline(
            "[sinks.raw]\nkind = \"ndjson\"\ninputs = [\"faces\"]\npath = \"{dir}/faces.ndjson\"\n\n\
             [sinks.after]\nkind = \"null\"\ninputs = [\"anon\"]\n",
        ),
        &[],
    );
    wait_for("frames", Duration::from_secs(60), || stream_status(s.port, "cam")["frames"].as_u64().unwrap_or(0) > 40);
    let shot = s.path("snapshot.jpg");
    let o = Command::new("curl").args(["-s", "-D", "-", "-o"]).arg(&shot).arg(s.url("/v1/streams/cam/snapshot.jpg")).output().unwrap();
    let head = String::from_utf8_lossy(&o.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}\n{}", s.log());
    let seq: u64 = head.lines().find_map(|l| l.strip_prefix("x-frame-seq: ")).expect("X-Frame-Seq").trim().parse().unwrap();
    let snap = image::open(&shot).unwrap().to_rgb8();
    // The raw frame, decoded independently.
    let raw_png = s.path("raw.png");
    let st = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-i"])
        .arg(util::root().join("samples/Megamind.avi"))
        .args(["-vf", &format!("select=eq(n\\,{seq})"), "-frames:v", "1"])
        .arg(&raw_png)
        .status()
        .unwrap();
    assert!(st.success());
    let raw = image::open(&raw_png).unwrap().to_rgb8();
    assert_eq!(raw.dimensions(), snap.dimensions());
    // The faces of that frame (the sink before the redaction wrote them).
    let line_of = || {
        let text = std::fs::read_to_string(s.path("faces.ndjson")).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|l| l["seq"].as_u64() == Some(seq))
    };
    wait_for("the frame's results", Duration::from_secs(30), || line_of().is_some());
    let line = line_of().unwrap();
    let boxes: Vec<[f64; 4]> = line["results"]["faces"]["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| std::array::from_fn(|i| d["bbox"][i].as_f64().unwrap()))
        .filter(|b| (b[2] - b[0]) * (b[3] - b[1]) > 24.0 * 24.0)
        .collect();
    assert!(!boxes.is_empty(), "no face found in frame {seq}: {line}");
    let in_face = |x: u32, y: u32| boxes.iter().any(|b| (x as f64) >= b[0] && (x as f64) < b[2] && (y as f64) >= b[1] && (y as f64) < b[3]);
    let near_face = |x: u32, y: u32| {
        boxes.iter().any(|b| {
            let (w, h) = (b[2] - b[0], b[3] - b[1]);
            (x as f64) >= b[0] - w && (x as f64) < b[2] + w && (y as f64) >= b[1] - h && (y as f64) < b[3] + h
        })
    };
    let inside = mean_diff(&snap, &raw, in_face);
    let outside = mean_diff(&snap, &raw, |x, y| !near_face(x, y));
    eprintln!("frame {seq}: {} faces; mean difference to the raw frame {inside:.1} inside them, {outside:.1} away", boxes.len());
    assert!(
        inside > 5.0 * outside && inside > 15.0,
        "the viewer's picture of frame {seq} is not redacted: mean difference to the raw frame {inside:.1} inside the faces, {outside:.1} away from them"
    );
    drop(s);

    // No sink after the redaction: no picture, and the answer says why.
    let s = Serve::start(&faces_pipeline("[sinks.raw]\nkind = \"ndjson\"\ninputs = [\"faces\"]\npath = \"{dir}/faces.ndjson\"\n"), &[]);
    wait_for("frames", Duration::from_secs(60), || stream_status(s.port, "cam")["frames"].as_u64().unwrap_or(0) > 0);
    for route in ["/v1/streams/cam/snapshot.jpg", "/v1/streams/cam/live.mjpeg"] {
        let (code, body) = curl(&s.url(route), &["--max-time", "5"]);
        assert_eq!(code, 409, "{route}: {body}");
        assert!(body.contains("redact") && body.contains("no sink follows"), "{route}: {body}");
    }
}
