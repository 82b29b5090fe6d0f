//! The container image: the Dockerfile's rules, and the CPU image built with
//! podman from a local Debian base, run on the bundled sample and stopped with
//! SIGTERM; its Python (doctor) runs a `python` stage whose script is mounted.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::brokers::free_port;
use crate::util::*;
use crate::{ok, out, wait_until};

/// A container's output so far, for failure messages.
fn logs(name: &str) -> String {
    podman().args(["logs", name]).output().map(|o| out(&o)).unwrap_or_default()
}

/// A build stage: its name, its base, its instructions.
type Stage = (String, String, Vec<(String, String)>);

/// One instruction of a Dockerfile: keyword (upper case), arguments (continuation lines joined).
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        let (k, a) = cur.split_once(char::is_whitespace).unwrap_or((&cur, ""));
        out.push((k.to_uppercase(), a.trim().to_string()));
        cur.clear();
    }
    out
}

/// The rules we hold our Dockerfiles to (hadolint's DL3006/DL3007/DL3008/
/// DL3009/DL3015/DL3025/DL3002 in spirit): every problem, one line each.
fn dockerfile_problems(text: &str, targets: &[&str]) -> Vec<String> {
    let ins = instructions(text);
    let mut problems = Vec::new();
    // Global ARGs (before the first FROM) and their defaults.
    let mut args = std::collections::BTreeMap::new();
    for (k, a) in ins.iter().take_while(|(k, _)| k != "FROM") {
        if k == "ARG" {
            let (n, v) = a.split_once('=').unwrap_or((a, ""));
            args.insert(n.to_string(), v.to_string());
        }
    }
    // Stages: (name, base, instructions).
    let mut stages: Vec<Stage> = Vec::new();
    for (k, a) in ins.iter().skip_while(|(k, _)| k != "FROM") {
        if k == "FROM" {
            let words: Vec<&str> = a.split_whitespace().collect();
            let name = if words.len() >= 3 && words[1].eq_ignore_ascii_case("as") { words[2] } else { "" };
            stages.push((name.to_string(), words.first().copied().unwrap_or("").to_string(), Vec::new()));
        } else if let Some(s) = stages.last_mut() {
            s.2.push((k.clone(), a.clone()));
        }
    }
    for (name, base, body) in &stages {
        // A base is a build argument with a pinned default, or another stage, or scratch.
        if base == "scratch" || stages.iter().any(|(n, ..)| n == base) {
        } else if let Some(arg) = base.strip_prefix("${").and_then(|b| b.strip_suffix('}')) {
            match args.get(arg) {
                None => problems.push(format!("stage {name}: FROM ${{{arg}}} has no global ARG with a default")),
                Some(v) if stages.iter().any(|(n, ..)| n == v) => {}
                Some(v) if !v.contains(':') || v.ends_with(":latest") => {
                    problems.push(format!("stage {name}: base {arg}={v} is not pinned to a tag (no `latest`)"))
                }
                Some(_) => {}
            }
        } else {
            problems.push(format!("stage {name}: FROM {base} is not a build argument (ARG) or a stage"));
        }
        for (k, a) in body {
            if k == "RUN" && a.contains("apt-get install") {
                if !a.contains("--no-install-recommends") {
                    problems.push(format!("stage {name}: apt-get install without --no-install-recommends"));
                }
                if !a.contains("rm -rf /var/lib/apt/lists/*") {
                    problems.push(format!("stage {name}: apt-get lists not cleaned in the same RUN"));
                }
                if !a.contains("-y") {
                    problems.push(format!("stage {name}: apt-get install without -y"));
                }
            }
            if k == "ADD" && a.contains("http") {
                problems.push(format!("stage {name}: ADD from a URL (use RUN curl with a checksum)"));
            }
        }
        if !targets.contains(&name.as_str()) {
            continue;
        }
        let pos = |kw: &str| body.iter().rposition(|(k, _)| k == kw);
        match pos("USER") {
            None => problems.push(format!("target {name}: no USER (it would run as root)")),
            Some(u) => {
                let user = &body[u].1;
                let id = user.split(':').next().unwrap_or("");
                if id == "root" || id == "0" {
                    problems.push(format!("target {name}: USER {user} is root"));
                }
                if pos("ENTRYPOINT").is_some_and(|e| e < u) {
                    problems.push(format!("target {name}: USER comes after ENTRYPOINT"));
                }
            }
        }
        for kw in ["ENTRYPOINT", "CMD"] {
            match pos(kw) {
                Some(i) if serde_json::from_str::<Vec<String>>(&body[i].1).is_err() => {
                    problems.push(format!("target {name}: {kw} is not in exec form (a JSON array): {}", body[i].1))
                }
                Some(_) => {}
                None if kw == "ENTRYPOINT" => problems.push(format!("target {name}: no ENTRYPOINT")),
                None => {}
            }
        }
        match pos("HEALTHCHECK") {
            None => problems.push(format!("target {name}: no HEALTHCHECK")),
            Some(i) => {
                let h = &body[i].1;
                let cmd = h.split_once("CMD").map(|(_, c)| c.trim()).unwrap_or("");
                if serde_json::from_str::<Vec<String>>(cmd).is_err() || !cmd.contains("/healthz") {
                    problems.push(format!("target {name}: HEALTHCHECK is not an exec-form check of /healthz: {h}"));
                }
            }
        }
        if pos("STOPSIGNAL").is_none_or(|i| body[i].1 != "SIGTERM") {
            problems.push(format!("target {name}: no STOPSIGNAL SIGTERM"));
        }
    }
    for t in targets {
        if !stages.iter().any(|(n, ..)| n == t) {
            problems.push(format!("no stage {t}"));
        }
    }
    problems
}

