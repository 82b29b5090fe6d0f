//! Config fuzzing: random mutations of the bundled pipelines and random graphs
//! go through the loader and the graph check (what `infer-stream validate
//! --no-models` runs). Nothing may panic, and every error must be located in
//! the file it came from. Files that once broke something, or that exercise a
//! corner worth keeping, live in `tests/data/fuzz/` and run every time.

use std::path::{Path, PathBuf};

use infer_stream::{config, graph};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Load, check and render `text` as if it were the file `path`; assert every
/// error and warning points inside the text. Returns the number of errors.
fn check_one(path: &Path, text: &str) -> usize {
    let (cfg, mut diags) = config::parse_lenient(path, text.to_string());
    if let Some(cfg) = &cfg {
        // The renderings run on whatever loaded (`graph` prints even a graph with errors).
        let _ = graph::to_dot(cfg);
        let _ = graph::to_mermaid(cfg);
        let _ = cfg.name();
        match graph::check(cfg) {
            // Warnings are located like errors.
            Ok(g) => diags.0.extend(graph::warnings(cfg, &g)),
            Err(mut g) => diags.0.append(&mut g.0),
        }
    }
    let lines = text.split('\n').count();
    for d in &diags.0 {
        assert_eq!(d.file, path, "error in another file: {}", d.headline());
        assert!(d.line >= 1 && d.line <= lines, "line {} outside the {lines}-line file: {}", d.line, d.headline());
        let line_text = text.split('\n').nth(d.line - 1).unwrap_or("");
        assert!(
            d.column >= 1 && d.column <= line_text.chars().count() + 1,
            "column {} outside line {}: {}",
            d.column,
            d.line,
            d.headline()
        );
        assert!(!d.message.trim().is_empty(), "empty message at {}:{}", d.line, d.column);
        let shown = d.to_string();
        assert!(shown.contains(&format!("--> {}:{}:{}", path.display(), d.line, d.column)), "{shown}");
    }
    diags.0.iter().filter(|d| !d.warning).count()
}

/// The bundled pipelines and test fixtures: the seeds for mutation.
fn seeds() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for dir in ["pipelines", "tests/data", "tests/data/broken", "tests/data/fuzz"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            out.push((f, text));
        }
    }
    assert!(out.len() > 20, "seeds: {}", out.len());
    out
}

/// Values of the wrong type, out of range, or just odd.
const ODD_VALUES: &[&str] = &[
    "0",
    "-1",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "0.0",
    "true",
    "\"\"",
    "\"-\"",
    "\"../../../../etc/passwd\"",
    "\"${NO_SUCH_VARIABLE_FOR_FUZZ}\"",
    "\"${X:-\"",
    "\"$${\"",
    "\"日本語 🎥\"",
    "\"\\u0000\"",
    "[]",
    "[[]]",
    "[1, \"a\"]",
    "{}",
    "{ capacity = 0 }",
    "{ capacity = 18446744073709551615, when_full = \"drop_oldest\" }",
    "{ max = 0 }",
    "1979-05-27T07:32:00Z",
    "'''\nmulti\nline'''",
];

const ODD_KEYS: &[&str] =
    &["kind", "inputs", "queue", "on_error", "uri", "model", "width", "height", "path", "hieght", "ünïcode", "\"quoted key\"", "a.b.c"];

