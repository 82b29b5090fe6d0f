//! Security properties of the real binary: output paths built from stream
//! names stay in their folder, the metrics server stays on this machine unless
//! an address says otherwise (and says so loudly), and no shell is ever run.

mod util;

use std::path::{Path, PathBuf};

use util::*;

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Hostile stream names (`../../etc/x`, `..`, absolute paths, separators) name
/// snapshots (images sink) and videos (video sink, `{stream}` in its path)
/// inside their folders and nowhere else.
#[test]
fn stream_names_cannot_escape_the_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("a/b");
    std::fs::create_dir_all(&work).unwrap();
    let names = ["../../etc/x", "..", "/tmp/abs", "a\\\\..\\\\b", ".hidden"];
    let mut toml = String::new();
    for n in names {
        toml += &format!("[sources.\"{n}\"]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nframes = 1\n\n");
    }
    let inputs: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    toml += &format!("[sinks.snaps]\nkind = \"images\"\ninputs = [{}]\nfolder = \"snaps\"\nformat = \"png\"\n\n", inputs.join(", "));
    toml += &format!("[sinks.clips]\nkind = \"video\"\ninputs = [{}]\npath = \"clips/{{stream}}.mkv\"\n", inputs.join(", "));
    std::fs::write(work.join("p.toml"), toml).unwrap();
    let o = bin().arg("run").arg(work.join("p.toml")).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(accounting(&err), (5, 5, 0, 0));
    let got: Vec<String> = files_under(dir.path()).iter().map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string()).collect();
    let safe = ["__", "______etc_x", "_tmp_abs", "a____b", "_hidden"];
    let mut want: Vec<String> = safe.iter().map(|n| format!("a/b/snaps/{n}-000000.png")).collect();
    want.extend(safe.iter().map(|n| format!("a/b/clips/{n}.mkv")));
    want.push("a/b/p.toml".into());
    want.sort();
    assert_eq!(got, want, "every snapshot is a plain file in the folder");
    assert!(!Path::new("/tmp/abs-000000.png").exists() && !Path::new("/tmp/abs.mkv").exists());
}

/// A port alone listens on 127.0.0.1; an address that other machines can
/// reach is used as written, with a warning that it is unauthenticated.
#[test]
fn metrics_stay_on_localhost_unless_an_address_says_otherwise() {
    require_assets();
    let run = |addr: &str| {
        let o = bin()
            .args(["run", "tests/data/metrics-addr.toml", "--progress", "never", "--metrics-addr", addr])
            .env("INFER_STREAM_TEST_METRICS_ADDR", "127.0.0.1:0")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stderr(&o)
    };
    let err = run("0");
    assert!(err.contains("metrics on http://127.0.0.1:"), "{err}");
    assert!(!err.contains("other machines"), "{err}");
    let err = run("0.0.0.0:0");
    assert!(err.contains("metrics on http://0.0.0.0:"), "{err}");
    assert!(err.contains("can be reached from other machines, without authentication"), "{err}");
    let o = bin().args(["run", "tests/data/metrics-addr.toml", "--progress", "never"]).env("INFER_STREAM_TEST_METRICS_ADDR", "0").output();
    let err = stderr(&o.unwrap());
    // (`${INFER_STREAM_TEST_METRICS_ADDR}` = `0`: a port alone in the file.)
    assert!(err.contains("metrics on http://127.0.0.1:"), "the file's port alone is on localhost too: {err}");
}

/// Every process the crate starts is a fixed program with fixed arguments:
/// no shell, so no user string is ever interpreted as a command.
#[test]
fn no_shell_is_ever_run() {
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    assert!(files.len() > 20);
    let allowed = ["nvidia-smi"];
    let mut spawned = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            for shell in ["\"sh\"", "\"bash\"", "\"/bin/sh\"", "\"/bin/bash\"", "\"cmd\"", "\"-c\"", "libc::system", "popen"] {
                assert!(!line.contains(shell), "{}:{}: {line}", f.display(), i + 1);
            }
            if let Some(rest) = line.split("Command::new(").nth(1) {
                let program = rest.split(')').next().unwrap().trim_matches('"').to_string();
                assert!(allowed.contains(&program.as_str()), "{}:{}: starts `{program}`, not a fixed known program", f.display(), i + 1);
                spawned.push(program);
            }
        }
    }
    assert!(!spawned.is_empty(), "the scan found the one process the crate starts (nvidia-smi)");
}
