//! `validate` finds what `run` would fail on, before anything runs: a GPU this
//! machine lacks, outputs that cannot be written, unknown GStreamer elements;
//! and it warns about pipelines that work, but not as meant.

mod util;

use std::path::{Path, PathBuf};
use std::process::Output;

use util::*;

/// `text` written as `p.toml` in a fresh folder.
fn pipeline(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

fn infer_stream(args: &[&str], file: &Path) -> Output {
    bin().args(args).arg(file).output().expect("run infer-stream")
}

fn model() -> String {
    root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx").display().to_string()
}

/// Text detection on the 720p sample, `source` and `det` extra keys, into `out`.
fn detection(source: &str, det: &str, out: &str) -> String {
    format!(
        "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\n{source}\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 320\nheight = 192\n\
         [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\n{det}\n\
         [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{out}\"\n",
        root().join("samples/eval-720p.mp4").display(),
        model()
    )
}

/// A part that demands a GPU this machine cannot give (device 99 exists
/// nowhere) is a located error in `validate`, and `run` fails with the same
/// words before it loads a model (no provider fallback is tried).
#[test]
fn a_gpu_this_machine_lacks_is_found_before_models_load() {
    require_assets();
    let (dir, p) =
        pipeline(&detection("hwaccel = \"cuda\"\ndevice_id = 99", "providers = [\"tensorrt\", \"cuda\", \"cpu\"]", "out.ndjson"));
    let at = format!("{}:4:11", p.display());
    let v = infer_stream(&["validate"], &p);
    let ve = stderr(&v);
    assert_eq!(v.status.code(), Some(2), "{ve}");
    assert!(ve.contains("error: source `cam`: hwaccel = \"cuda\": ") && ve.contains(&format!("--> {at}\n")), "{ve}");
    let r = infer_stream(&["run", "--progress", "never"], &p);
    let re = stderr(&r);
    assert_eq!(r.status.code(), Some(2), "{re}");
    let headline = |e: &str| e.lines().find(|l| l.starts_with("error: source `cam`")).map(str::to_string);
    assert_eq!(headline(&re), headline(&ve), "run and validate say the same:\n{re}");
    assert!(re.contains(&format!("--> {at}\n")), "{re}");
    // Nothing was loaded: no execution provider was tried, no output made.
    assert!(!re.contains("tensorrt") && !re.contains("execution provider"), "run loaded the model first:\n{re}");
    assert!(!dir.path().join("out.ndjson").exists());
}

/// The bundled GPU pipeline validates on a machine with a GPU (as `doctor`
/// sees it), and on one without fails exactly where it demands one.
#[test]
fn the_gpu_pipeline_validates_where_there_is_a_gpu_and_names_it_missing_elsewhere() {
    require_assets();
    let d = bin().args(["doctor", "--json"]).output().unwrap();
    let facts: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap_or_else(|e| panic!("doctor --json: {e}: {}", stderr(&d)));
    let gpu = facts["cuda"]["driver"] == true && facts["cuda"]["devices"].as_u64().is_some_and(|n| n > 0);
    let o = bin().args(["validate", "pipelines/gpu.toml"]).output().unwrap();
    let e = stderr(&o);
    if gpu {
        assert_eq!(o.status.code(), Some(0), "{e}");
    } else {
        assert_eq!(o.status.code(), Some(2), "validate passed a GPU pipeline on a machine without a GPU: {e}");
        assert!(e.contains("error: source `cam`: hwaccel = \"cuda\": ") && e.contains("--> pipelines/gpu.toml:13:11\n"), "{e}");
        assert!(e.ends_with("1 error found\n"), "{e}");
    }
}

/// Unmounts a read-only bind mount when dropped.
struct ReadOnlyMount(PathBuf);

impl ReadOnlyMount {
    /// `dir` mounted read-only over itself, where this machine allows it (root, mount(8)).
    fn over(dir: &Path) -> Option<Self> {
        let mount = |args: &[&str]| std::process::Command::new("mount").args(args).output().is_ok_and(|o| o.status.success());
        let d = dir.to_str()?;
        if !mount(&["--bind", d, d]) {
            return None;
        }
        let m = ReadOnlyMount(dir.to_path_buf());
        mount(&["-o", "remount,bind,ro", d, d]).then_some(m)
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// An output folder that cannot take files is a located error in `validate`
/// (and `run` says the same before it starts); a writable one passes, and the
/// check leaves nothing behind.
#[test]
fn unwritable_output_folders_are_found_and_writable_ones_left_untouched() {
    require_assets();
    let sink = |key: &str, kind: &str, path: &str| {
        format!("[sources.a]\nkind = \"testsrc\"\nframes = 2\n[sinks.out]\nkind = \"{kind}\"\ninputs = [\"a\"]\n{key} = \"{path}\"\n")
    };
    // Under /proc no file can be made, whoever runs this.
    for (key, kind, path) in [
        ("path", "ndjson", "/proc/infer-stream-out/r.ndjson"),
        ("folder", "images", "/proc/infer-stream-shots"),
        ("path", "video", "/proc/infer-stream-out/{stream}.mp4"),
    ] {
        let (_dir, p) = pipeline(&sink(key, kind, path));
        for cmd in [&["validate"][..], &["run", "--progress", "never"]] {
            let o = infer_stream(cmd, &p);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd:?} {path}: {e}");
            assert!(
                e.contains("error: sink `out`: cannot write /proc: ") && e.contains(&format!("--> {}:7:{}\n", p.display(), key.len() + 4)),
                "{cmd:?} {path}: {e}"
            );
        }
    }
    // A folder mounted read-only, where this machine lets a test mount one.
    let ro = tempfile::tempdir().unwrap();
    if let Some(_m) = ReadOnlyMount::over(ro.path()) {
        let (_dir, p) = pipeline(&sink("path", "ndjson", &format!("{}/r.ndjson", ro.path().display())));
        let o = infer_stream(&["validate"], &p);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(&format!("error: sink `out`: cannot write {}: ", ro.path().display())), "{e}");
    }
    // Writable: ok, and the folder is as it was.
    let out = tempfile::tempdir().unwrap();
    let (_dir, p) = pipeline(&sink("path", "ndjson", &format!("{}/r.ndjson", out.path().display())));
    let o = infer_stream(&["validate"], &p);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0, "validate left files behind");
}

