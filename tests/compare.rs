//! `compare`, `bench --capacity` and `bench --sweep` on the real pipeline:
//! a pipeline agrees exactly with itself, a broken setting fails the gate
//! with its exit code, and the JSON reports match their schemas. Speed
//! figures are printed by scripts/capacity-check.sh, not asserted here.

mod util;

use util::*;

/// Validate `instance` against the JSON Schema in docs/`name`.
fn validate_schema(name: &str, instance: &serde_json::Value) {
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root().join("docs").join(name)).unwrap()).unwrap();
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(name, schema).unwrap();
    let idx = compiler.compile(name, &mut schemas).unwrap();
    if let Err(e) = schemas.validate(instance, idx) {
        panic!("output does not match docs/{name}:\n{e:#}\n{instance:#}");
    }
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", String::from_utf8_lossy(&o.stdout), stderr(o)))
}

/// text-detection.toml with a wrong normalisation, in `dir` (absolute paths): a
/// 0–255 scale written for the preprocess's 0–1 values, so the model sees a flat picture.
fn broken_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(root().join("pipelines/text-detection.toml")).unwrap();
    let root = root();
    let text = text
        .replace("../samples/", &format!("{}/samples/", root.display()))
        .replace("../models/", &format!("{}/models/", root.display()))
        .replace("../out/", &format!("{}/", dir.display()))
        .replace("std = [0.5, 0.5, 0.5]", "std = [127.5, 127.5, 127.5]");
    assert!(text.contains("127.5"), "the normalisation line moved");
    let p = dir.join("broken.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_pipeline_compared_with_itself_agrees_exactly() {
    let out = tempfile::tempdir().unwrap();
    let args = ["-q", "compare", "pipelines/text-detection.toml", "pipelines/text-detection.toml"];
    let o = run_in(
        out.path(),
        &[&args[..], &["--frames", "12", "--warmup", "2", "--rounds", "2", "--min-agreement", "1.0", "--json"]].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    validate_schema("compare-schema.json", &v);
    let a = v["agreement"].as_array().unwrap();
    assert_eq!(a.len(), 1, "{v:#}");
    assert_eq!(a[0]["kind"], "boxes");
    assert_eq!(a[0]["node_a"], "boxes");
    assert_eq!(a[0]["agreement"].as_f64(), Some(1.0));
    assert_eq!(a[0]["precision"].as_f64(), Some(1.0));
    assert_eq!(a[0]["recall"].as_f64(), Some(1.0));
    assert_eq!(a[0]["mean_iou"].as_f64(), Some(1.0));
    assert_eq!(a[0]["frames"], 12);
    // The clip has text in every frame: there were boxes to agree on.
    assert!(a[0]["count_a"].as_f64().unwrap() >= 12.0, "{v:#}");
    assert_eq!(v["disagreements"].as_array().unwrap().len(), 0);
    assert_eq!(v["passed"], true);
    assert_eq!(v["speed_a"]["fps"]["median"].as_f64().map(|f| f > 0.0), Some(true));
}

#[test]
fn a_broken_setting_fails_the_agreement_gate() {
    let out = tempfile::tempdir().unwrap();
    let broken = broken_copy(out.path());
    let pictures = out.path().join("disagree");
    let o = run_in(
        out.path(),
        &[
            "-q",
            "compare",
            "pipelines/text-detection.toml",
            broken.to_str().unwrap(),
            "--frames",
            "10",
            "--warmup",
            "2",
            "--rounds",
            "1",
            "--min-agreement",
            "0.9",
            "--worst",
            "2",
            "--write-disagreements",
            pictures.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(5), "{text}\n{}", stderr(&o));
    assert!(text.contains("FAILED") && text.contains("result: B regressed"), "{text}");
    // Side-by-side pictures of the frames that disagree most.
    let written: Vec<_> = std::fs::read_dir(&pictures).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(written.len(), 2, "{written:?}\n{text}");
    let (w, h) = image::image_dimensions(&written[0]).unwrap();
    assert_eq!((w, h), (1280 * 2 + 8, 720), "A and B side by side, at the clip's size");
}

#[test]
fn capacity_json_matches_its_schema() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(
        out.path(),
        &[
            "-q",
            "bench",
            "pipelines/capacity.toml",
            "--capacity",
            "--step-seconds",
            "1.5",
            "--step-warmup",
            "0.5",
            "--max-streams",
            "2",
            "--latency-budget",
            "60000",
            "--max-drops",
            "1",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    validate_schema("capacity-schema.json", &v);
    assert_eq!(v["schema"], "infer-stream.capacity/1");
    let steps = v["steps"].as_array().unwrap();
    // Doubling from 1 up to --max-streams (1, then 2), then the answer once more.
    let counts: Vec<u64> = steps.iter().map(|s| s["streams"].as_u64().unwrap()).collect();
    assert_eq!(counts, [1, 2, 2], "{v:#}");
    for s in steps {
        assert_eq!(s["sources"], s["streams"]);
        let f = &s["frames"];
        assert!(f["processed"].as_u64().unwrap() > 0, "{s:#}");
        // The window's accounting adds up (frames in flight at its ends aside).
        assert!(f["processed"].as_u64().unwrap() + f["dropped"].as_u64().unwrap() <= f["decoded"].as_u64().unwrap() + 16, "{s:#}");
    }
    // With every drop allowed and a minute of budget, both counts keep up.
    assert_eq!(v["streams"], 2, "{v:#}");
    assert!(v["limit"].is_null());
    assert!(v["answer"].as_str().unwrap().starts_with("2 streams of samples/eval-720p.mp4"), "{}", v["answer"]);
}

#[test]
fn sweep_json_matches_its_schema() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(
        out.path(),
        &[
            "-q",
            "bench",
            "pipelines/capacity.toml",
            "--sweep",
            "det.intra_threads=1,2",
            "--sweep",
            "pre.width=320",
            "--frames",
            "8",
            "--warmup",
            "2",
            "--rounds",
            "2",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    validate_schema("sweep-schema.json", &v);
    let labels: Vec<&str> = v["variants"].as_array().unwrap().iter().map(|x| x["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["det.intra_threads=1 pre.width=320", "det.intra_threads=2 pre.width=320"]);
    for x in v["variants"].as_array().unwrap() {
        assert_eq!(x["runs"].as_array().unwrap().len(), 2);
        for r in x["runs"].as_array().unwrap() {
            // 8 frames, 2 of them warm-up.
            assert!(r["frames"]["processed"].as_u64().unwrap() <= 8, "{r:#}");
        }
    }
    assert!(labels.contains(&v["best_throughput"]["variant"].as_str().unwrap()));
    assert!(labels.contains(&v["best_latency"]["variant"].as_str().unwrap()));
}

#[test]
fn a_sweep_of_an_unknown_node_or_key_is_a_clear_error() {
    let o = bin().args(["bench", "pipelines/capacity.toml", "--sweep", "dett.batch.max=1,4"]).output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("no node `dett`") && e.contains("did you mean `det`"), "{e}");
    let o = bin().args(["bench", "pipelines/capacity.toml", "--sweep", "det.batchh=1"]).output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("det.batchh = 1") && e.contains("batchh"), "{e}");
}

/// Two pipelines that read different inputs cannot agree: `compare` refuses
/// them (exit 2, naming what each reads) before anything runs, unless
/// `--inputs-differ` is given; then it compares and the report says so. The
/// `--help` example compares two pipelines on the same clip.
#[test]
fn pipelines_that_read_different_inputs_are_refused() {
    let out = tempfile::tempdir().unwrap();
    let small = ["pipelines/text-detection.toml", "pipelines/text-detection-small.toml"];
    let bounded = ["--frames", "3", "--warmup", "1", "--rounds", "1"];
    let o = run_in(out.path(), &[&["compare"][..], &small, &bounded].concat());
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("error: A and B read different inputs"), "{e}");
    assert!(e.contains("`cam` = file ../samples/text-720p.mp4") && e.contains("`cam` = file ../samples/eval-720p.mp4"), "{e}");
    assert!(e.contains("--inputs-differ") && !e.contains("round 1"), "nothing ran: {e}");

    // Anyway, when asked: quietly (-q: no round lines), and said in the report.
    let o = run_in(out.path(), &[&["-q", "compare"][..], &small, &bounded, &["--inputs-differ"]].concat());
    let (text, e) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{text}\n{e}");
    assert!(text.contains("inputs: A and B read different inputs (--inputs-differ)"), "{text}");
    assert!(!e.contains("round "), "-q prints no round lines: {e}");
    let o = run_in(out.path(), &[&["-q", "compare"][..], &small, &bounded, &["--inputs-differ", "--json"]].concat());
    let v = json(&o);
    validate_schema("compare-schema.json", &v);
    assert_eq!(v["inputs_differ"], true);

    // The same clip named two ways (relative, absolute) is the same input.
    let text = std::fs::read_to_string(root().join("pipelines/text-detection-small.toml")).unwrap();
    let abs = out.path().join("small.toml");
    std::fs::write(
        &abs,
        text.replace("../samples/", &format!("{}/samples/", root().display()))
            .replace("../models/", &format!("{}/models/", root().display())),
    )
    .unwrap();
    let o = run_in(
        out.path(),
        &[
            "-q",
            "compare",
            "pipelines/text-detection-bench.toml",
            abs.to_str().unwrap(),
            "--frames",
            "3",
            "--warmup",
            "1",
            "--rounds",
            "1",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json(&o)["inputs_differ"], false);

    // The example in `--help` passes the check.
    let help = String::from_utf8_lossy(&bin().arg("--help").output().unwrap().stdout).into_owned();
    let example = help.lines().find(|l| l.trim_start().starts_with("infer-stream compare ")).expect("a compare example in --help");
    let words: Vec<&str> = example.split_whitespace().skip(1).collect();
    let o = run_in(out.path(), &[&["-q"][..], &words, &bounded].concat());
    assert!(matches!(o.status.code(), Some(0 | 5)), "{example}: {}", stderr(&o));
}

/// `-q` leaves out the sweep's progress lines (the report is still printed).
#[test]
fn a_quiet_sweep_prints_no_round_lines() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(
        out.path(),
        &["-q", "bench", "pipelines/capacity.toml", "--sweep", "det.intra_threads=1", "--frames", "3", "--warmup", "1", "--rounds", "1"],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!e.contains("round 1"), "{e}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("det.intra_threads=1"), "the report is still printed");
}
