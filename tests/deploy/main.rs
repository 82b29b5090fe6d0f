//! Deployment: the container image (built with podman from a local Debian
//! base, run on the bundled sample, stopped with SIGTERM), the Helm chart
//! (lint, render, Kubernetes and CRD schemas, bad values), and the monitoring
//! (alert rules and their unit tests with promtool; every dashboard and alert
//! query evaluated by a real Prometheus scraping a real pipeline).
//! The chart's modes and guards (serve, the `helm test` hook, GPU image,
//! persistence): tests/deploy/chart.rs.
//! Tools: podman, runc, debootstrap, prometheus, promtool
//! (scripts/install-deps.sh); helm, kubectl and the schema validators
//! (scripts/fetch-deploy-tools.sh).

#[path = "deploy/chart.rs"]
mod chart;
mod util;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use util::brokers::free_port;
use util::prometheus::{Prometheus, Reaped};
use util::*;

fn out(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Run `cmd`; it must succeed. Returns its stdout.
fn ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?} failed ({}):\n{}", o.status, out(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A container's output so far, for failure messages.
fn logs(name: &str) -> String {
    podman().args(["logs", name]).output().map(|o| out(&o)).unwrap_or_default()
}

fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

// ---------------------------------------------------------------- Dockerfile

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

/// A build stage: its name, its base, its instructions.
type Stage = (String, String, Vec<(String, String)>);

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

// ------------------------------------------------------------- the CPU image

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

// ------------------------------------------------------------------ the chart

const KUBERNETES: &str = "1.35.0";

fn helm() -> Command {
    let bin = root().join(".deps/kube/helm");
    assert!(bin.exists(), "{} is missing: run scripts/fetch-deploy-tools.sh", bin.display());
    let mut c = Command::new(bin);
    c.current_dir(root());
    c
}

fn chart() -> String {
    root().join("deploy/helm/infer-stream").display().to_string()
}

/// `helm template` with `args`, every object validated; returns the objects.
fn render_and_validate(args: &[&str]) -> Vec<serde_json::Value> {
    let py = root().join(".deps/deploy-venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/fetch-deploy-tools.sh", py.display());
    let mut cmd = helm();
    cmd.args(["template", "rel", &chart(), "--kube-version", KUBERNETES]).args(args);
    let rendered = ok(&mut cmd);
    let json = tempfile::NamedTempFile::new().unwrap();
    let mut check = Command::new(py)
        .arg(root().join("deploy/helm/check-rendered.py"))
        .args([KUBERNETES, "--json"])
        .arg(json.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(rendered.as_bytes()).unwrap();
    let o = check.wait_with_output().unwrap();
    assert!(o.status.success(), "helm template {args:?}: objects fail their schemas:\n{}", out(&o));
    let report = out(&o);
    let docs: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(json.path()).unwrap()).unwrap();
    assert_eq!(report.lines().filter(|l| l.starts_with("ok ")).count(), docs.len(), "{report}");
    docs
}

fn object<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among {:?}", docs.iter().map(|d| &d["kind"]).collect::<Vec<_>>()))
}

fn kinds(docs: &[serde_json::Value]) -> BTreeSet<String> {
    docs.iter().map(|d| d["kind"].as_str().unwrap().to_string()).collect()
}