/// An unknown element in a GStreamer `launch` line is a located error naming
/// it, pointing at it in the line.
#[test]
fn unknown_gstreamer_elements_are_named_where_they_are_written() {
    require_assets();
    let text = format!(
        "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\nbackend = \"gstreamer\"\n\
         launch = \"filesrc location={{uri}} ! qtdemux ! h264parse ! nosuchdecoder\"\n\
         [sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n",
        root().join("samples/eval-720p.mp4").display()
    );
    let (_dir, p) = pipeline(&text);
    let o = infer_stream(&["validate"], &p);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let col = "launch = \"filesrc location={uri} ! qtdemux ! h264parse ! ".len() + 1;
    assert!(e.contains(&format!("error: source `cam`: GStreamer has no element `nosuchdecoder`\n  --> {}:5:{col}\n", p.display())), "{e}");
    // A line of installed elements passes.
    let good = text.replace("nosuchdecoder", "avdec_h264");
    let (_dir, p) = pipeline(&good);
    let o = infer_stream(&["validate"], &p);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Batching on the CPU and a stage whose results reach no sink are warnings
/// (located) in `validate` and in the run's log; neither stops anything.
#[test]
fn cpu_batching_and_stages_feeding_no_sink_are_warned_about() {
    require_assets();
    let text = format!(
        "[sources.cam]\nkind = \"testsrc\"\nwidth = 320\nheight = 192\nframes = 4\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 320\nheight = 192\n\
         [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\nbatch = {{ max = 2, timeout_ms = 5 }}\n\
         [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         [stages.spare]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         [sinks.out]\nkind = \"null\"\ninputs = [\"boxes\"]\n",
        model()
    );
    let (_dir, p) = pipeline(&text);
    let batching = "stage `det` batches up to 2 frames on the CPU: batching helps on GPU providers";
    let spare = "stage `spare` feeds no sink: its results are computed and discarded";
    let v = infer_stream(&["validate"], &p);
    let e = stderr(&v);
    assert_eq!(v.status.code(), Some(0), "{e}");
    assert!(e.contains(&format!("warning: {batching}")) && e.contains(&format!("--> {}:15:9\n", p.display())), "{e}");
    assert!(e.contains(&format!("warning: {spare}\n  --> {}:19:9\n", p.display())), "{e}");
    // The result on stdout, the warnings on stderr.
    assert!(String::from_utf8_lossy(&v.stdout).contains(": ok (6 nodes, 2 warnings)"), "{e}");
    assert!(!e.contains(": ok ("), "{e}");
    let r = infer_stream(&["run", "--progress", "never"], &p);
    let e = stderr(&r);
    assert_eq!(r.status.code(), Some(0), "{e}");
    assert!(e.contains(&format!("{}:15:9: {batching}", p.display())), "{e}");
    assert!(e.contains(&format!("{}:19:9: {spare}", p.display())), "{e}");
    // Batching behind a GPU provider, and every stage feeding a sink: no warning.
    let quiet = text
        .replace("batch = {", "providers = [\"cuda\", \"cpu\"]\nbatch = {")
        .replace("inputs = [\"boxes\"]", "inputs = [\"boxes\", \"spare\"]");
    let (_dir, p) = pipeline(&quiet);
    let v = infer_stream(&["validate"], &p);
    let e = stderr(&v);
    assert_eq!(v.status.code(), Some(0), "{e}");
    assert!(!e.contains("warning"), "{e}");
}

/// `${VAR}` written without quotes is a TOML error; its help says to quote it.
#[test]
fn unquoted_environment_references_get_a_hint() {
    let (_dir, p) = pipeline("[sources.cam]\nkind = \"file\"\nuri = ${VIDEO}\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n");
    let o = infer_stream(&["validate"], &p);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let hint = "  = help: environment references work inside quoted strings: write \"${VAR}\"\n";
    let at = e.find(&format!("--> {}:3:7\n", p.display())).unwrap_or_else(|| panic!("{e}"));
    assert!(e[at..].contains(hint), "{e}");
}

/// A queue too large is reported at its `capacity` key, however the queue is written.
#[test]
fn queue_capacity_errors_point_at_the_capacity_key() {
    let head = "[sources.cam]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n";
    for (queue, at) in [
        ("queue = { when_full = \"block\", capacity = 100000 }\n", "6:32"),
        ("[sinks.out.queue]\nwhen_full = \"block\"\ncapacity = 100000\n", "8:1"),
    ] {
        let (_dir, p) = pipeline(&format!("{head}{queue}"));
        let o = infer_stream(&["validate"], &p);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(&format!("error: sink `out`: queue capacity 100000 is over 4096\n  --> {}:{at}\n", p.display())), "{e}");
    }
}
