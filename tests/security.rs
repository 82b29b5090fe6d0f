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
    // Named as every per-stream output names them (`sinks::stream_file_name`).
    let safe = ["_.", "_._.._etc_x", "_tmp_abs", "a_.._b", "_hidden"];
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

/// The dependency policy in `deny.toml` (licenses on the allow list, crates.io
/// only, no binary-downloading features), checked from `cargo metadata`, so CI
/// enforces it even where cargo-deny is not installed.
#[test]
fn dependency_policy_holds() {
    let deny: toml::Table = std::fs::read_to_string(root().join("deny.toml")).unwrap().parse().unwrap();
    let allow: Vec<String> = deny["licenses"]["allow"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The build downloads only this platform's crates, so metadata is asked
    // for this platform alone: without the filter, `--offline` needs crates
    // a Linux build never fetches (anstyle-wincon) and fails on a machine
    // with an empty cargo cache. Every crate this build links is still checked.
    let host = host_triple();
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--all-features", "--filter-platform", &host])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut problems = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        match p["source"].as_str() {
            None | Some("registry+https://github.com/rust-lang/crates.io-index") => {}
            Some(s) => problems.push(format!("{name}: source {s} (crates.io only)")),
        }
        match p["license"].as_str() {
            Some(l) if license_ok(l, &allow) => {}
            l => problems.push(format!("{name}: license {l:?} not satisfiable by the allow list")),
        }
    }
    for ban in deny["bans"]["features"].as_array().unwrap() {
        let krate = ban["crate"].as_str().unwrap();
        let denied: Vec<&str> = ban["deny"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        for node in meta["resolve"]["nodes"].as_array().unwrap() {
            let id = node["id"].as_str().unwrap();
            if !id.contains(&format!("#{krate}@")) {
                continue;
            }
            for f in node["features"].as_array().unwrap().iter().filter_map(|f| f.as_str()) {
                if denied.contains(&f) {
                    problems.push(format!("{krate}: banned feature `{f}` is on"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "dependency policy (deny.toml):\n{}", problems.join("\n"));
}

/// The triple of the machine the tests run on, from `rustc -vV`.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc).arg("-vV").output().expect("run rustc -vV");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host").trim().to_string()
}

/// Whether an SPDX expression (`A OR B`, `A AND B`, `A WITH E`, `A/B`,
/// parentheses) can be satisfied with the allowed licenses.
fn license_ok(expr: &str, allow: &[String]) -> bool {
    let spaced = expr.replace('(', " ( ").replace(')', " ) ").replace('/', " OR ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut at = 0;
    fn or(t: &[&str], at: &mut usize, allow: &[String]) -> bool {
        let mut ok = and(t, at, allow);
        while t.get(*at) == Some(&"OR") {
            *at += 1;
            ok |= and(t, at, allow);
        }
        ok
    }
    fn and(t: &[&str], at: &mut usize, allow: &[String]) -> bool {
        let mut ok = term(t, at, allow);
        while t.get(*at) == Some(&"AND") {
            *at += 1;
            ok &= term(t, at, allow);
        }
        ok
    }
    fn term(t: &[&str], at: &mut usize, allow: &[String]) -> bool {
        if t.get(*at) == Some(&"(") {
            *at += 1;
            let ok = or(t, at, allow);
            *at += 1; // ")"
            return ok;
        }
        let mut id = t.get(*at).copied().unwrap_or("").to_string();
        *at += 1;
        if t.get(*at) == Some(&"WITH") {
            id = format!("{id} WITH {}", t.get(*at + 1).copied().unwrap_or(""));
            *at += 2;
        }
        allow.contains(&id)
    }
    let ok = or(&tokens, &mut at, allow);
    ok && at == tokens.len()
}

#[test]
fn license_expressions_are_read_as_spdx() {
    let allow: Vec<String> = ["MIT", "Apache-2.0", "Unicode-3.0"].iter().map(|s| s.to_string()).collect();
    assert!(license_ok("MIT OR Apache-2.0", &allow));
    assert!(license_ok("(MIT OR Apache-2.0) AND Unicode-3.0", &allow));
    assert!(license_ok("Apache-2.0/MIT", &allow));
    assert!(!license_ok("GPL-3.0", &allow));
    assert!(!license_ok("MIT AND GPL-3.0", &allow));
    assert!(license_ok("GPL-3.0 OR MIT", &allow));
    assert!(!license_ok("Apache-2.0 WITH LLVM-exception", &allow));
}
