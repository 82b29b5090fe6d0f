//! Helpers for the integration tests: run the real binary from the repo root.
#![allow(dead_code)]

pub mod brokers;
pub mod certs;
pub mod clips;
pub mod prometheus;
pub mod serve;
pub mod served;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_infer-stream"));
    c.current_dir(root());
    c
}

/// The models and samples come from scripts/setup.sh; say so clearly if they are missing.
pub fn require_assets() {
    for p in [
        "models/ppocr/ch_PP-OCRv4_det_infer.onnx",
        "samples/eval-720p.mp4",
        "samples/eval-720p.truth.json",
        ".deps/onnxruntime/libonnxruntime.so",
    ] {
        assert!(root().join(p).exists(), "{p} is missing: run scripts/setup.sh first");
    }
}

/// Run with `INFER_STREAM_TEST_OUT` pointing at `out`.
pub fn run_in(out: &Path, args: &[&str]) -> Output {
    require_assets();
    bin().args(args).env("INFER_STREAM_TEST_OUT", out).output().expect("run infer-stream")
}

/// Run in a fresh output folder; the run must succeed. Returns the folder and stderr.
pub fn run_ok(args: &[&str]) -> (tempfile::TempDir, String) {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "infer-stream {}: {err}", args.join(" "));
    (out, err)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn read_ndjson(p: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{} line {}: {e}: {l}", p.display(), i + 1)))
        .collect()
}

/// Ground truth written beside each sample.
pub struct Truth {
    pub frames: u64,
    /// (start_frame, end_frame, boxes x0 y0 x1 y1)
    pub segments: Vec<(u64, u64, Vec<[f64; 4]>)>,
}

pub fn truth(sample: &str) -> Truth {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root().join("samples").join(sample)).unwrap()).unwrap();
    let segments = v["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let boxes = s["boxes"].as_array().unwrap().iter().map(|b| ["x0", "y0", "x1", "y1"].map(|k| b[k].as_f64().unwrap())).collect();
            (s["start_frame"].as_u64().unwrap(), s["end_frame"].as_u64().unwrap(), boxes)
        })
        .collect();
    Truth { frames: v["frames"].as_u64().unwrap(), segments }
}

impl Truth {
    pub fn boxes_at(&self, seq: u64) -> &[[f64; 4]] {
        self.segments.iter().find(|s| s.0 <= seq && seq < s.1).map(|s| s.2.as_slice()).unwrap_or(&[])
    }
}

pub fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let (x0, y0, x1, y1) = (a[0].max(b[0]), a[1].max(b[1]), a[2].min(b[2]), a[3].min(b[3]));
    let inter = (x1 - x0).max(0.0) * (y1 - y0).max(0.0);
    let union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

/// The `text_boxes` bboxes of one NDJSON line.
pub fn bboxes(line: &serde_json::Value, node: &str) -> Vec<[f64; 4]> {
    line["results"][node]["text_boxes"]
        .as_array()
        .unwrap_or_else(|| panic!("no {node}.text_boxes in {line}"))
        .iter()
        .map(|b| {
            let v = b["bbox"].as_array().unwrap();
            [0, 1, 2, 3].map(|i| v[i].as_f64().unwrap())
        })
        .collect()
}

/// `decoded D = processed P + dropped R + failed F` from the summary.
pub fn accounting(stderr: &str) -> (u64, u64, u64, u64) {
    let line = stderr.lines().find(|l| l.starts_with("frames: decoded")).unwrap_or_else(|| panic!("no accounting line in:\n{stderr}"));
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(line.contains("(all accounted for)"), "{line}");
    (n[0], n[1], n[2], n[3])
}

/// The first `frames` frames of `sample`, turned 180° (made with the ffmpeg CLI) into `dir`.
pub fn turned_clip(dir: &Path, sample: &str, frames: u32) -> PathBuf {
    let out = dir.join("turned.mp4");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
        .arg(root().join("samples").join(sample))
        .args(["-frames:v", &frames.to_string(), "-vf", "hflip,vflip", "-c:v", "libx264", "-threads", "1"])
        .arg(&out)
        .status()
        .expect("run ffmpeg");
    assert!(st.success(), "ffmpeg could not turn {sample}");
    out
}

/// Frame-level F1 of speech segments on a 32 ms grid.
pub fn speech_f1(got: &[(f64, f64)], want: &[(f64, f64)], duration: f64) -> f64 {
    let bins = (duration / 0.032).ceil() as usize;
    let label = |segs: &[(f64, f64)], i: usize| {
        let (a, b) = (i as f64 * 0.032, (i + 1) as f64 * 0.032);
        segs.iter().map(|(s, e)| (b.min(*e) - a.max(*s)).max(0.0)).sum::<f64>() >= 0.016
    };
    let (mut tp, mut fp, mut fneg) = (0.0, 0.0, 0.0);
    for i in 0..bins {
        match (label(got, i), label(want, i)) {
            (true, true) => tp += 1.0,
            (true, false) => fp += 1.0,
            (false, true) => fneg += 1.0,
            _ => {}
        }
    }
    2.0 * tp / (2.0 * tp + fp + fneg)
}

/// (status, body) of `GET path`, or `None` when nothing answers.
pub fn get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).ok()?;
    use std::io::{Read, Write};
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    Some((head.split_whitespace().nth(1)?.parse().ok()?, body.to_string()))
}

/// Check lines (frames and events of an ndjson sink) against docs/messages.schema.json.
pub fn check_messages(lines: &[serde_json::Value]) {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("docs/messages.schema.json")).unwrap()).unwrap();
    let (mut schemas, mut compiler) = (boon::Schemas::new(), boon::Compiler::new());
    compiler.add_resource("messages.schema.json", schema).unwrap();
    let idx = compiler.compile("messages.schema.json", &mut schemas).unwrap();
    for l in lines {
        if let Err(e) = schemas.validate(l, idx) {
            panic!("{l} does not match docs/messages.schema.json:\n{e:#}");
        }
    }
}