/// The pod spec's one container.
fn container(workload: &serde_json::Value) -> &serde_json::Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn helm_chart_lints_renders_and_validates_for_each_value_set() {
    let ci = |f: &str| format!("{}/ci/{f}", chart());
    for set in ["", "gpu-values.yaml", "mig-values.yaml", "workers-keda-values.yaml", "statefulset-values.yaml"] {
        let mut cmd = helm();
        cmd.args(["lint", "--strict", &chart(), "--kube-version", KUBERNETES]);
        if !set.is_empty() {
            cmd.args(["-f", &ci(set)]);
        }
        ok(&mut cmd);
    }

    // Defaults: a live Deployment with probes, drain, security and a PDB.
    let docs = render_and_validate(&[]);
    // (the Pod is the `helm test` hook: tests/deploy/chart.rs)
    assert_eq!(
        kinds(&docs),
        ["ConfigMap", "Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"].map(String::from).into(),
    );
    let d = object(&docs, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let c = container(d);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 30, "longer than the 30 s drain: {pod}");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let mounts: Vec<&str> = c["volumeMounts"].as_array().unwrap().iter().map(|m| m["mountPath"].as_str().unwrap()).collect();
    assert!(mounts.contains(&"/data") && mounts.contains(&"/tmp"), "{mounts:?}");
    assert_eq!(c["args"][0], "run");
    assert!(c["args"].as_array().unwrap().iter().any(|a| a == "0.0.0.0:9464"), "{}", c["args"]);
    assert!(c["resources"]["limits"].get("nvidia.com/gpu").is_none(), "no GPU by default");
    // The ConfigMap holds a pipeline the binary accepts (the image's paths mapped onto this checkout).
    let toml = object(&docs, "ConfigMap")["data"]["pipeline.toml"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let here =
        toml.replace("/opt/infer-stream/", &format!("{}/", root().display())).replace("/data/", &format!("{}/", dir.path().display()));
    assert_ne!(here, toml, "the default pipeline uses the image's paths");
    std::fs::write(dir.path().join("pipeline.toml"), here).unwrap();
    let o = bin()
        .arg("validate")
        .arg(dir.path().join("pipeline.toml"))
        .env("ORT_DYLIB_PATH", root().join(".deps/onnxruntime/libonnxruntime.so"))
        .output()
        .unwrap();
    assert!(o.status.success(), "the chart's default pipeline: {}", stderr(&o));

    // Whole GPUs: the resource limit, runtime class, node selector, tolerations, HPA, ServiceMonitor.
    let docs = render_and_validate(&["-f", &ci("gpu-values.yaml")]);
    let d = object(&docs, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(container(d)["resources"]["limits"]["nvidia.com/gpu"], 1);
    assert_eq!(container(d)["image"], "registry.example.com/infer-stream:0.1.0-gpu");
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"], "true");
    assert_eq!(pod["tolerations"][0]["key"], "nvidia.com/gpu");
    assert!(d["spec"].get("replicas").is_none(), "the HPA owns the replica count");
    let hpa = object(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(hpa["spec"]["metrics"][0]["pods"]["metric"]["name"], "infer_stream_infer_busy_ratio");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], d["metadata"]["name"]);
    let sm = object(&docs, "ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");

    // A MIG slice.
    let docs = render_and_validate(&["-f", &ci("mig-values.yaml")]);
    let limits = &container(object(&docs, "Deployment"))["resources"]["limits"];
    assert_eq!(limits["nvidia.com/mig-1g.10gb"], 1);
    assert!(limits.get("nvidia.com/gpu").is_none(), "{limits}");

    // Job workers on Kafka, scaled by KEDA on lag, to zero.
    let docs = render_and_validate(&["-f", &ci("workers-keda-values.yaml")]);
    assert!(!kinds(&docs).contains("PodDisruptionBudget"), "no live pods, no PDB");
    let w = object(&docs, "Deployment");
    let env: Vec<(String, String)> = container(w)["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .collect();
    assert!(env.contains(&("KAFKA_TOPIC".into(), "video-jobs".into())), "{env:?}");
    let so = object(&docs, "ScaledObject");
    assert_eq!(so["spec"]["minReplicaCount"], 0);
    assert_eq!(so["spec"]["scaleTargetRef"]["name"], w["metadata"]["name"]);
    let trigger = &so["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "kafka");
    assert_eq!(trigger["metadata"]["topic"], "video-jobs");
    assert_eq!(trigger["metadata"]["consumerGroup"], "infer-stream-workers");
    assert_eq!(trigger["metadata"]["lagThreshold"], "5");
    let worker_toml = object(&docs, "ConfigMap")["data"]["pipeline.toml"].as_str().unwrap();
    for key in ["brokers = \"${KAFKA_BROKERS}\"", "topic = \"${KAFKA_TOPIC}\"", "group = \"${KAFKA_GROUP}\""] {
        assert!(worker_toml.contains(key), "{worker_toml}");
    }
    // The workers' pipeline is one the binary accepts, with the variables the Deployment sets.
    let dir = tempfile::tempdir().unwrap();
    let here = worker_toml
        .replace("/opt/infer-stream/", &format!("{}/", root().display()))
        .replace("/data/", &format!("{}/", dir.path().display()));
    std::fs::write(dir.path().join("workers.toml"), here).unwrap();
    let mut validate = bin();
    validate.arg("validate").arg(dir.path().join("workers.toml"));
    validate.env("ORT_DYLIB_PATH", root().join(".deps/onnxruntime/libonnxruntime.so"));
    for (name, value) in &env {
        validate.env(name, value);
    }
    let o = validate.output().unwrap();
    assert!(o.status.success(), "the chart's job-worker pipeline: {}", stderr(&o));
    let from: Vec<&str> = container(w)["envFrom"].as_array().unwrap().iter().map(|e| e["secretRef"]["name"].as_str().unwrap()).collect();
    assert_eq!(from, ["infer-stream-tokens"]);

    // Cameras shared out by ordinal, credentials from a Secret.
    let docs = render_and_validate(&["-f", &ci("statefulset-values.yaml")]);
    let s = object(&docs, "StatefulSet");
    let c = container(s);
    assert!(
        c["args"].as_array().unwrap().iter().any(|a| a == "/etc/infer-stream/pipeline/shard-$(INFER_STREAM_SHARD).toml"),
        "{}",
        c["args"]
    );
    let shard = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "INFER_STREAM_SHARD").unwrap();
    assert_eq!(shard["valueFrom"]["fieldRef"]["fieldPath"], "metadata.labels['apps.kubernetes.io/pod-index']");
    let cm = object(&docs, "ConfigMap");
    assert!(
        cm["data"]["shard-0.toml"].as_str().unwrap().contains("cam-gate")
            && cm["data"]["shard-1.toml"].as_str().unwrap().contains("cam-dock")
    );
    assert_eq!(object(&docs, "Secret")["stringData"]["CAM_USER"], "viewer");
    assert!(docs.iter().any(|d| d["kind"] == "Service" && d["spec"]["clusterIP"] == "None"), "the StatefulSet's headless Service");
}

#[test]
fn bad_values_fail_helm_template_with_a_message() {
    for (set, want) in [
        ("gpu.resourceName=amd.com/gpu", "at '/gpu/resourceName'"),
        ("live.kind=DaemonSet", "at '/live/kind': value must be one of 'Deployment', 'StatefulSet'"),
        ("image.tag=latest", "at '/image/tag'"),
        ("live.replica=2", "additional properties 'replica' not allowed"),
        ("live.drainSeconds=0", "at '/live/drainSeconds': minimum: got 0, want 1"),
        ("workers.kafka.brokers=", "at '/workers/kafka/brokers'"),
        ("metrics.port=80", "at '/metrics/port'"),
    ] {
        let o = helm().args(["template", "rel", &chart(), "--set", set]).output().unwrap();
        let said = out(&o);
        assert!(!o.status.success(), "--set {set} rendered:\n{said}");
        assert!(said.contains("values don't meet the specifications of the schema") && said.contains(want), "--set {set}: {said}");
    }
    // What a schema cannot say, the templates check.
    let ci = |f: &str| format!("{}/ci/{f}", chart());
    for (args, want) in [
        (
            vec!["--set", "live.autoscaling.enabled=true", "--set", "live.autoscaling.minReplicas=5"],
            "live.autoscaling: minReplicas (5) is more than maxReplicas (4)",
        ),
        (
            vec!["-f", &ci("workers-keda-values.yaml"), "--set", "workers.keda.minReplicas=20"],
            "workers.keda: minReplicas (20) is more than maxReplicas (16)",
        ),
        (vec!["-f", &ci("statefulset-values.yaml"), "--set", "live.autoscaling.enabled=true"], "live.autoscaling with pipeline.shards"),
    ] {
        let o = helm().args(["template", "rel", &chart()]).args(&args).output().unwrap();
        let said = out(&o);
        assert!(!o.status.success() && said.contains(want), "{args:?}: {said}");
    }
}

// ----------------------------------------------------------------- monitoring

fn require(tool: &str) {
    let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "`{tool}` is not installed: run scripts/setup.sh (it installs Debian's prometheus package)");
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    require("promtool");
    let dir = root().join("deploy/prometheus");
    let checked = ok(Command::new("promtool").args(["check", "rules", "alerts.yaml"]).current_dir(&dir));
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
    let tested = ok(Command::new("promtool").args(["test", "rules", "alerts.test.yaml"]).current_dir(&dir));
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a unit test that fires it and one evaluation where it stays silent.
    let rules = std::fs::read_to_string(dir.join("alerts.yaml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("alerts.test.yaml")).unwrap();
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert_eq!(alerts.len(), 6, "{alerts:?}");
    for a in alerts {
        let evals: Vec<&str> = tests.split("- eval_time:").filter(|e| e.contains(&format!("alertname: {a}\n"))).collect();
        assert!(evals.iter().any(|e| e.contains("exp_labels")), "{a}: no case where it fires");
        assert!(
            evals.iter().any(|e| e.contains("exp_alerts: []"))
                || tests.split("- name:").any(|t| t.contains(a) && t.matches("series:").count() > 1),
            "{a}: no case where it stays silent"
        );
    }
    // A broken rule file fails the check (the test can fail).
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bad.yaml"), rules.replace("== 0", "=== 0")).unwrap();
    let o = Command::new("promtool").args(["check", "rules"]).arg(tmp.path().join("bad.yaml")).output().unwrap();
    assert!(!o.status.success(), "{}", out(&o));
}

/// Metric names that exist only with a GPU (ours through NVML, or NVIDIA's
/// DCGM exporter): their queries are checked for syntax by Prometheus here,
/// and for series where a GPU is.
fn absent_here(name: &str) -> bool {
    name.starts_with("infer_stream_gpu_") || name.starts_with("DCGM_FI_")
}

/// Metric names in a PromQL expression (identifiers followed by `{`, `[`, `)`, space or end, not functions or keywords).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let ch = b[i] as char;
        if ch == '"' {
            in_str = !in_str;
            i += 1;
            continue;
        }
        if in_str
            || !(ch.is_ascii_alphabetic() || ch == '_')
            || (i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'$'))
        {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
            i += 1;
        }
        let word = &expr[start..i];
        let next = expr[i..].trim_start().chars().next();
        let keyword = ["by", "on", "and", "or", "unless", "without", "ignoring", "group_left", "group_right", "bool", "le", "offset"];
        if next != Some('(') && !keyword.contains(&word) && (word.contains('_') || word == "up") && !word.starts_with("__") {
            // Label names inside `by (...)` / `on (...)` lists and label matchers are not metrics.
            let before = expr[..start].trim_end();
            let in_list = before.ends_with('(') && {
                let head = before[..before.len() - 1].trim_end();
                keyword.iter().any(|k| head.ends_with(k))
            } || before.ends_with(',') && {
                let open = before.rfind('(').unwrap_or(0);
                let head = expr[..open].trim_end();
                keyword.iter().any(|k| head.ends_with(k)) && !expr[open..start].contains(')')
            };
            let in_matcher = expr[..start].rfind('{') > expr[..start].rfind('}');
            let label_arg = before.ends_with(',') && expr[..start].rfind("label_replace(").is_some() && next == Some(',');
            if !in_list && !in_matcher && !label_arg {
                names.insert(word.to_string());
            }
        }
    }
    names
}

