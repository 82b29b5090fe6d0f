//! `run` on media: bounds (`--frames`, `--duration`), containers, full queues,
//! truncated files, stdin, pacing, synthetic video, snapshots, and outputs that
//! survive a closed stderr or a full disk.

use std::time::{Duration, Instant};

use crate::util::*;

/// `run --frames N` stops each source after N frames and ends as at the end
/// of the input: drained, results flushed, summary and report, exit 0; a
/// bounded run can be traced.
#[test]
fn run_frames_bounds_a_run() {
    let out = tempfile::tempdir().unwrap();
    let (report, trace) = (out.path().join("report.json"), out.path().join("trace.json"));
    // The shipped pipeline, its output in `out`.
    let text = std::fs::read_to_string(root().join("pipelines/text-detection.toml")).unwrap();
    let r = root().display().to_string();
    let text = text
        .replace("../samples/", &format!("{r}/samples/"))
        .replace("../models/", &format!("{r}/models/"))
        .replace("../out/", &format!("{}/", out.path().display()));
    let p = out.path().join("p.toml");
    std::fs::write(&p, text).unwrap();
    let o = run_in(
        out.path(),
        &[
            "run",
            p.to_str().unwrap(),
            "--progress",
            "never",
            "--frames",
            "4",
            "--report",
            report.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(accounting(&err), (4, 4, 0, 0), "{err}");
    assert_eq!(read_ndjson(&out.path().join("text-detection.ndjson")).len(), 4);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["frames"]["processed"], 4, "{r:#}");
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(t.to_string().contains("\"det\""), "a span per frame per node");
    // 0 frames is no run.
    let o = run_in(out.path(), &["run", p.to_str().unwrap(), "--frames", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `run --duration S` stops an endless source after S seconds, then drains
/// and exits 0 with every frame accounted for and written.
#[test]
fn run_duration_bounds_an_endless_run() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("endless.toml");
    std::fs::write(
        &p,
        "[sources.cam]\nkind = \"testsrc\"\nwidth = 160\nheight = 96\nrate = 25\nrealtime = true\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"out.ndjson\"\n",
    )
    .unwrap();
    let mut child = bin()
        .args(["run", p.to_str().unwrap(), "--progress", "never", "--duration", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Not a timing: a guard so that a run that never stops fails instead of hanging the suite.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("run --duration 1 did not stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert!(processed > 0 && decoded == processed + dropped + failed, "{err}");
    assert_eq!(read_ndjson(&out.path().join("out.ndjson")).len() as u64, processed, "{err}");
}

#[test]
fn other_containers_fan_in_and_fan_out() {
    let (out, err) = run_ok(&["run", "tests/data/containers.toml", "--progress", "never"]);
    let (mkv, webm) = (truth("clip-1080p.truth.json"), truth("clip.truth.json"));
    let lines = read_ndjson(&out.path().join("containers.ndjson"));
    let total = mkv.frames + webm.frames;
    assert_eq!(accounting(&err), (total, total, 0, 0));
    assert_eq!(lines.len() as u64, total);
    for (stream, t, w) in [("mkv", &mkv, 1920), ("webm", &webm, 640)] {
        let mine: Vec<_> = lines.iter().filter(|l| l["stream"] == stream).collect();
        assert_eq!(mine.len() as u64, t.frames, "{stream}");
        assert!(mine.iter().enumerate().all(|(i, l)| l["seq"] == i as u64 && l["width"] == w), "{stream}: in order, source size kept");
        let hits = mine.iter().filter(|l| {
            let got = bboxes(l, "boxes");
            t.boxes_at(l["seq"].as_u64().unwrap()).iter().all(|b| got.iter().any(|g| iou(b, g) >= 0.5))
        });
        assert!(hits.count() as f64 >= 0.9 * t.frames as f64, "{stream}: text found in 90% of frames");
    }
    // The fan-out sink saw every frame from both of its inputs.
    let discard = err.lines().find(|l| l.starts_with("discard ")).expect("discard row");
    let cols: Vec<&str> = discard.split_whitespace().collect();
    assert_eq!(cols[2], (2 * total).to_string(), "{discard}");
}

#[test]
fn full_queue_drops_are_counted_and_accounted() {
    let (out, err) = run_ok(&["run", "tests/data/drop.toml", "--progress", "never"]);
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert_eq!(decoded, 120);
    assert!(dropped > 0, "a one-frame queue in front of the model drops: {err}");
    assert_eq!(failed, 0);
    assert_eq!(read_ndjson(&out.path().join("drop.ndjson")).len() as u64, processed);
    let det = err.lines().find(|l| l.starts_with("det ")).unwrap();
    assert_eq!(det.split_whitespace().nth(4), Some(dropped.to_string().as_str()), "{det}");
}

#[test]
fn truncated_file_yields_what_it_has() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), &["run", "tests/data/truncated.toml", "--progress", "never"]);
    let err = stderr(&o);
    // A cut file is a source error, said with how far it got; the frames it had are processed.
    assert_eq!(o.status.code(), Some(1), "{err}");
    let (decoded, processed, _, _) = accounting(&err);
    assert!(decoded > 0 && decoded < 100, "{err}");
    assert!(err.contains(&format!("truncated: ended early after {decoded} frames (expected about 100)")), "{err}");
    assert_eq!(read_ndjson(&out.path().join("truncated.ndjson")).len() as u64, processed);
}

#[test]
fn ndjson_to_stdout_keeps_stdout_clean() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), &["run", "tests/data/stdout.toml", "--progress", "always"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(lines.len(), 7);
    assert!(lines.iter().enumerate().all(|(i, l)| l["seq"] == i as u64 && l["stream"] == "cam" && l["width"] == 640));
    assert_eq!(accounting(&err), (7, 7, 0, 0));
}

/// `ffmpeg ... -f mpegts - | infer-stream run stdin.toml`: the container is probed from the pipe.
#[test]
fn reads_a_stream_piped_on_stdin() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let mut ffmpeg = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(root().join("samples/text-720p.mp4"))
        .args(["-c", "copy", "-f", "mpegts", "-"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = bin()
        .args(["run", "tests/data/stdin.toml", "--progress", "never"])
        .env("INFER_STREAM_TEST_OUT", out.path())
        .stdin(ffmpeg.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(ffmpeg.wait().unwrap().success());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(accounting(&err), (100, 100, 0, 0));
    let lines = read_ndjson(&out.path().join("stdin.ndjson"));
    let truth = truth("text-720p.truth.json");
    let found = lines.iter().filter(|l| {
        let got = bboxes(l, "boxes");
        truth.boxes_at(l["seq"].as_u64().unwrap()).iter().all(|t| got.iter().any(|g| iou(t, g) >= 0.5))
    });
    assert!(found.count() >= 90, "text found through the pipe");
}

/// `realtime = true` paces a file at its own rate: 20 frames at 10 fps take about 2 s.
#[test]
fn realtime_paces_a_file_like_a_camera() {
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report.json");
    let o = run_in(out.path(), &["run", "tests/data/realtime.toml", "--progress", "never", "--report", report.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("paced in real time"), "{err}");
    // The paced source's busy counts its waiting for the pace, and the summary says so.
    assert!(
        err.contains("busy: a source's counts reading its input, waiting for the network or the real-time pace included (cam "),
        "{err}"
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    // The last frame (pts 1.9 s) cannot go out before 1.9 s.
    assert!(r["wall_seconds"].as_f64().unwrap() >= 1.85, "{}", r["wall_seconds"]);
    let (decoded, processed, dropped, _) = accounting(&err);
    assert_eq!(decoded, 20);
    assert_eq!(processed + dropped, 20);
}

/// Synthetic video: the configured size, count and timestamps, with nothing text-like in it.
#[test]
fn testsrc_makes_synthetic_video() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let toml = out.path().join("testsrc.toml");
    let model = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    std::fs::write(
        &toml,
        format!(
            "[sources.gen]\nkind = \"testsrc\"\nwidth = 640\nheight = 360\nrate = 20\nduration = 1.5\n\
             [stages.pre]\nkind = \"preprocess\"\ninputs = [\"gen\"]\nwidth = 320\nheight = 192\n\
             [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\n\
             [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
             [sinks.out]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"out.ndjson\"\n",
            model.display()
        ),
    )
    .unwrap();
    let o = bin().args(["run"]).arg(&toml).args(["--progress", "never"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = read_ndjson(&out.path().join("out.ndjson"));
    assert_eq!(lines.len(), 30, "1.5 s at 20 fps");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!((l["width"].as_u64(), l["height"].as_u64()), (Some(640), Some(360)));
        assert!((l["pts"].as_f64().unwrap() - i as f64 * 0.05).abs() < 1e-3);
        assert!(bboxes(l, "boxes").is_empty(), "no text in synthetic video: {l}");
    }
    // Odd sizes are refused before anything runs.
    std::fs::write(&toml, std::fs::read_to_string(&toml).unwrap().replace("width = 640", "width = 641")).unwrap();
    let o = bin().args(["validate"]).arg(&toml).args(["--no-models"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("testsrc `gen`: sizes must be even and 2–8192, got 641"), "{}", stderr(&o));
}

/// Annotated snapshots: every 25th frame as PNG, with the text boxes drawn where they were found.
#[test]
fn images_sink_writes_annotated_snapshots() {
    let (out, _) = run_ok(&["run", "tests/data/snapshots.toml", "--progress", "never"]);
    let dir = out.path().join("snapshots");
    let mut files: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["cam-000000.png", "cam-000025.png", "cam-000050.png", "cam-000075.png"]);
    let lines = read_ndjson(&out.path().join("snap.ndjson"));
    for seq in [0usize, 25, 50, 75] {
        let img = image::open(dir.join(format!("cam-{seq:06}.png"))).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (1280, 720));
        for b in bboxes(&lines[seq], "boxes") {
            // The box outline is drawn in green at its top-left corner.
            let p = img.get_pixel(b[0].round() as u32, b[1].round() as u32);
            assert_eq!(p.0, [0, 255, 0], "frame {seq} box {b:?}");
        }
    }
}

/// A closed stderr (a log reader gone, `2>&1 | head`) is not a crash: the run
/// still writes every result and its report and exits with its own code, and
/// a broken pipeline file still exits 2.
#[test]
fn closed_stderr_loses_nothing() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report.json");
    let mut child = bin()
        .args(["run", "tests/data/stdout.toml", "--progress", "always", "--report", report.to_str().unwrap()])
        .env("INFER_STREAM_TEST_OUT", out.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut text = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut text).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "a closed stderr changed the exit code");
    assert_eq!(text.lines().count(), 7, "{text}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report written")).unwrap();
    assert_eq!(r["frames"]["processed"], 7, "{r}");
    let mut child = bin().args(["validate", "tests/data/broken/typo.toml"]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(2));
}

/// A disk that fills up mid-run (a file size limit here) fails the run
/// loudly, and the NDJSON file still ends with its last whole line: the
/// write that failed part-way is cut back.
#[test]
fn full_disk_leaves_whole_ndjson_lines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let toml = dir.path().join("p.toml");
    std::fs::write(
        &toml,
        format!(
            "[sources.cam]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nframes = 3000\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"{}\"\n",
            out.display()
        ),
    )
    .unwrap();
    // 40 blocks of 512 bytes; SIGXFSZ ignored, so a write past the limit fails with EFBIG.
    let script = format!("trap '' XFSZ; ulimit -f 40; exec \"$0\" run {} --progress never", toml.display());
    let o =
        std::process::Command::new("sh").args(["-c", &script, env!("CARGO_BIN_EXE_infer-stream")]).current_dir(root()).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("writing") && err.contains("r.ndjson"), "{err}");
    let text = std::fs::read(&out).unwrap();
    assert!(text.len() > 1000 && text.len() <= 40 * 512, "{} bytes", text.len());
    assert_eq!(text.last(), Some(&b'\n'), "the file ends with part of a line");
    let lines = read_ndjson(&out);
    assert!(lines.iter().enumerate().all(|(i, l)| l["seq"] == i as u64), "lines out of order or missing");
}