#[test]
fn dockerfile_follows_the_image_rules() {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let problems = dockerfile_problems(&text, &["runtime", "runtime-gpu"]);
    assert!(problems.is_empty(), "deploy/Dockerfile:\n{}", problems.join("\n"));
    // The CPU image is the default target (the last stage), the binary's origin a build argument.
    let stages: Vec<String> = instructions(&text).into_iter().filter(|(k, _)| k == "FROM").map(|(_, a)| a).collect();
    assert!(stages.last().unwrap().ends_with("AS runtime"), "{stages:?}");
    assert!(stages.iter().any(|s| s == "${BINARY_FROM} AS binary"), "{stages:?}");
    assert!(text.contains("ARG BASE=debian:bookworm-slim") && text.contains("ARG BUILDER=rust:1.95-bookworm"), "bases");
    assert!(text.contains("ARG GPU_BASE=nvidia/cuda:13.0."), "the GPU image is on CUDA 13");
    assert!(text.contains("onnxruntime_gpu-${ORT_VERSION}"), "the GPU image has ONNX Runtime's CUDA build");

    // The rules find what they are for.
    let bad = "ARG BASE=debian:latest\nFROM ${BASE} AS runtime\nRUN apt-get update && apt-get install -y curl\n\
               ENTRYPOINT infer-stream run\nUSER root\n";
    let found = dockerfile_problems(bad, &["runtime"]);
    for want in [
        "base BASE=debian:latest is not pinned",
        "without --no-install-recommends",
        "lists not cleaned",
        "USER root is root",
        "USER comes after ENTRYPOINT",
        "ENTRYPOINT is not in exec form",
        "no HEALTHCHECK",
        "no STOPSIGNAL SIGTERM",
    ] {
        assert!(found.iter().any(|p| p.contains(want)), "{want:?} not found in {found:#?}");
    }
    assert!(dockerfile_problems("FROM debian:bookworm-slim AS runtime\n", &["runtime"]).iter().any(|p| p.contains("not a build argument")));

    // The build context: target/ stays out except the one binary.
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let lines: Vec<&str> = ignore.lines().map(str::trim).collect();
    for want in ["target/", "!target/image/infer-stream", ".git", ".deps/", "!.deps/wheels/onnxruntime-*.whl"] {
        assert!(lines.contains(&want), ".dockerignore lacks {want}");
    }
}

fn podman() -> Command {
    let mut c = Command::new("podman");
    c.env("CONTAINERS_CONF", root().join("deploy/containers.conf")).args(["--runtime", "runc"]).current_dir(root());
    c
}

/// Removes a container when the test ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman().args(["rm", "-f", "-t", "0", &self.0]).output();
    }
}

