//! The GStreamer decode backend through the real binary: the same frames and
//! results as FFmpeg's, a user launch line, and located errors.

mod util;

use util::*;

fn pipeline(dir: &std::path::Path, name: &str, source: &str) -> std::path::PathBuf {
    let text = format!(
        "[sources.cam]\n{source}\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 640\nheight = 384\ncolor = \"bgr\"\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\
         [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\n\
         [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{}\"\n",
        root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx").display(),
        dir.join(format!("{name}.ndjson")).display()
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn gstreamer_backend_gives_the_frames_and_results_ffmpeg_gives() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let clip = root().join("samples/text-720p.mp4");
    let mut runs = Vec::new();
    for (name, backend) in [("ffmpeg", "ffmpeg"), ("gst", "gstreamer")] {
        let p = pipeline(dir.path(), name, &format!("kind = \"file\"\nuri = \"{}\"\nbackend = \"{backend}\"", clip.display()));
        let o = bin().arg("run").arg(&p).args(["--progress", "never"]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        if backend == "gstreamer" {
            assert!(err.contains("GStreamer: uridecodebin uri=\"file://"), "{err}");
            assert!(err.contains("cam: decode GStreamer (appsink)"), "{err}");
        }
        let (decoded, processed, _, _) = accounting(&err);
        assert_eq!((decoded, processed), (100, 100), "{name}");
        runs.push(read_ndjson(&dir.path().join(format!("{name}.ndjson"))));
    }
    // Both are exact H.264 decoders; GStreamer reads the colour matrix from the
    // caps where FFmpeg's stream is untagged, so the boxes agree closely, not exactly.
    // Timestamps: GStreamer keeps the container's start offset; the steps agree.
    let (mut same, mut total) = (0, 0);
    let pts = |v: &serde_json::Value| v["pts"].as_f64().unwrap();
    let (a0, b0) = (pts(&runs[0][0]), pts(&runs[1][0]));
    for (a, b) in runs[0].iter().zip(&runs[1]) {
        let (ba, bb) = (bboxes(a, "boxes"), bboxes(b, "boxes"));
        total += ba.len();
        same += ba.iter().filter(|x| bb.iter().any(|y| iou(x, y) >= 0.9)).count();
        assert!(((pts(a) - a0) - (pts(b) - b0)).abs() < 1e-3, "timestamps agree: {a} {b}");
    }
    assert!(total > 0 && same * 100 >= total * 98, "{same}/{total} boxes agree at IoU >= 0.9");
}

#[test]
fn gstreamer_launch_line_and_its_errors() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    // A user launch line (no file needed): exactly its frames.
    let p = pipeline(
        dir.path(),
        "pattern",
        "kind = \"file\"\nuri = \"pattern\"\nbackend = \"gstreamer\"\nlaunch = \"videotestsrc num-buffers=12 pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1\"",
    );
    let o = bin().arg("run").arg(&p).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(accounting(&err).1, 12, "{err}");
    let lines = read_ndjson(&dir.path().join("pattern.ndjson"));
    assert_eq!(lines.len(), 12);
    assert_eq!((lines[0]["width"].as_u64(), lines[0]["height"].as_u64()), (Some(320), Some(240)));
    // An element GStreamer does not have: exit 2, located at its name in `launch`.
    let p = pipeline(dir.path(), "bad", "kind = \"file\"\nuri = \"x\"\nbackend = \"gstreamer\"\nlaunch = \"nosuchelement ! fakesink\"");
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: source `cam`: GStreamer has no element `nosuchelement`"), "{err}");
    assert!(err.contains("bad.toml:5:11"), "{err}");
    // A file that is not media: exit 2, named.
    let p = pipeline(
        dir.path(),
        "notmedia",
        &format!("kind = \"file\"\nuri = \"{}\"\nbackend = \"gstreamer\"", root().join("samples/not-media.mp4").display()),
    );
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: source `cam`: GStreamer: "), "{err}");
}