/// The expression an alert fires on, without its final threshold (`X > 2` → `X`).
fn signal(expr: &str) -> String {
    // Each side of a plain `and` (not `and on (...)`, which matches labels)
    // loses its own threshold (a number, or a product of numbers: `64 * 1024 * 1024`).
    let mut parts = Vec::new();
    let mut rest = expr.trim();
    while let Some(i) = rest.find(" and ").filter(|&i| {
        let after = rest[i + 5..].trim_start();
        !after.starts_with("on") && !after.starts_with("ignoring")
    }) {
        parts.push(without_threshold(rest[..i].trim()));
        rest = rest[i + 5..].trim();
    }
    parts.push(without_threshold(rest));
    parts.join(" and ")
}

fn without_threshold(e: &str) -> String {
    for op in [" == ", " != ", " >= ", " <= ", " > ", " < "] {
        if let Some(i) = e.rfind(op) {
            let rhs = e[i + op.len()..].trim();
            if rhs.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '*' || c == ' ') {
                return e[..i].trim().to_string();
            }
        }
    }
    e.to_string()
}

/// Every query a Grafana dashboard holds: its panels' targets and its template variables' `label_values(EXPR, label)`.
fn dashboard_queries(dash: &serde_json::Value) -> Vec<(String, String)> {
    let mut q = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            q.push((format!("panel {:?}", p["title"].as_str().unwrap()), t["expr"].as_str().unwrap().to_string()));
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(def) = v["definition"].as_str() {
            let inner = def.strip_prefix("label_values(").and_then(|d| d.rsplit_once(',')).map(|(e, _)| e.to_string()).unwrap();
            q.push((format!("variable ${}", v["name"].as_str().unwrap()), inner));
        }
    }
    q
}