#[test]
fn cpu_image_runs_the_sample_and_drains_on_sigterm() {
    require_assets();
    let found = Command::new("podman").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "`podman` is not installed: run scripts/setup.sh (scripts/install-deps.sh installs podman, runc, debootstrap)");
    let t0 = Instant::now();
    let base = ok(Command::new(root().join("scripts/debian-base.sh")).current_dir(root()));
    let base = base.lines().last().unwrap().trim().to_string();
    let t_base = t0.elapsed();

    // The debug binary this test run built, without its debug info (12 MB,
    // not 200): a release build takes minutes on 2 cores.
    let image = "localhost/infer-stream:test";
    let t1 = Instant::now();
    ok(Command::new(root().join("scripts/build-image.sh"))
        .args(["--host", env!("CARGO_BIN_EXE_infer-stream"), "--base", &base, "--tag", image])
        .current_dir(root()));
    let t_build = t1.elapsed();
    let size = ok(podman().args(["image", "inspect", "--format", "{{.Size}}", image]));
    let size_mb = size.trim().parse::<f64>().unwrap() / 1e6;
    let inspect =
        ok(podman().args(["image", "inspect", "--format", "{{.Config.User}} {{.Config.StopSignal}} {{json .Config.Entrypoint}}", image]));
    assert_eq!(inspect.trim(), r#"10001:10001 SIGTERM ["/usr/local/bin/infer-stream"]"#);
    let health = ok(podman().args(["image", "inspect", "--format", "{{json .Config.Healthcheck.Test}}", image]));
    assert!(health.contains("/healthz"), "HEALTHCHECK kept in the image (docker format): {health}");

    // One pass over the bundled sample with the models inside: every frame, with boxes.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let vol = format!("{}:/data", data.display());
    let t2 = Instant::now();
    let o = podman().args(["run", "--rm", "--read-only", "--cap-drop", "ALL", "-v", &vol, image]).output().unwrap();
    let t_run = t2.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let lines = read_ndjson(&data.join("results.ndjson"));
    let want = truth("text-720p.truth.json").frames;
    assert_eq!(lines.len() as u64, want, "every frame of the sample");
    let with_boxes = lines.iter().filter(|l| !bboxes(l, "boxes").is_empty()).count();
    assert!(with_boxes as u64 >= want * 9 / 10, "boxes on {with_boxes} of {want} frames");
    let first_result = out(&o)
        .lines()
        .find_map(|l| l.strip_prefix("time to first result: ")?.split_whitespace().next()?.parse::<f64>().ok())
        .expect("time to first result in the summary");

    // `python` stages: the image's embedded Python and numpy (doctor), and a
    // pipeline of the user's own, mounted read-only with its script, run by the image.
    let o = podman().args(["run", "--rm", "--read-only", "--cap-drop", "ALL", image, "doctor"]).output().unwrap();
    let doctor = out(&o);
    let line = doctor.lines().find(|l| l.starts_with("Python ")).unwrap_or_else(|| panic!("doctor says nothing of Python:\n{doctor}"));
    assert!(line.contains("3.11.") && line.contains("numpy 1.") && line.contains("`python` stages run here"), "{line}");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(
        plugins.join("plugin.py"),
        "import numpy as np\n\ndef process(frame):\n    p = frame.image()\n    \
         return {\"numpy\": np.__version__, \"shape\": list(p.shape), \"red\": int(p[..., 0].max())}\n",
    )
    .unwrap();
    std::fs::write(
        plugins.join("p.toml"),
        "[sources.cam]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nframes = 5\n\n\
         [stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\nimage = true\n\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"mine\"]\npath = \"/data/python.ndjson\"\n",
    )
    .unwrap();
    let mount = format!("{}:/plugins:ro", plugins.display());
    let o = podman()
        .args(["run", "--rm", "--read-only", "--cap-drop", "ALL", "-v", &vol, "-v", &mount, image])
        .args(["run", "/plugins/p.toml", "--progress", "never"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let lines = read_ndjson(&data.join("python.ndjson"));
    assert_eq!(lines.len(), 5, "{}", out(&o));
    for l in &lines {
        let m = &l["results"]["mine"];
        assert!(m["numpy"].as_str().is_some_and(|v| v.starts_with("1.")) && m["shape"] == serde_json::json!([48, 64, 3]), "{l}");
        assert!(m["red"].as_u64().is_some_and(|r| r > 0), "{l}");
    }

    // The live pipeline (looped sample at its own pace), then SIGTERM mid-run.
    std::fs::remove_file(data.join("results.ndjson")).unwrap();
    let port = free_port();
    let name = format!("infer-stream-test-{}", std::process::id());
    let publish = format!("127.0.0.1:{port}:9464");
    let t3 = Instant::now();
    ok(podman().args([
        "run",
        "-d",
        "--name",
        &name,
        "--read-only",
        "--cap-drop",
        "ALL",
        "-v",
        &vol,
        "-p",
        &publish,
        image,
        "run",
        "/opt/infer-stream/pipelines/container-live.toml",
        "--metrics-addr",
        "0.0.0.0:9464",
        "--progress",
        "never",
        "--report",
        "/data/report.json",
    ]));
    let _c = Container(name.clone());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || get(addr, "/readyz").is_some_and(|(s, _)| s == 200)),
        "not ready within 60 s:\n{}",
        logs(&name)
    );
    let t_ready = t3.elapsed();
    // The image's HEALTHCHECK passes on the running container.
    let hc = podman().args(["healthcheck", "run", &name]).output().unwrap();
    assert!(hc.status.success(), "healthcheck: {}", out(&hc));
    // Some results, then stop it as Kubernetes or `docker stop` does.
    assert!(
        wait_until(Duration::from_secs(30), || std::fs::read_to_string(data.join("results.ndjson")).is_ok_and(|t| t.lines().count() >= 5))
    );
    ok(podman().args(["stop", "-t", "30", &name]));
    let code = ok(podman().args(["inspect", "--format", "{{.State.ExitCode}}", &name]));
    assert_eq!(code.trim(), "143", "SIGTERM drains and exits 143:\n{}", logs(&name));
    let text = std::fs::read_to_string(data.join("results.ndjson")).unwrap();
    assert!(text.ends_with('\n'), "the last line is complete");
    let lines = read_ndjson(&data.join("results.ndjson"));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["interrupted_by_signal"], 15, "the report says it was interrupted by SIGTERM: {report}");
    assert_eq!(report["frames"]["processed"].as_u64(), Some(lines.len() as u64), "every processed frame was written: {report}");

    eprintln!(
        "image {size_mb:.0} MB; debian base {:.1} s, image build {:.1} s; one pass {:.1} s (first result {first_result:.0} ms after the pipeline started); \
         container start → ready {:.2} s; {} results before SIGTERM",
        t_base.as_secs_f64(),
        t_build.as_secs_f64(),
        t_run.as_secs_f64(),
        t_ready.as_secs_f64(),
        lines.len()
    );
}
