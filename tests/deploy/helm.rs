//! The Helm chart: lint, render and validate against the Kubernetes and CRD
//! schemas for each value set; bad values fail with a message. What the
//! modes and guards render: chart.rs.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use crate::util::*;
use crate::{ok, out};

const KUBERNETES: &str = "1.35.0";

pub(crate) fn helm() -> Command {
    let bin = root().join(".deps/kube/helm");
    assert!(bin.exists(), "{} is missing: run scripts/fetch-deploy-tools.sh", bin.display());
    let mut c = Command::new(bin);
    c.current_dir(root());
    c
}

pub(crate) fn chart() -> String {
    root().join("deploy/helm/infer-stream").display().to_string()
}

/// `helm template` with `args`, every object validated; returns the objects.
pub(crate) fn render_and_validate(args: &[&str]) -> Vec<serde_json::Value> {
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

pub(crate) fn object<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among {:?}", docs.iter().map(|d| &d["kind"]).collect::<Vec<_>>()))
}

pub(crate) fn kinds(docs: &[serde_json::Value]) -> BTreeSet<String> {
    docs.iter().map(|d| d["kind"].as_str().unwrap().to_string()).collect()
}

/// The pod spec's one container.
pub(crate) fn container(workload: &serde_json::Value) -> &serde_json::Value {
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
