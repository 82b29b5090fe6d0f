//! ONNX Runtime on this machine: a missing library or provider, `inspect`,
//! `doctor`, no telemetry, `--ort-library` and the library beside a moved binary.

use crate::util::*;

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
