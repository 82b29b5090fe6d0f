//! Integration tests: the real binary on the real samples and models.

mod util;

use std::time::{Duration, Instant};

use util::*;

#[test]
fn bundled_pipelines_validate() {
    require_assets();
    let files: Vec<String> = std::fs::read_dir(root().join("pipelines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        // It needs a GPU: tests/validate.rs checks it either way.
        .filter(|p| !p.ends_with("gpu.toml"))
        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert!(!files.is_empty());
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let o = bin().args(&args).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    // The shipped files are examples: none warns (each warning is something probably not meant).
    assert!(!err.contains("warning") && !err.contains("WARN"), "{err}");
    // The result is on stdout, one line per file.
    for f in &files {
        assert!(out.lines().any(|l| l.starts_with(&format!("{f}: ok ("))), "{f} not said ok on stdout:\n{out}\nstderr:\n{err}");
    }
    assert!(!err.contains(": ok ("), "{err}");
}

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

/// Each broken file fails with exit 2 and every error located exactly.
#[test]
fn broken_pipelines_report_every_error_with_its_position() {
    require_assets();
    let cases: &[(&str, &[&str])] = &[
        (
            "typo.toml",
            &[
                "error: unknown field `hieght`, expected one of `width`, `height`, `resize`, `pad_value`, `color`, `mean`, `std`, `scale`, `layout`, `interpolation`, `device`, `device_id`\n  --> tests/data/broken/typo.toml:9:1\n",
                "  = help: did you mean `height`?\n",
                "error: invalid type: integer `42`, expected a string\n  --> tests/data/broken/typo.toml:14:9\n",
                "2 errors found",
            ],
        ),
        (
            "graph.toml",
            &[
                "error: type mismatch: stage `a` (preprocess) takes video frames, but `c` (text_detection) produces text boxes\n  --> tests/data/broken/graph.toml:8:18\n",
                "error: cycle: [ b -> c -> a -> b ]\n  --> tests/data/broken/graph.toml:14:11\n",
                "error: model file not found: tests/data/broken/../../../models/ppocr/no-such-model.onnx\n  --> tests/data/broken/graph.toml:15:9\n",
                "error: sink `out` names unknown input `boxs`\n  --> tests/data/broken/graph.toml:23:16\n",
                "  = help: did you mean `b`?\n",
                "error: sink `bad` names unknown input `tensor`\n  --> tests/data/broken/graph.toml:32:23\n",
                "5 errors found",
            ],
        ),
        (
            "shape.toml",
            &[
                "error: text_detection `boxes` needs a probability map [N, 1, H, W], but `rec` outputs `softmax_11.tmp_0` with shape [?, ?, 6625]\n  --> tests/data/broken/shape.toml:19:8\n",
                "error: model `../../../models/silero/silero_vad.onnx` input `input` has shape [?, ?], but preprocess `pre` produces a 4-d image tensor [1, 3, 40, 320]\n  --> tests/data/broken/shape.toml:29:9\n",
                "2 errors found",
            ],
        ),
    ];
    for (file, expected) in cases {
        let path = format!("tests/data/broken/{file}");
        let o = bin().args(["validate", &path]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{file}: {err}");
        for e in *expected {
            assert!(err.contains(e), "{file}: expected\n{e}\nin\n{err}");
        }
        // `run` refuses the same file with the same exit code, before running anything.
        let o = bin().args(["run", &path]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "run {file}: {}", stderr(&o));
    }
}

#[test]
fn text_detection_finds_the_drawn_text_on_the_unseen_clip() {
    let (out, err) = run_ok(&["run", "tests/data/eval.toml", "--progress", "never"]);
    let truth = truth("eval-720p.truth.json");
    let lines = read_ndjson(&out.path().join("eval.ndjson"));
    assert_eq!(lines.len() as u64, truth.frames, "one line per frame");
    assert_eq!(accounting(&err), (truth.frames, truth.frames, 0, 0));
    let (mut good, mut far) = (0, 0);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["seq"], i as u64);
        assert_eq!(l["stream"], "cam");
        let pts = l["pts"].as_f64().unwrap();
        assert!((pts - i as f64 / 10.0).abs() < 1e-6, "pts {pts} of frame {i}");
        let want = truth.boxes_at(i as u64);
        let got = bboxes(l, "boxes");
        if want.iter().all(|t| got.iter().any(|g| iou(t, g) >= 0.5)) {
            good += 1;
        }
        // No box far from any text.
        far += got.iter().filter(|g| want.iter().all(|t| iou(t, g) < 0.1)).count();
    }
    assert!(good as f64 >= 0.9 * lines.len() as f64, "{good} of {} frames have every text box found", lines.len());
    assert_eq!(far, 0, "boxes far from any text");
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

/// Start `run tests/data/eval.toml` (plus `extra` arguments) writing into
/// `out`, and return once its NDJSON has `lines` lines.
fn spawn_until_lines(out: &std::path::Path, extra: &[&str], lines: usize) -> std::process::Child {
    require_assets();
    let child = bin()
        .args(["run", "tests/data/eval.toml", "--progress", "never"])
        .args(extra)
        .env("INFER_STREAM_TEST_OUT", out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ndjson = out.join("eval.ndjson");
    let t0 = Instant::now();
    while std::fs::read_to_string(&ndjson).map(|s| s.lines().count()).unwrap_or(0) < lines {
        assert!(t0.elapsed() < Duration::from_secs(60), "no output after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Interrupt a run mid-way: it drains, leaves complete NDJSON, and exits 128 + signal.
fn interrupt(signal: &str, code: i32) {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report.json");
    let child = spawn_until_lines(out.path(), &["--report", report.to_str().unwrap()], 10);
    let ndjson = out.path().join("eval.ndjson");
    let st = std::process::Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    let text = std::fs::read_to_string(&ndjson).unwrap();
    assert!(text.ends_with('\n'), "last line complete");
    let lines = read_ndjson(&ndjson);
    assert!(lines.len() < 300, "stopped early ({} lines)", lines.len());
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert_eq!((dropped, failed), (0, 0));
    assert_eq!(decoded, processed, "frames in flight drained");
    assert_eq!(lines.len() as u64, processed, "every processed frame has its line");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["frames"]["processed"], processed);
}

#[test]
fn sigint_drains_and_exits_130() {
    interrupt("-INT", 130);
}

#[test]
fn sigterm_drains_and_exits_143() {
    interrupt("-TERM", 143);
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
fn not_media_is_a_located_error() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), &["run", "tests/data/not-media.toml"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: source `cam`: cannot open samples/not-media.mp4: Invalid data found when processing input\n  --> tests/data/not-media.toml:4:7"), "{err}");
}

#[test]
fn missing_onnx_runtime_is_a_clear_error() {
    let out = tempfile::tempdir().unwrap();
    require_assets();
    let o = bin()
        .args(["run", "tests/data/eval.toml"])
        .env("INFER_STREAM_TEST_OUT", out.path())
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot load ONNX Runtime from /nonexistent/libonnxruntime.so (ORT_DYLIB_PATH): file not found"), "{err}");
    // The command-line flag wins over the environment.
    let lib = root().join(".deps/onnxruntime/libonnxruntime.so");
    let o = bin()
        .args(["validate", "tests/data/eval.toml", "--ort-library"])
        .arg(&lib)
        .env("INFER_STREAM_TEST_OUT", out.path())
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn unavailable_provider_falls_back_loudly_or_fails_when_required() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), &["run", "tests/data/fallback.toml", "--progress", "never"]);
    let err = stderr(&o);
    if err.contains("on cuda") {
        eprintln!("a CUDA provider loaded here: the fallback path is not exercised");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("WARN") && err.contains("stage `det`: execution provider `cuda` is not available (CUDA execution provider is not enabled in this build.); falling back to `cpu`"), "{err}");
    assert!(err.contains("ch_PP-OCRv4_det_infer.onnx on cpu"), "{err}");
    assert!(err.contains("det: execution provider cpu (fallback from cuda)"), "summary names the fallback: {err}");
    let o = run_in(out.path(), &["run", "tests/data/required.toml"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("required execution provider `cuda` is not available"), "{err}");
    assert!(!out.path().join("required.ndjson").exists() || read_ndjson(&out.path().join("required.ndjson")).is_empty());
}

#[test]
fn graph_renders_dot_and_mermaid() {
    let o = bin().args(["graph", "pipelines/text-detection.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let dot = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        dot,
        "digraph \"text-detection\" {\n  rankdir=LR;\n  \"cam\" [shape=invhouse, label=\"cam\\n(file)\"];\n  \"pre\" [shape=box, label=\"pre\\n(preprocess)\"];\n  \"det\" [shape=box, label=\"det\\n(infer)\"];\n  \"boxes\" [shape=box, label=\"boxes\\n(text_detection)\"];\n  \"results\" [shape=cylinder, label=\"results\\n(ndjson)\"];\n  \"cam\" -> \"pre\";\n  \"pre\" -> \"det\";\n  \"det\" -> \"boxes\";\n  \"boxes\" -> \"results\";\n}\n"
    );
    let o = bin().args(["graph", "pipelines/text-detection.toml", "--format", "mermaid"]).output().unwrap();
    let m = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        m,
        "flowchart LR\n  cam[/\"cam<br/>file\"/]\n  pre[\"pre<br/>preprocess\"]\n  det[\"det<br/>infer\"]\n  boxes[\"boxes<br/>text_detection\"]\n  results[(\"results<br/>ndjson\")]\n  cam --> pre\n  pre --> det\n  det --> boxes\n  boxes --> results\n"
    );
}

#[test]
fn usage_errors_exit_2_and_help_has_examples() {
    let o = bin().args(["run"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = bin().args(["--help"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let h = String::from_utf8(o.stdout).unwrap();
    assert!(h.contains("Examples:") && h.contains("infer-stream run pipelines/text-detection.toml"), "{h}");
    // Bad values and unwritable output files are refused before anything runs.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/folder/r.json");
    let folder = dir.path().to_str().unwrap();
    for (args, want) in [
        (vec!["bench", "pipelines/testsrc-bench.toml", "--duration", "nan"], "seconds must be a positive number"),
        (vec!["bench", "pipelines/testsrc-bench.toml", "--duration", "inf"], "seconds must be a positive number"),
        (vec!["bench", "pipelines/testsrc-bench.toml", "--frames", "10", "--warmup", "20"], "--warmup 20 leaves none of --frames 10"),
        (vec!["bench", "pipelines/testsrc-bench.toml", "--plot", "x.txt"], "--plot x.txt: the file name must end in .svg or .png"),
        (vec!["run", "pipelines/testsrc-bench.toml", "--report", missing.to_str().unwrap()], "No such file or directory"),
        (vec!["run", "pipelines/testsrc-bench.toml", "--trace", folder], "is a folder"),
    ] {
        let t0 = Instant::now();
        let o = bin().args(&args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{args:?}: {err}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{args:?} ran before refusing");
    }
    assert!(!missing.exists() && std::fs::read_dir(dir.path()).unwrap().next().is_none(), "a refused run left files behind");
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

/// A second Ctrl-C 30 ms after the first is the same stop (a key held, a
/// supervisor signalling the process and its group): the run drains and
/// exits 130. Only one a second or more later exits at once
/// (`tests/shutdown.rs`).
#[test]
fn second_signal_within_a_second_is_the_same_stop() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let child = spawn_until_lines(out.path(), &[], 3);
    let ndjson = out.path().join("eval.ndjson");
    let pid = child.id().to_string();
    for _ in 0..2 {
        assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
        std::thread::sleep(Duration::from_millis(30));
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(!err.contains("exiting now"), "{err}");
    let (decoded, processed, dropped, failed) = accounting(&err);
    assert_eq!((dropped, failed), (0, 0), "{err}");
    assert_eq!(decoded, processed, "frames in flight drained");
    assert_eq!(read_ndjson(&ndjson).len() as u64, processed);
}

#[test]
fn inspect_reads_signature_and_metadata() {
    require_assets();
    let o = bin().args(["inspect", "models/ppocr/ch_PP-OCRv4_det_infer.onnx"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("inputs:\n  x                                float32  [?, 3, ?, ?]\n"), "{text}");
    assert!(text.contains("outputs:\n  sigmoid_0.tmp_0                  float32  [?, 1, ?, ?]\n"), "{text}");
    let o = bin().args(["inspect", "models/ppocr/ch_PP-OCRv4_rec_infer.onnx", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["inputs"][0]["name"], "x");
    assert_eq!(v["outputs"][0]["dims"], serde_json::json!([-1, -1, 6625]));
    // The recogniser's dictionary: one character per line, 6623 of them (+ blank and space = 6625 classes).
    let dict = v["metadata"]["character"].as_str().unwrap();
    assert_eq!(dict.lines().count(), 6623);
    let o = bin().args(["inspect", "samples/not-media.mp4"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "not a model: {}", stderr(&o));
    let o = bin().args(["inspect", "models/nothing.onnx"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("models/nothing.onnx: no such model file"));
}

#[test]
fn doctor_states_what_this_machine_has() {
    require_assets();
    let o = bin().args(["doctor", "--json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["ffmpeg"]["versions"].as_str().unwrap().starts_with("libavcodec "), "{v}");
    assert_eq!(v["onnxruntime"]["version"], "1.31.1", "the library scripts/fetch-models.sh installs");
    assert_eq!(v["onnxruntime"]["origin"], "build tree", "nothing beside the test binary: the build tree's library");
    // The PyPI onnxruntime wheel is CPU-only: saying otherwise would be a silent lie.
    assert_eq!(v["onnxruntime"]["providers"], serde_json::json!(["cpu"]));
    assert!(v["inference"].as_str().unwrap().starts_with("cpu"), "{v}");
    let gpu = std::path::Path::new("/dev/nvidia0").exists();
    if cfg!(feature = "cuda") && !gpu {
        assert_eq!(v["cuda"]["driver"], false);
        assert_eq!(v["cuda"]["devices"], 0);
        assert!(v["decode"].as_str().unwrap().starts_with("FFmpeg software"), "{v}");
        // Debian's FFmpeg has h264_nvenc, which cannot open without a GPU: said, with the CPU encoder instead.
        let encode = v["encode"].as_str().unwrap();
        assert!(encode.starts_with("libx264: h264_nvenc unusable here ("), "{v}");
    }
    // The system's Python 3.11 (Debian 12) with Debian's numpy (scripts/install-deps.sh).
    if cfg!(feature = "python") {
        assert!(v["python"]["version"].as_str().unwrap().starts_with("3."), "{v}");
        assert!(v["python"]["numpy"].as_str().unwrap().starts_with("1."), "{v}");
    }
    if cfg!(feature = "gstreamer") {
        assert!(v["gstreamer"]["version"].as_str().unwrap().starts_with("GStreamer 1."), "{v}");
    }
    let o = bin().args(["doctor"]).env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so").output().unwrap();
    assert_eq!(o.status.code(), Some(1), "ONNX Runtime cannot load: the report says why, the exit code says so");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("ONNX Runtime  not loaded: cannot load ONNX Runtime from /nonexistent/libonnxruntime.so (ORT_DYLIB_PATH)"),
        "{text}"
    );
    assert!(text.contains("=> inference: none: ONNX Runtime could not be loaded"), "{text}");
}

/// Character error rate of the OCR pipeline on `input` (default: the eval
/// clip) against the eval clip's truth; `turned`: the clip was turned 180°.
fn ocr_cer(input: Option<&std::path::Path>, turned: bool, frames: usize) -> (f64, String) {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.args(["run", "tests/data/ocr.toml", "--progress", "never"]).env("INFER_STREAM_TEST_OUT", out.path());
    if let Some(i) = input {
        cmd.env("OCR_INPUT", i);
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let truth_v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("samples/eval-720p.truth.json")).unwrap()).unwrap();
    let lines = read_ndjson(&out.path().join("ocr.ndjson"));
    assert_eq!(lines.len(), frames);
    let truth_box = |b: &serde_json::Value| {
        let t = ["x0", "y0", "x1", "y1"].map(|k| b[k].as_f64().unwrap());
        if turned { [1280.0 - t[2], 720.0 - t[3], 1280.0 - t[0], 720.0 - t[1]] } else { t }
    };
    let (mut errors, mut chars, mut spurious) = (0usize, 0usize, 0usize);
    for l in &lines {
        let seq = l["seq"].as_u64().unwrap();
        let seg = truth_v["segments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["start_frame"].as_u64().unwrap() <= seq && seq < s["end_frame"].as_u64().unwrap())
            .unwrap();
        let got: Vec<([f64; 4], String)> = l["results"]["text"]["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let b = t["bbox"].as_array().unwrap();
                ([0, 1, 2, 3].map(|i| b[i].as_f64().unwrap()), t["text"].as_str().unwrap().to_string())
            })
            .collect();
        for b in seg["boxes"].as_array().unwrap() {
            let want = b["text"].as_str().unwrap();
            let tb = truth_box(b);
            // The strings read inside this truth box (a line may come back in pieces), in reading order.
            let mut parts: Vec<&([f64; 4], String)> = got
                .iter()
                .filter(|g| {
                    let inter = (g.0[2].min(tb[2]) - g.0[0].max(tb[0])).max(0.0) * (g.0[3].min(tb[3]) - g.0[1].max(tb[1])).max(0.0);
                    inter >= 0.5 * (g.0[2] - g.0[0]) * (g.0[3] - g.0[1])
                })
                .collect();
            parts.sort_by(|a, b| if turned { b.0[0].total_cmp(&a.0[0]) } else { a.0[0].total_cmp(&b.0[0]) });
            let read = parts.iter().map(|g| g.1.as_str()).collect::<Vec<_>>().join(" ");
            errors += strsim::levenshtein(want, &read);
            chars += want.chars().count();
        }
        spurious += got.iter().filter(|g| seg["boxes"].as_array().unwrap().iter().all(|b| iou(&truth_box(b), &g.0) < 0.1)).count();
    }
    assert_eq!(spurious, 0, "recognised text where nothing was drawn");
    (errors as f64 / chars as f64, std::fs::read_to_string(out.path().join("ocr.vtt")).unwrap())
}

#[test]
fn ocr_reads_the_drawn_strings_on_the_unseen_clip() {
    let (cer, vtt) = ocr_cer(None, false, 300);
    eprintln!("OCR character error rate on the evaluation clip: {cer:.4}");
    assert!(cer <= 0.05, "CER {cer:.4} > 5%");
    // Subtitles: a WebVTT cue for each string while it is on screen.
    assert!(vtt.starts_with("WEBVTT\n\n"));
    assert!(vtt.contains("00:00:00.000 --> 00:00:05.000\nMorning News\n"), "{vtt}");
    assert!(vtt.contains("00:00:05.000 --> 00:00:10.000\nLIMITED EDITION\n"), "{vtt}");
}

/// Upside-down text: the orientation classifier turns those regions before recognition.
#[test]
fn ocr_reads_text_turned_upside_down() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let turned = turned_clip(dir.path(), "eval-720p.mp4", 60);
    let (cer, _) = ocr_cer(Some(&turned), true, 60);
    eprintln!("OCR character error rate on the clip turned 180°: {cer:.4}");
    assert!(cer <= 0.05, "CER {cer:.4} > 5%");
}

/// The generated models output known candidates (tests/models/make.py); after
/// the confidence filter, NMS and the letterbox (640x360 → 64x64: scale 1/10,
/// 14 px of padding on top), exactly these objects must come out.
#[test]
fn yolo_layouts_decode_to_the_exact_boxes() {
    require_assets();
    // (x0, y0, x1, y1) in source pixels, score, class, label.
    let cat = ([150.0, 10.0, 250.0, 110.0], 0.9, 0, "cat");
    let cat2 = ([160.0, 20.0, 260.0, 120.0], 0.8, 0, "cat");
    let dog = ([160.0, 20.0, 260.0, 120.0], 0.7, 1, "dog");
    let bird = ([460.0, 230.0, 540.0, 290.0], 0.3, 2, "bird");
    for (model, want) in [("yolov8", vec![cat, dog, bird]), ("yolov5", vec![cat, dog, bird]), ("end2end", vec![cat, cat2, dog, bird])] {
        let out = tempfile::tempdir().unwrap();
        let o = bin()
            .args(["run", "tests/data/yolo.toml", "--progress", "never"])
            .env("INFER_STREAM_TEST_OUT", out.path())
            .env("YOLO_MODEL", root().join(format!("tests/models/{model}.onnx")))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{model}: {}", stderr(&o));
        let lines = read_ndjson(&out.path().join("yolo.ndjson"));
        assert_eq!(lines.len(), 20, "{model}");
        for l in &lines {
            let got: Vec<_> = l["results"]["objects"]["detections"].as_array().unwrap().iter().collect();
            assert_eq!(got.len(), want.len(), "{model}: {l}");
            for (g, (bbox, score, class, label)) in got.iter().zip(&want) {
                let b: Vec<f64> = g["bbox"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                assert!(b.iter().zip(bbox).all(|(x, y)| (x - y).abs() < 0.01), "{model}: {b:?} vs {bbox:?}");
                assert!((g["score"].as_f64().unwrap() - score).abs() < 1e-4, "{model}: {g}");
                assert_eq!((g["class"].as_u64().unwrap(), g["label"].as_str().unwrap()), (*class, *label), "{model}");
            }
        }
    }
}

/// Four streams into one detector with `batch = { max = 4 }`: batches of four
/// form, and every frame's boxes equal those of an unbatched run.
#[test]
fn batches_form_across_streams_and_split_back_exactly() {
    let (out, err) = run_ok(&["run", "tests/data/batching.toml", "--progress", "never"]);
    assert_eq!(accounting(&err), (400, 400, 0, 0));
    let line = err.lines().find(|l| l.starts_with("det: batches ")).unwrap_or_else(|| panic!("no batch line:\n{err}"));
    let in_fours: u64 = line
        .trim_start_matches("det: batches ")
        .split(" (")
        .next()
        .unwrap()
        .split(", ")
        .filter_map(|p| p.split_once('×'))
        .filter(|(_, size)| *size == "4")
        .map(|(count, _)| count.parse::<u64>().unwrap() * 4)
        .sum();
    assert!(in_fours >= 360, "most frames run in batches of 4: {line}");
    let o = run_in(out.path(), &["run", "tests/data/single.toml", "--progress", "never"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let single = read_ndjson(&out.path().join("single.ndjson"));
    let batched = read_ndjson(&out.path().join("batching.ndjson"));
    for cam in ["cam0", "cam1", "cam2", "cam3"] {
        let mine: Vec<_> = batched.iter().filter(|l| l["stream"] == cam).collect();
        assert_eq!(mine.len(), 100, "{cam}");
        for (b, s) in mine.iter().zip(&single) {
            assert_eq!(b["seq"], s["seq"]);
            let (bb, sb) = (bboxes(b, "boxes"), bboxes(s, "boxes"));
            assert_eq!(bb.len(), sb.len(), "{cam} frame {}", b["seq"]);
            for (x, y) in bb.iter().zip(&sb) {
                assert!(x.iter().zip(y).all(|(p, q)| (p - q).abs() < 0.5), "{cam} frame {}: {x:?} vs {y:?}", b["seq"]);
            }
        }
    }
}

/// `io_binding = "on"` on the CPU provider (the same binding code a GPU
/// provider uses, in host memory): the batched run's results equal those of
/// plain runs exactly, and the start-up line says the input is bound.
#[test]
fn io_binding_gives_the_same_results_as_plain_runs() {
    let (plain, _) = run_ok(&["run", "tests/data/batching.toml", "--progress", "never"]);
    let bound = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("tests/data/batching.toml")).unwrap();
    let with_binding = text
        .replace("../../", &format!("{}/", root().display()))
        .replace("batch = { max = 4, timeout_ms = 50 }", "batch = { max = 4, timeout_ms = 50 }\nio_binding = \"on\"");
    assert!(with_binding.contains("io_binding = \"on\""));
    let toml = bound.path().join("bound.toml");
    std::fs::write(&toml, with_binding).unwrap();
    let o = run_in(bound.path(), &["run", toml.to_str().unwrap(), "--progress", "never"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("IoBinding in host memory"), "the binding is not reported:\n{err}");
    let (a, b) = (read_ndjson(&plain.path().join("batching.ndjson")), read_ndjson(&bound.path().join("batching.ndjson")));
    assert_eq!(a.len(), 400);
    let key = |l: &serde_json::Value| (l["stream"].as_str().unwrap().to_string(), l["seq"].as_u64().unwrap());
    let plain: std::collections::HashMap<_, _> = a.iter().map(|l| (key(l), &l["results"])).collect();
    let mut boxes = 0;
    for l in &b {
        assert_eq!(plain.get(&key(l)), Some(&&l["results"]), "{:?}", key(l));
        boxes += bboxes(l, "boxes").len();
    }
    assert_eq!(b.len(), 400);
    assert!(boxes > 400, "the comparison covers real detections ({boxes} boxes)");
}

/// The orientation classifier on crops: upright text reads upright, and the
/// same clip turned 180° (made here with the ffmpeg CLI) reads upside down.
#[test]
fn classification_on_crops_tells_orientation() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let flipped = turned_clip(out.path(), "eval-720p.mp4", 60);
    for (input, want) in [(root().join("samples/eval-720p.mp4"), "upright"), (flipped, "upside-down")] {
        let ndjson = out.path().join(format!("{want}.ndjson"));
        let o = bin()
            .args(["run", "pipelines/classify.toml", "--progress", "never"])
            .env("CLASSIFY_INPUT", &input)
            .env("CLASSIFY_OUTPUT", &ndjson)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let (mut right, mut total) = (0, 0);
        for l in read_ndjson(&ndjson) {
            let classes = l["results"]["orientation"]["classes"].as_array().unwrap();
            // One classification per detected region, with its box.
            assert_eq!(classes.len(), l["results"]["boxes"]["text_boxes"].as_array().unwrap().len());
            for c in classes {
                assert!(c["bbox"].is_array());
                total += 1;
                right += usize::from(c["top"][0]["label"] == want);
            }
        }
        assert!(total > 100 && right as f64 >= 0.95 * total as f64, "{want}: {right} of {total}");
    }
}

/// Silero VAD on speech it was never tuned on (espeak-ng voices, known silences,
/// light noise), from a WAV and from compressed audio.
#[test]
fn vad_finds_the_speech_segments() {
    require_assets();
    for (input, truth_file) in
        [("samples/speech-eval.wav", "samples/speech-eval.truth.json"), ("samples/speech-short.m4a", "samples/speech-short.truth.json")]
    {
        let out = tempfile::tempdir().unwrap();
        let ndjson = out.path().join("vad.ndjson");
        let srt = out.path().join("vad.srt");
        let o = bin()
            .args(["run", "pipelines/vad.toml", "--progress", "never"])
            .env("VAD_INPUT", root().join(input))
            .env("VAD_OUTPUT", &ndjson)
            .env("VAD_SRT", &srt)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{input}: {err}");
        assert!(err.contains("real-time factor"), "{err}");
        let lines = read_ndjson(&ndjson);
        let truth: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root().join(truth_file)).unwrap()).unwrap();
        let want: Vec<(f64, f64)> =
            truth["segments"].as_array().unwrap().iter().map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap())).collect();
        // Windows are 32 ms apart, with exact timestamps.
        for (i, l) in lines.iter().enumerate() {
            assert!((l["pts"].as_f64().unwrap() - i as f64 * 0.032).abs() < 1e-9, "{l}");
        }
        let last = lines.last().unwrap();
        let got: Vec<(f64, f64)> = last["results"]["vad"]["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap()))
            .collect();
        // Live events: every segment opened once and closed once, in order.
        let events =
            |k: &str| lines.iter().flat_map(|l| l["results"]["vad"][k].as_array().cloned().unwrap_or_default()).collect::<Vec<_>>();
        let (started, ended) = (events("started"), events("ended"));
        assert_eq!((started.len(), ended.len()), (got.len(), got.len()), "{input}");
        for ((s, e), seg) in started.iter().zip(&ended).zip(&got) {
            assert_eq!(s["start"].as_f64().unwrap(), seg.0);
            assert_eq!(e["end"].as_f64().unwrap(), seg.1);
        }
        // One SRT cue per segment, numbered from 1, with the same times.
        let srt = std::fs::read_to_string(&srt).unwrap();
        let cues: Vec<&str> = srt.split("\n\n").filter(|c| !c.trim().is_empty()).collect();
        assert_eq!(cues.len(), got.len(), "{srt}");
        let ts = |s: f64| {
            let ms = (s * 1000.0).round() as u64;
            format!("{:02}:{:02}:{:02},{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
        };
        for (i, (cue, (s, e))) in cues.iter().zip(&got).enumerate() {
            assert_eq!(*cue, format!("{}\n{} --> {}\n(speech)", i + 1, ts(*s), ts(*e)));
        }
        let f1 = speech_f1(&got, &want, truth["duration"].as_f64().unwrap());
        eprintln!("{input}: {} segments (truth {}), F1 at 32 ms = {f1:.3}", got.len(), want.len());
        assert!(f1 >= 0.9, "{input}: F1 {f1:.3}");
    }
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

/// Variables under which ONNX Runtime keeps its telemetry off by itself: the
/// tests remove them, so they check what infer-stream does on a user's machine.
const CI_VARIABLES: [&str; 14] = [
    "CI",
    "TF_BUILD",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "CIRCLECI",
    "TRAVIS",
    "JENKINS_URL",
    "CODEBUILD_BUILD_ID",
    "BUILDKITE",
    "TEAMCITY_VERSION",
    "APPVEYOR",
    "BITBUCKET_BUILD_NUMBER",
    "SYSTEM_TEAMFOUNDATIONCOLLECTIONURI",
    "ORT_RUNNING_UNIT_TESTS",
];

/// `c` with a fresh HOME and no CI markers or telemetry setting inherited.
fn at_home(mut c: std::process::Command, home: &std::path::Path) -> std::process::Command {
    c.env("HOME", home).env_remove("XDG_CACHE_HOME").env_remove("ORT_DISABLE_TELEMETRY");
    for v in CI_VARIABLES {
        c.env_remove(v);
    }
    c
}

/// ONNX Runtime keeps no telemetry record (its device id and machine facts
/// under ~/.cache/Microsoft) for `run`, `inspect` or `doctor`, and a run
/// under a small file-size limit is not killed by that file (SIGXFSZ).
#[test]
fn onnx_runtime_writes_no_telemetry() {
    require_assets();
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let cache = home.path().join(".cache/Microsoft");
    let o = at_home(bin(), home.path()).args(["inspect", "models/ppocr/ch_PP-OCRv4_det_infer.onnx"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!cache.exists(), "inspect left {}", cache.display());
    let o = at_home(bin(), home.path()).args(["doctor", "--json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!cache.exists(), "doctor left {}", cache.display());
    let mut sh = std::process::Command::new("sh");
    sh.current_dir(root());
    let run = format!("ulimit -f 100 && exec {} run tests/data/fallback.toml --progress never", env!("CARGO_BIN_EXE_infer-stream"));
    let o = at_home(sh, home.path()).args(["-c", &run]).env("INFER_STREAM_TEST_OUT", out.path()).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "run under ulimit -f 100: {:?}: {err}", o.status);
    assert!(!cache.exists(), "run left {}", cache.display());
    assert!(!read_ndjson(&out.path().join("fallback.ndjson")).is_empty());
}

/// A library named by `--ort-library` that is not there is a bad argument
/// (exit 2, said before anything runs), for every command that takes one.
#[test]
fn a_missing_ort_library_argument_exits_2() {
    require_assets();
    let model = "models/ppocr/ch_PP-OCRv4_det_infer.onnx";
    for args in [
        vec!["inspect", model, "--ort-library", "/nope.so"],
        vec!["doctor", "--ort-library", "/nope.so"],
        vec!["run", "tests/data/fallback.toml", "--ort-library", "/nope.so"],
    ] {
        let o = bin().args(&args).env("INFER_STREAM_TEST_OUT", "/nonexistent").output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", args.join(" "));
        assert!(err.contains("error: --ort-library /nope.so: no such file; give the path of libonnxruntime.so"), "{err}");
    }
    // A file that is there but is not a library: also the argument's fault.
    let o = bin().args(["inspect", model, "--ort-library", "README.md"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: cannot load ONNX Runtime from README.md (--ort-library)"), "{err}");
}

/// A binary moved out of the build tree uses the library beside it (or in
/// `../lib`), and doctor says which; ORT_DYLIB_PATH still wins over both.
#[test]
fn a_moved_binary_uses_the_library_beside_it() {
    require_assets();
    let lib = root().join(".deps/onnxruntime/libonnxruntime.so.1.31.1");
    let place = |exe: &std::path::Path| {
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        if std::fs::hard_link(env!("CARGO_BIN_EXE_infer-stream"), exe).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_infer-stream"), exe).unwrap();
        }
    };
    let doctor = |exe: &std::path::Path, dylib: Option<&std::path::Path>| {
        let mut c = std::process::Command::new(exe);
        c.args(["doctor", "--json"]).env_remove("ORT_DYLIB_PATH");
        if let Some(d) = dylib {
            c.env("ORT_DYLIB_PATH", d);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["onnxruntime"]["library"].as_str().unwrap().to_string(), v["onnxruntime"]["origin"].as_str().unwrap().to_string())
    };
    let dir = tempfile::tempdir().unwrap();
    // <dir>/infer-stream with <dir>/libonnxruntime.so
    let exe = dir.path().join("infer-stream");
    place(&exe);
    let beside = dir.path().join("libonnxruntime.so");
    std::os::unix::fs::symlink(&lib, &beside).unwrap();
    assert_eq!(doctor(&exe, None), (beside.display().to_string(), "beside the binary".to_string()));
    assert_eq!(doctor(&exe, Some(&lib)), (lib.display().to_string(), "ORT_DYLIB_PATH".to_string()));
    // <dir>/bin/infer-stream with <dir>/lib/libonnxruntime.so
    let exe = dir.path().join("bin/infer-stream");
    place(&exe);
    std::fs::create_dir_all(dir.path().join("lib")).unwrap();
    std::os::unix::fs::symlink(&lib, dir.path().join("lib/libonnxruntime.so")).unwrap();
    let (library, origin) = doctor(&exe, None);
    assert_eq!(origin, "../lib beside the binary");
    assert_eq!(std::fs::canonicalize(&library).unwrap(), std::fs::canonicalize(&lib).unwrap(), "{library}");
}
