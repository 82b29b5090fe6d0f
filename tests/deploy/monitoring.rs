//! Monitoring: the alert rules and their unit tests with promtool, and every
//! dashboard and alert query evaluated by a real Prometheus scraping a real pipeline.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::brokers::free_port;
use crate::util::prometheus::{Prometheus, Reaped};
use crate::util::*;
use crate::{ok, out, wait_until};

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
    let broker = crate::util::brokers::tansu(dir.path(), "memory://tansu/");
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
