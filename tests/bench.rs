//! `bench` and `--trace` on the real pipeline: schema, plots, traces.

mod util;

use std::collections::HashMap;

use util::*;

/// Validate `instance` against docs/bench-schema.json.
fn validate_schema(instance: &serde_json::Value) {
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root().join("docs/bench-schema.json")).unwrap()).unwrap();
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource("bench-schema.json", schema).unwrap();
    let idx = compiler.compile("bench-schema.json", &mut schemas).unwrap();
    if let Err(e) = schemas.validate(instance, idx) {
        panic!("bench --json does not match docs/bench-schema.json:\n{e:#}");
    }
}

#[test]
fn bench_json_matches_its_schema_and_names_the_bottleneck() {
    let out = tempfile::tempdir().unwrap();
    let plot = out.path().join("bench.svg");
    let o = run_in(
        out.path(),
        &[
            "-q",
            "bench",
            "pipelines/text-detection.toml",
            "--isolate",
            "--frames",
            "20",
            "--warmup",
            "2",
            "--json",
            "--null-sinks",
            "--plot",
            plot.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    validate_schema(&v);
    assert_eq!(v["schema"], "infer-stream.bench/1");
    assert_eq!(v["frames"]["decoded"], 20);
    assert_eq!(v["frames"]["processed"], 20);
    assert_eq!(v["warmup_frames"], 2);
    assert!(v["fps"].as_f64().unwrap() > 0.0);
    // Inference is by far the slowest stage here.
    assert_eq!(v["bottleneck"]["node"], "det", "{}", v["bottleneck"]);
    let iso = &v["isolate"];
    assert_eq!(iso["decode"]["frames"], 20);
    let kinds: Vec<&str> = iso["stages"].as_array().unwrap().iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["preprocess", "infer", "text_detection"]);
    let f = |k: &str| iso["stages"].as_array().unwrap().iter().find(|s| s["kind"] == k).unwrap()["fps"].as_f64().unwrap();
    let bound = 1.0 / (1.0 / iso["decode"]["fps"].as_f64().unwrap() + 1.0 / f("preprocess") + 1.0 / f("infer"));
    assert_eq!(iso["bound"], "shared-cpu", "inference runs on the CPU here");
    assert!((iso["bound_fps"].as_f64().unwrap() - bound).abs() < 1e-6 * bound);
    assert!(iso["efficiency"].as_f64().unwrap() > 0.0);
    assert!(!v["timeline"].as_array().unwrap().is_empty());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("frames/s end to end") && svg.contains("\ndet\n"), "plot has its titles and legend");
}

#[test]
fn bench_plots_png() {
    let out = tempfile::tempdir().unwrap();
    let plot = out.path().join("bench.png");
    let o = run_in(out.path(), &["-q", "bench", "pipelines/text-detection.toml", "--frames", "5", "--plot", plot.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let img = image::open(&plot).unwrap();
    assert_eq!((img.width(), img.height()), (1100, 800));
    let text = String::from_utf8(o.stdout).unwrap();
    // Five frames are too few to load `det` fully on a busy machine: which node is
    // named is checked on a longer run (bench_json_matches_its_schema_and_names_the_bottleneck).
    assert!(
        text.lines().any(|l| l.starts_with("bottleneck: ")) && text.contains("frames: decoded 5 = processed 5 + dropped 0 + failed 0"),
        "{text}"
    );
}

#[test]
fn trace_has_one_complete_span_per_frame_per_node() {
    let out = tempfile::tempdir().unwrap();
    let trace = out.path().join("trace.json");
    let o = run_in(out.path(), &["run", "tests/data/stdout.toml", "--progress", "never", "--trace", trace.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut per_node: HashMap<String, Vec<u64>> = HashMap::new();
    let mut waits = 0;
    for e in events {
        match (e["ph"].as_str().unwrap(), e["cat"].as_str()) {
            ("X", Some("node")) => {
                assert!(e["dur"].as_f64().unwrap() >= 0.0 && e["ts"].as_f64().unwrap() >= 0.0);
                assert_eq!(e["args"]["stream"], "cam");
                per_node.entry(e["name"].as_str().unwrap().to_string()).or_default().push(e["args"]["seq"].as_u64().unwrap());
            }
            ("X", Some("queue")) => waits += 1,
            ("M", _) => assert_eq!(e["name"], "thread_name"),
            other => panic!("unexpected event {other:?}"),
        }
    }
    for node in ["cam", "pre", "det", "boxes", "results"] {
        let mut seqs = per_node.remove(node).unwrap_or_else(|| panic!("no spans for {node}"));
        seqs.sort();
        assert_eq!(seqs, (0..7).collect::<Vec<_>>(), "{node}: one span per frame");
    }
    assert!(per_node.is_empty(), "{per_node:?}");
    assert_eq!(waits, 4 * 7, "every non-source node records each frame's queue wait");
}

/// `bench` ends as `run` would: a batch with a file that is not media exits
/// 3 and names it, after measuring the others.
#[test]
fn bench_exits_like_run_when_inputs_fail() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&input).unwrap();
    let st = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "8"])
        .args(["-c:v", "libx264", "-threads", "1", "-pix_fmt", "yuv420p"])
        .arg(input.join("a.mp4"))
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(input.join("notes.mp4"), "not a video\n").unwrap();
    let o = bin().args(["bench", "pipelines/batch.toml"]).env("BATCH_INPUT", &input).env("BATCH_OUTPUT", &output).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("error: 1 input(s) failed"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("frames: decoded 8 = processed 8"), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `--isolate`'s figure is named for what it is: the stages measured alone,
/// one after another, an estimate the pipeline can beat (not a bound).
#[test]
fn isolate_names_the_isolated_stage_rate() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(
        out.path(),
        &["-q", "bench", "pipelines/text-detection.toml", "--isolate", "--frames", "6", "--warmup", "1", "--null-sinks"],
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!text.contains("bound"), "{text}");
    assert!(
        text.contains("isolated stage rate 1/(1/decode + 1/preprocess + 1/infer) = ")
            && text.contains(" fps (each stage alone, one after another: an estimate, not a limit)\n"),
        "{text}"
    );
    let line = text.lines().find(|l| l.starts_with("efficiency: pipeline ")).unwrap_or_else(|| panic!("{text}"));
    let e: f64 = line.split(" / isolated stage rate = ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert_eq!(line.ends_with("(above 1: the stages overlap on the cores)"), e > 1.0, "{line}");
}
