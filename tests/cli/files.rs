//! `validate`, `graph` and the command line itself: the bundled pipelines validate,
//! broken files and bad arguments exit 2 with every error located.

use std::time::{Duration, Instant};

use crate::util::*;

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
fn not_media_is_a_located_error() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), &["run", "tests/data/not-media.toml"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: source `cam`: cannot open samples/not-media.mp4: Invalid data found when processing input\n  --> tests/data/not-media.toml:4:7"), "{err}");
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