/// Dashboard variables as a live check sees them: every job, instance and pipeline.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "10s")
        .replace("$__range", "1m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
        .replace("$pipeline", ".*")
}

/// (label, expression) of every rule in a Prometheus rules file (the `expr: |` blocks included).
fn rule_queries(text: &str) -> Vec<(String, String)> {
    let mut q = Vec::new();
    let mut name = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim();
        if let Some(n) = t.strip_prefix("- alert: ").or_else(|| t.strip_prefix("- record: ")) {
            name = n.to_string();
        }
        if let Some(e) = t.strip_prefix("expr:") {
            let e = e.trim();
            let expr = if e == "|" {
                let indent = lines.peek().map(|n| n.len() - n.trim_start().len()).unwrap_or(0);
                let mut block = Vec::new();
                while let Some(n) = lines.peek() {
                    if n.trim().is_empty() || n.len() - n.trim_start().len() < indent {
                        break;
                    }
                    block.push(lines.next().unwrap().trim());
                }
                block.join(" ")
            } else {
                e.to_string()
            };
            q.push((format!("rule {name}"), expr));
        }
    }
    q
}

/// The adapter's rules with their template filled in as the adapter would for one pod.
fn adapter_queries(text: &str) -> Vec<(String, String)> {
    let mut q = Vec::new();
    let mut series = String::new();
    for l in text.lines() {
        let t = l.trim();
        if let Some(s) = t.strip_prefix("- seriesQuery: ") {
            series = s.trim_matches('\'').split('{').next().unwrap().to_string();
        }
        if let Some(m) = t.strip_prefix("metricsQuery: ") {
            let m = m
                .trim_matches('\'')
                .replace("<<.Series>>", &series)
                .replace("<<.LabelMatchers>>", "kind=\"infer\"")
                .replace("<<.GroupBy>>", "instance");
            q.push((format!("adapter rule for {series}"), m));
        }
    }
    q
}