const ODD_LINES: &[&str] = &[
    "[pipeline]",
    "[sources]",
    "[stages.x]",
    "[sinks.\"../../etc/x\"]",
    "[[sources.arr]]",
    "[sources.cam.queue]",
    "sources = 1",
    "pipeline = \"x\"",
    "inputs = [\"out\"]",
    "inputs = [\"cam\", \"cam\"]",
    "metrics_addr = \"0.0.0.0:99999\"",
    "metrics_addr = \"${NOPE}\"",
    "=",
    "[",
    "]]",
    "\"",
    "key = ",
    "# comment 🎥",
    "\u{feff}",
    "\r",
];

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    /// Replace the value of the line's `key = value`.
    Value(usize, usize),
    /// Rename the key of the line's `key = value`.
    Key(usize, usize),
    Insert(usize, usize),
    /// Bytes at a char offset (invalid UTF-8 becomes U+FFFD as a reader would see it).
    Bytes(usize, Vec<u8>),
    Truncate(usize),
    /// Point an input at another name found in the file (cycles, sinks as inputs, self).
    Rewire(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let idx = any::<prop::sample::Index>().prop_map(|i| i.index(1 << 20));
    prop_oneof![
        idx.clone().prop_map(Mutation::Delete),
        idx.clone().prop_map(Mutation::Duplicate),
        (idx.clone(), idx.clone()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (idx.clone(), 0..ODD_VALUES.len()).prop_map(|(a, b)| Mutation::Value(a, b)),
        (idx.clone(), 0..ODD_KEYS.len()).prop_map(|(a, b)| Mutation::Key(a, b)),
        (idx.clone(), 0..ODD_LINES.len()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        (idx.clone(), prop::collection::vec(any::<u8>(), 1..8)).prop_map(|(a, b)| Mutation::Bytes(a, b)),
        idx.clone().prop_map(Mutation::Truncate),
        (idx.clone(), idx).prop_map(|(a, b)| Mutation::Rewire(a, b)),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len();
    match m {
        Mutation::Delete(i) => {
            lines.remove(i % n);
        }
        Mutation::Duplicate(i) => {
            let l = lines[i % n].clone();
            lines.insert(i % n, l);
        }
        Mutation::Swap(a, b) => lines.swap(a % n, b % n),
        Mutation::Value(i, v) => {
            let l = &mut lines[i % n];
            if let Some((k, _)) = l.split_once('=') {
                *l = format!("{k}= {}", ODD_VALUES[*v]);
            } else {
                *l = format!("x = {}", ODD_VALUES[*v]);
            }
        }
        Mutation::Key(i, k) => {
            let l = &mut lines[i % n];
            if let Some((_, v)) = l.split_once('=') {
                *l = format!("{} ={v}", ODD_KEYS[*k]);
            }
        }
        Mutation::Insert(i, l) => lines.insert(i % (n + 1), ODD_LINES[*l].to_string()),
        Mutation::Bytes(at, bytes) => {
            let s = lines.join("\n");
            let cut = s.char_indices().map(|(i, _)| i).chain([s.len()]).nth(at % (s.chars().count() + 1)).unwrap();
            return format!("{}{}{}", &s[..cut], String::from_utf8_lossy(bytes), &s[cut..]);
        }
        Mutation::Truncate(at) => {
            let s = lines.join("\n");
            let cut = s.char_indices().map(|(i, _)| i).chain([s.len()]).nth(at % (s.chars().count() + 1)).unwrap();
            return s[..cut].to_string();
        }
        Mutation::Rewire(i, j) => {
            let names: Vec<String> =
                lines.iter().filter_map(|l| l.strip_prefix('[')?.strip_suffix(']')?.split_once('.').map(|(_, n)| n.to_string())).collect();
            let inputs: Vec<usize> = (0..n).filter(|&k| lines[k].trim_start().starts_with("inputs")).collect();
            if !names.is_empty() && !inputs.is_empty() {
                let k = inputs[i % inputs.len()];
                lines[k] = format!("inputs = [\"{}\"]", names[j % names.len()]);
            }
        }
    }
    lines.join("\n")
}

const KINDS: [&[&str]; 3] = [
    &["file", "rtsp", "audio", "testsrc", "bogus"],
    &["preprocess", "infer", "text_detection", "crop", "text_recognition", "detection", "classification", "vad", "audio_level", "ndjson"],
    &["ndjson", "subtitles", "images", "video", "null", "infer"],
];
const SECTIONS: [&str; 3] = ["sources", "stages", "sinks"];

/// Keys each kind needs or may take, with values that are sometimes right.
fn body(kind: &str, pick: usize) -> String {
    let model = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    let sample = root().join("samples/text-720p.mp4");
    let choose = |opts: &[String]| opts[pick % opts.len()].clone();
    match kind {
        "file" | "audio" => choose(&[
            format!("uri = \"{}\"", sample.display()),
            "uri = \"-\"".into(),
            "uri = \"rtsp://127.0.0.1:1/x\"".into(),
            "uri = \"no-such-file.mp4\"".into(),
            format!("uri = \"{}\"\nmax_frames = 0\nrealtime = true", sample.display()),
        ]),
        "rtsp" => choose(&[
            "uri = \"rtsp://user:secret@127.0.0.1:1/cam\"".into(),
            "uri = \"http://x\"".into(),
            "uri = \"rtsp://127.0.0.1:1/x\"\nwatchdog_ms = 0\nbackoff_initial_ms = 18446744073709551615\nbackoff_max_ms = 1".into(),
            "uri = \"rtsp://127.0.0.1:1/x\"\nconnect_timeout_ms = 18446744073709551615\nmax_retries = 0".into(),
        ]),
        "audio_level" => choose(&[String::new(), "threshold_db = 1e308".into()]),
        "video" => choose(&[
            "path = \"out/{stream}.mp4\"".into(),
            "path = \"-\"".into(),
            "path = \"x.avi\"\ncrf = 4294967295".into(),
            "path = \"x.mp4\"\ncodec = \"\"\nstream = \"nope\"".into(),
        ]),
        "testsrc" => choose(&[
            String::new(),
            "width = 0\nheight = 3".into(),
            "rate = 0\nframes = 1".into(),
            "rate = 1e308\nduration = -1".into(),
            "width = 4294967295".into(),
        ]),
        "preprocess" => {
            choose(&["width = 64\nheight = 64".into(), "width = 0\nheight = 0".into(), "width = 4294967295\nheight = 4294967295".into()])
        }
        "infer" => choose(&[
            format!("model = \"{}\"", model.display()),
            format!("model = \"{}\"\nbatch = {{ max = 18446744073709551615, timeout_ms = 18446744073709551615 }}", model.display()),
            "model = \"\"".into(),
            format!("model = \"{}\"", root().display()),
        ]),
        "crop" => choose(&[String::new(), "orientation = \"nope\"".into(), "height = 0\nmax_width = 0\nmin_width = 4294967295".into()]),
        "vad" => choose(&["model = \"silero.onnx\"".into(), String::new()]),
        "ndjson" | "subtitles" => {
            choose(&["path = \"out.ndjson\"".into(), "path = \"-\"".into(), "path = \"x.srt\"\nformat = \"vtt\"".into()])
        }
        "images" => choose(&["folder = \"snaps\"".into(), "folder = \"snaps\"\nevery = 0".into()]),
        _ => String::new(),
    }
}

/// One node of a random graph: role, kind, body variant, inputs (indices, may be
/// out of range, self or cyclic), queue capacity.
type NodeSpec = (usize, usize, usize, Vec<usize>, Option<usize>);

fn graph_text(nodes: &[NodeSpec]) -> String {
    let mut s = String::from("[pipeline]\nname = \"fuzz\"\n");
    let name = |i: usize| if i < nodes.len() { format!("n{i}") } else { format!("ghost{i}") };
    for (i, (role, kind, pick, inputs, cap)) in nodes.iter().enumerate() {
        let kinds = KINDS[*role];
        let kind = kinds[kind % kinds.len()];
        s += &format!("\n[{}.{}]\nkind = \"{kind}\"\n{}\n", SECTIONS[*role], name(i), body(kind, *pick));
        if *role != 0 || pick % 7 == 0 {
            let list: Vec<String> = inputs.iter().map(|&j| format!("\"{}\"", name(j))).collect();
            s += &format!("inputs = [{}]\n", list.join(", "));
        }
        if let Some(c) = cap {
            s += &format!("queue = {{ capacity = {c}, when_full = \"drop_oldest\" }}\n");
        }
    }
    s
}

fn graph_nodes() -> impl Strategy<Value = Vec<NodeSpec>> {
    prop::collection::vec(
        (
            0..3usize,
            0..10usize,
            0..8usize,
            prop::collection::vec(0..12usize, 0..4),
            prop_oneof![Just(None), (1..64usize).prop_map(Some), Just(Some(usize::MAX)), Just(Some(usize::MAX / 2 + 1))],
        ),
        0..10,
    )
}

fn runner_config(cases: u32) -> Config {
    // Failures print the minimal input; nothing is written into the source tree.
    Config { cases, failure_persistence: Some(Box::new(FileFailurePersistence::Off)), ..Config::default() }
}

proptest! {
    #![proptest_config(runner_config(1000))]

    /// Up to four mutations of one bundled pipeline or fixture.
    #[test]
    fn mutated_pipelines_never_panic_and_errors_are_located(seed in any::<prop::sample::Index>(), muts in prop::collection::vec(mutation(), 1..5)) {
        let seeds = seeds();
        let (path, text) = &seeds[seed.index(seeds.len())];
        let mut t = text.clone();
        for m in &muts {
            t = apply(&t, m);
        }
        check_one(path, &t);
    }
}

proptest! {
    #![proptest_config(runner_config(500))]

    /// Random graphs of every kind: unknown inputs, self-inputs, cycles, sinks as inputs, huge queues.
    #[test]
    fn random_graphs_never_panic_and_errors_are_located(nodes in graph_nodes()) {
        let text = graph_text(&nodes);
        check_one(&root().join("tests/data/fuzz/random.toml"), &text);
    }

    /// Arbitrary text, including control characters and non-ASCII.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}|[\\[\\]=\"a-z. \\n{},]{0,200}") {
        check_one(&root().join("tests/data/fuzz/text.toml"), &text);
    }
}

/// Every file of the regression corpus loads and checks without a panic; those
/// named `ok-*` must be clean, the others must report at least one error.
#[test]
fn fuzz_corpus_is_handled() {
    let dir = root().join("tests/data/fuzz");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "corpus has {} files", files.len());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let errors = check_one(&f, &text);
        let name = f.file_name().unwrap().to_string_lossy();
        if name.starts_with("ok-") {
            assert_eq!(errors, 0, "{name} should load cleanly");
        } else {
            assert!(errors > 0, "{name} should report an error");
        }
        // The file as the CLI reads it (bytes, not lossy text) must not panic either.
        let _ = config::load_lenient(&f);
    }
}