#[test]
fn every_dashboard_and_alert_query_returns_series_from_a_live_pipeline() {
    require_assets();
    require("prometheus");
    require("promtool");
    let dir = tempfile::tempdir().unwrap();
    // A real Kafka-protocol broker for a bus sink, so the spool's series exist.
    let broker = util::brokers::tansu(dir.path(), "memory://tansu/");
    // Two looping streams at their own pace, a batching infer stage, a file
    // and a Kafka sink: every family has series.
    let pipeline = dir.path().join("monitoring.toml");
    let sample = |s: &str| root().join("samples").join(s).display().to_string();
    let model = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx").display().to_string();
    let mut toml = String::from("[pipeline]\nname = \"monitoring\"\n");
    for (cam, s) in [("cam0", "text-720p.mp4"), ("cam1", "clip.webm")] {
        toml += &format!("\n[sources.{cam}]\nkind = \"file\"\nuri = \"{}\"\nrealtime = true\nrestart = \"always\"\n", sample(s));
    }
    toml += &format!(
        "\n[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam0\", \"cam1\"]\nwidth = 320\nheight = 192\ncolor = \"bgr\"\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\
         \n[stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{model}\"\nbatch = {{ max = 2, timeout_ms = 20 }}\n\
         \n[stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\
         \n[sinks.results]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{}\"\n\
         \n[sinks.bus]\nkind = \"kafka\"\ninputs = [\"boxes\"]\nbrokers = \"{}\"\ntopic = \"results\"\nspool_dir = \"{}\"\n",
        dir.path().join("out.ndjson").display(),
        broker.addr(),
        dir.path().join("spool").display(),
    );
    std::fs::write(&pipeline, toml).unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let run = Reaped(
        bin()
            .arg("run")
            .arg(&pipeline)
            .args(["--metrics-addr", &addr.to_string(), "--progress", "never"])
            .env("ORT_DYLIB_PATH", root().join(".deps/onnxruntime/libonnxruntime.so"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(60), || get(addr, "/readyz").is_some_and(|(s, _)| s == 200)), "the pipeline is not ready");
    let prom = Prometheus::start(dir.path(), addr, Some(&root().join("deploy/prometheus/alerts.yaml")));

    let mut queries = Vec::new();
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("deploy/grafana/infer-stream.json")).unwrap()).unwrap();
    queries.extend(dashboard_queries(&dash).into_iter().map(|(w, e)| (format!("dashboard {w}"), substitute(&e))));
    let rules = rule_queries(&std::fs::read_to_string(root().join("deploy/prometheus/alerts.yaml")).unwrap());
    assert_eq!(rules.len(), 7, "{rules:?}");
    queries.extend(rules.into_iter().map(|(w, e)| (w, signal(&e))));
    queries.extend(adapter_queries(&std::fs::read_to_string(root().join("deploy/prometheus/adapter-rules.yaml")).unwrap()));
    assert!(queries.len() >= 30, "{}", queries.len());

    // Every metric a query names is one /metrics exports (or one of the few that need a GPU or a spool).
    let scrape = get(addr, "/metrics").unwrap().1;
    let exported: BTreeSet<&str> = scrape.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
    let mut absent = BTreeSet::new();
    for (what, e) in &queries {
        for name in metric_names(e) {
            if name == "up" || name.contains(':') {
                continue; // Prometheus's own, and our recording rule
            }
            if absent_here(&name) {
                absent.insert(name);
                continue;
            }
            assert!(exported.contains(name.as_str()), "{what}: `{name}` is not exported by /metrics\n{e}");
        }
    }
    assert!(absent.contains("infer_stream_gpu_utilization_ratio") && !absent.contains("infer_stream_sink_spool_bytes"), "{absent:?}");

    // Every query returns series (those on absent metrics: accepted, with none here).
    let mut pending: Vec<&(String, String)> = queries.iter().collect();
    let t0 = Instant::now();
    while !pending.is_empty() && t0.elapsed() < Duration::from_secs(90) {
        pending.retain(|(_, e)| {
            let n = prom.series(e).expect("prometheus answers").len();
            let needs_absent = metric_names(e).iter().any(|m| absent_here(m));
            if needs_absent {
                return false;
            }
            n == 0
        });
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        pending.is_empty(),
        "no series after 90 s for:\n{}\nprometheus log:\n{}",
        pending.iter().map(|(w, e)| format!("{w}: {e}")).collect::<Vec<_>>().join("\n"),
        std::fs::read_to_string(&prom.log).unwrap_or_default()
    );
    // Each source stream is seen at its own rate by the recording rule the fps alert uses.
    let fps = prom.series("infer_stream:stream_fps:rate1m").expect("prometheus answers");
    let streams: BTreeSet<&str> = fps.iter().map(|s| s["metric"]["stream"].as_str().unwrap()).collect();
    assert_eq!(streams, ["cam0", "cam1"].into(), "{fps:?}");
    drop(run);
}

#[test]
fn promql_metric_names_are_found() {
    let e = r#"sum by (job, instance, pipeline) (rate(infer_stream_frames_dropped_total{job=~".*",kind="infer"}[5m])) / on (pipeline) group_left label_replace(infer_stream_stream_lost_total, "node", "$1", "stream", "(.*)") and up == 0"#;
    assert_eq!(metric_names(e), ["infer_stream_frames_dropped_total", "infer_stream_stream_lost_total", "up"].map(String::from).into());
    assert_eq!(signal("histogram_quantile(0.99, x) > 2"), "histogram_quantile(0.99, x)");
    assert_eq!(signal("a / b > 0.01"), "a / b");
    assert_eq!(signal("deriv(a[5m]) > 0 and a > 64 * 1024"), "deriv(a[5m]) and a");
    assert_eq!(signal("rate(a[1m]) and on (stream) b > 2"), "rate(a[1m]) and on (stream) b");
}
