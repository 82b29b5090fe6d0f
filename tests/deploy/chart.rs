//! The Helm chart's modes and guards, each checked on what `helm template`
//! renders (validated by `render_and_validate`) and, where it runs something,
//! by running it here: `serve` with the chart's args, tokens and TLS files and
//! its probes asked as the kubelet would; the `helm test` Pod's
//! `infer-stream validate` on the rendered ConfigMaps; the GPU image; a volume
//! for `/data`; the StatefulSet/HPA refusal; resource quantities.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::helm::{chart, container, helm, kinds, object, render_and_validate};
use crate::util::brokers::free_port;
use crate::util::prometheus::Reaped;
use crate::util::{bin, certs, root};
use crate::{out, wait_until};

/// The image's and the pod's absolute paths mapped onto this machine: the
/// image's files onto this checkout, the pod's mounts and volumes under `base`.
fn here(text: &str, base: &Path) -> String {
    let mut s = text.replace("/opt/infer-stream/", &format!("{}/", root().display()));
    for mount in ["/etc/infer-stream/", "/data/"] {
        s = s.replace(mount, &format!("{}{mount}", base.display()));
    }
    s
}

fn ort() -> std::path::PathBuf {
    root().join(".deps/onnxruntime/libonnxruntime.so")
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// The object of `kind` named `name`.
fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind}/{name}"))
}

/// The pod's volumes by name.
fn volumes(pod: &Value) -> BTreeMap<String, Value> {
    pod["volumes"].as_array().unwrap().iter().map(|v| (v["name"].as_str().unwrap().to_string(), v.clone())).collect()
}

/// Lays out a container's mounts under `base` as the kubelet would: a
/// ConfigMap's keys as files (paths mapped by `here`), a Secret's files from
/// `secrets` (name → [(file, contents)]; one the test has not: an empty
/// folder, as a pipeline that read it would say), an emptyDir as an empty folder.
fn lay_out(docs: &[Value], pod: &Value, c: &Value, base: &Path, secrets: &BTreeMap<&str, Vec<(&str, Vec<u8>)>>) {
    let vols = volumes(pod);
    for m in c["volumeMounts"].as_array().unwrap() {
        let dir = base.join(m["mountPath"].as_str().unwrap().trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        let v = &vols[m["name"].as_str().unwrap()];
        if let Some(cm) = v["configMap"]["name"].as_str() {
            for (k, text) in named(docs, "ConfigMap", cm)["data"].as_object().unwrap() {
                std::fs::write(dir.join(k), here(text.as_str().unwrap(), base)).unwrap();
            }
        } else if let Some(s) = v["secret"]["secretName"].as_str() {
            let files = secrets.get(s).map(Vec::as_slice).unwrap_or_default();
            // The kubelet mounts only the listed keys (`items`), under their `path`.
            let items = v["secret"]["items"].as_array().cloned().unwrap_or_default();
            for (k, bytes) in files {
                let path = items.iter().find(|i| i["key"] == *k).map_or(*k, |i| i["path"].as_str().unwrap());
                if items.is_empty() || items.iter().any(|i| i["key"] == *k) {
                    std::fs::write(dir.join(path), bytes).unwrap();
                }
            }
        }
    }
}

/// The container's environment as the pod would have it: plain values, and
/// the keys of the Secrets the chart rendered (`envFrom`).
fn environment(docs: &[Value], c: &Value) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .collect();
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let name = from["secretRef"]["name"].as_str().unwrap();
        if let Some(s) = docs.iter().find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name) {
            for (k, v) in s["stringData"].as_object().unwrap() {
                env.push((k.clone(), v.as_str().unwrap().to_string()));
            }
        }
    }
    env
}

/// Runs every container of the chart's `helm test` Pod here, with its args,
/// mounts and environment: (container name, its output).
fn run_test_hook(docs: &[Value], base: &Path, secrets: &BTreeMap<&str, Vec<(&str, Vec<u8>)>>) -> Vec<(String, Output)> {
    let hook = docs.iter().find(|d| d["kind"] == "Pod" && d["metadata"]["annotations"]["helm.sh/hook"] == "test").expect("a helm test Pod");
    let pod = &hook["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let mut outputs = Vec::new();
    for c in pod["containers"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let dir = base.join(&name);
        lay_out(docs, pod, c, &dir, secrets);
        let args: Vec<String> = strs(&c["args"]).into_iter().map(|a| here(a, &dir)).collect();
        assert_eq!(args[0], "validate", "{name}: {args:?}");
        let o = bin().args(&args).envs(environment(docs, c)).env("ORT_DYLIB_PATH", ort()).output().unwrap();
        outputs.push((name, o));
    }
    outputs
}

const TOKEN_VIEWER: &str = "viewer-token-0123456789abcdef";
const TOKEN_ADMIN: &str = "admin-token-0123456789abcdef";

#[test]
fn serve_mode_runs_serve_with_its_api_port_probes_tokens_and_tls() {
    crate::util::require_assets();
    let port = free_port();
    let docs = render_and_validate(&[
        "--set",
        "serve.enabled=true",
        "--set",
        &format!("serve.port={port}"),
        "--set",
        "serve.tokens.existingSecret=api-tokens",
        "--set",
        "serve.tls.secretName=api-tls",
        "--set",
        "serve.resultsBuffer=512",
        "--set",
        "serve.ingress.enabled=true",
        "--set",
        "serve.ingress.host=cams.example.com",
    ]);
    // The Service has the API port; the Ingress goes to it.
    let svc = named(&docs, "Service", "rel-infer-stream");
    let api = svc["spec"]["ports"].as_array().unwrap().iter().find(|p| p["name"] == "api").expect("an api port on the Service");
    assert_eq!((api["port"].as_u64(), api["targetPort"].as_str()), (Some(port as u64), Some("api")), "{svc}");
    assert_eq!(api["appProtocol"], "https");
    let ing = object(&docs, "Ingress");
    let backend = &ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!((backend["name"].as_str(), backend["port"]["name"].as_str()), (Some("rel-infer-stream"), Some("api")), "{ing}");

    // The pod runs `serve` on that port, with the tokens file and the TLS files from their Secrets.
    let d = object(&docs, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let c = container(d);
    let args = strs(&c["args"]);
    let listen = format!("0.0.0.0:{port}");
    assert_eq!(args, ["serve", "/etc/infer-stream/pipeline/pipeline.toml", "--listen", listen.as_str()]);
    let cport = c["ports"].as_array().unwrap().iter().find(|p| p["name"] == "api").expect("the api container port");
    assert_eq!(cport["containerPort"].as_u64(), Some(port as u64));
    let vols = volumes(pod);
    assert_eq!(vols["api-tokens"]["secret"]["secretName"], "api-tokens");
    assert_eq!(vols["api-tokens"]["secret"]["items"][0]["path"], "tokens.txt");
    assert_eq!(vols["api-tls"]["secret"]["secretName"], "api-tls");
    let mounts: BTreeMap<&str, &str> =
        c["volumeMounts"].as_array().unwrap().iter().map(|m| (m["name"].as_str().unwrap(), m["mountPath"].as_str().unwrap())).collect();
    assert_eq!((mounts["api-tokens"], mounts["api-tls"]), ("/etc/infer-stream/api", "/etc/infer-stream/api-tls"));
    let toml = object(&docs, "ConfigMap")["data"]["pipeline.toml"].as_str().unwrap();
    for line in [
        "[pipeline.api]",
        &format!("listen = \"{listen}\""),
        "tokens_file = \"/etc/infer-stream/api/tokens.txt\"",
        "tls = { cert = \"/etc/infer-stream/api-tls/tls.crt\", key = \"/etc/infer-stream/api-tls/tls.key\" }",
        "results_buffer = 512",
    ] {
        assert!(toml.lines().any(|l| l == line), "{line:?} not in the pipeline:\n{toml}");
    }
    // Probes on the API listener: /healthz (open) over HTTPS, /readyz with a token.
    for probe in ["startupProbe", "livenessProbe"] {
        let g = &c[probe]["httpGet"];
        assert_eq!(
            (g["path"].as_str(), g["port"].as_str(), g["scheme"].as_str()),
            (Some("/healthz"), Some("api"), Some("HTTPS")),
            "{probe}"
        );
    }
    let ready = strs(&c["readinessProbe"]["exec"]["command"]);
    assert!(ready.last().unwrap().contains(&format!("https://127.0.0.1:{port}/readyz")), "{ready:?}");
    assert!(!ready.iter().any(|a| a.contains(TOKEN_VIEWER)), "no token in the pod spec");

    // The real thing, laid out as the kubelet would: the Secrets' files, the ConfigMap.
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("pod");
    let tls = dir.path().join("certs");
    std::fs::create_dir(&tls).unwrap();
    certs::certificates(&tls);
    let tokens = format!("# roles\nadmin {TOKEN_ADMIN}\nviewer {TOKEN_VIEWER}\n").into_bytes();
    let secrets: BTreeMap<&str, Vec<(&str, Vec<u8>)>> = [
        ("api-tokens", vec![("tokens.txt", tokens)]),
        (
            "api-tls",
            vec![("tls.crt", std::fs::read(tls.join("server.crt")).unwrap()), ("tls.key", std::fs::read(tls.join("server.key")).unwrap())],
        ),
    ]
    .into();
    lay_out(&docs, pod, c, &base, &secrets);
    // The chart's `helm test` Pod accepts this pipeline, tokens and TLS files included.
    for (name, o) in run_test_hook(&docs, &dir.path().join("hook"), &secrets) {
        assert!(o.status.success(), "{name}: {}", out(&o));
    }
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let args: Vec<String> = args.iter().map(|a| here(a, &base)).collect();
    let _serve = Reaped(bin().args(&args).env("ORT_DYLIB_PATH", ort()).stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let serve_log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    // The kubelet's httpGet: HTTPS without verifying the certificate, as it does.
    let kubelet_get = |path: &str| {
        let url = format!("https://127.0.0.1:{port}{path}");
        let o = Command::new("curl").args(["-sk", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}", &url]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(wait_until(Duration::from_secs(60), || kubelet_get("/healthz") == "200"), "no /healthz over TLS:\n{}", serve_log());
    assert_eq!(kubelet_get("/readyz"), "401", "/readyz needs a token, hence the exec probe");
    // The readiness probe's own command, run as the kubelet runs it in the container.
    let probe = |tokens_dir: &Path| {
        let script = ready.last().unwrap().replace("/etc/infer-stream/api/", &format!("{}/", tokens_dir.display()));
        Command::new(ready[0]).args(&ready[1..ready.len() - 1]).arg(script).output().unwrap()
    };
    let api_dir = base.join("etc/infer-stream/api");
    assert!(
        wait_until(Duration::from_secs(60), || probe(&api_dir).status.success()),
        "never ready: {}\n{}",
        out(&probe(&api_dir)),
        serve_log()
    );
    // It can fail: a token the server does not know.
    let wrong = dir.path().join("wrong");
    std::fs::create_dir(&wrong).unwrap();
    std::fs::write(wrong.join("tokens.txt"), "viewer not-a-token-of-this-server\n").unwrap();
    let o = probe(&wrong);
    assert!(!o.status.success() && out(&o).contains("401"), "{}", out(&o));
    assert!(!serve_log().contains(TOKEN_VIEWER), "a token in the log");
}

#[test]
fn serve_mode_without_tokens_or_with_its_own_api_table_fails_helm_template() {
    for (args, want) in [
        (vec!["--set", "serve.enabled=true"], "serve.enabled needs serve.tokens.existingSecret"),
        (
            vec![
                "--set",
                "serve.enabled=true",
                "--set",
                "serve.tokens.existingSecret=t",
                "--set-string",
                "pipeline.toml=[pipeline]\napi = { listen = \"8080\" }\n",
            ],
            "serve.enabled: pipeline.toml sets [pipeline] api",
        ),
        (
            vec!["--set", "serve.enabled=true", "--set", "serve.tokens.existingSecret=t", "--set", "metrics.serviceMonitor.enabled=true"],
            "add metrics_addr = \"0.0.0.0:9464\" to [pipeline]",
        ),
    ] {
        let o = helm().args(["template", "rel", &chart()]).args(&args).output().unwrap();
        let said = out(&o);
        assert!(!o.status.success() && said.contains(want), "{args:?}: {said}");
    }
}

#[test]
fn helm_test_hook_validates_every_pipeline_the_release_runs() {
    crate::util::require_assets();
    let ci = |f: &str| format!("{}/ci/{f}", chart());
    let none = BTreeMap::new();
    let dir = tempfile::tempdir().unwrap();

    // Defaults: one check, of the ConfigMap the Deployment mounts, in the same image.
    let docs = render_and_validate(&[]);
    let hook = object(&docs, "Pod");
    assert_eq!(hook["metadata"]["annotations"]["helm.sh/hook"], "test");
    let d = object(&docs, "Deployment");
    let hc = &hook["spec"]["containers"][0];
    assert_eq!(hc["image"], container(d)["image"]);
    assert_eq!(strs(&hc["args"]), ["validate", "/etc/infer-stream/pipeline/pipeline.toml"]);
    assert_eq!(volumes(&hook["spec"])["pipeline"]["configMap"], volumes(&d["spec"]["template"]["spec"])["pipeline"]["configMap"]);
    let ran = run_test_hook(&docs, &dir.path().join("default"), &none);
    assert_eq!(ran.len(), 1);
    assert!(ran[0].1.status.success(), "{}", out(&ran[0].1));

    // A StatefulSet's shards, each with its ordinal and the Secret's variables; the job workers'.
    for (set, want) in
        [("statefulset-values.yaml", vec!["validate-shard-0", "validate-shard-1"]), ("workers-keda-values.yaml", vec!["validate-workers"])]
    {
        let docs = render_and_validate(&["-f", &ci(set)]);
        let ran = run_test_hook(&docs, &dir.path().join(set), &none);
        assert_eq!(ran.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), want, "{set}");
        for (name, o) in &ran {
            assert!(o.status.success(), "{set} {name}: {}", out(o));
        }
    }

    // A broken pipeline renders (helm cannot read TOML) but the hook's check fails, saying where.
    let default = object(&render_and_validate(&[]), "ConfigMap")["data"]["pipeline.toml"].as_str().unwrap().to_string();
    for (broken, want) in [
        (default.replace("inputs = [\"det\"]", "inputs = [\"detector\"]"), "detector"),
        (default.replace("ch_PP-OCRv4_det_infer.onnx", "no-such-model.onnx"), "no-such-model.onnx"),
        (default.replace("width = 640", "width = \"wide\""), "width"),
    ] {
        assert_ne!(broken, default);
        let file = dir.path().join("broken.toml");
        std::fs::write(&file, &broken).unwrap();
        let docs = render_and_validate(&["--set-file", &format!("pipeline.toml={}", file.display())]);
        let ran = run_test_hook(&docs, &dir.path().join("broken"), &none);
        let said = out(&ran[0].1);
        assert!(!ran[0].1.status.success(), "a broken pipeline passed:\n{broken}\n{said}");
        assert!(said.contains("pipeline.toml:") && said.contains(want), "{want}: {said}");
        std::fs::remove_dir_all(dir.path().join("broken")).unwrap();
    }
}

#[test]
fn statefulset_with_autoscaling_fails_helm_template() {
    // Without shards too: INFER_STREAM_SHARDS is fixed at live.replicas while an HPA would change the count.
    let o = helm()
        .args([
            "template",
            "rel",
            &chart(),
            "--set",
            "live.kind=StatefulSet",
            "--set",
            "live.autoscaling.enabled=true",
            "--set",
            "live.replicas=2",
        ])
        .output()
        .unwrap();
    let said = out(&o);
    assert!(!o.status.success(), "rendered:\n{said}");
    assert!(said.contains("live.autoscaling with live.kind=StatefulSet") && said.contains("INFER_STREAM_SHARDS=2"), "{said}");
    // A Deployment still autoscales; a StatefulSet without autoscaling still renders its shard count.
    let docs = render_and_validate(&["--set", "live.autoscaling.enabled=true"]);
    assert!(kinds(&docs).contains("HorizontalPodAutoscaler"));
    let docs = render_and_validate(&["--set", "live.kind=StatefulSet", "--set", "live.replicas=3"]);
    let env = &container(object(&docs, "StatefulSet"))["env"];
    let shards = env.as_array().unwrap().iter().find(|e| e["name"] == "INFER_STREAM_SHARDS").unwrap();
    assert_eq!(shards["value"], "3");
}

#[test]
fn gpu_enabled_runs_the_gpu_image() {
    let chart_yaml = std::fs::read_to_string(root().join("deploy/helm/infer-stream/Chart.yaml")).unwrap();
    let app = chart_yaml.lines().find_map(|l| l.strip_prefix("appVersion: ")).unwrap().trim_matches('"').to_string();
    let image = |args: &[&str]| {
        let docs = render_and_validate(args);
        let live = container(object(&docs, "Deployment"))["image"].as_str().unwrap().to_string();
        if let Some(hook) = docs.iter().find(|d| d["kind"] == "Pod") {
            assert_eq!(hook["spec"]["containers"][0]["image"], live.as_str(), "the helm test Pod runs the same image");
        }
        live
    };
    assert_eq!(image(&[]), format!("localhost/infer-stream:{app}"));
    assert_eq!(image(&["--set", "gpu.enabled=true"]), format!("localhost/infer-stream:{app}-gpu"));
    assert_eq!(image(&["--set", "gpu.enabled=true", "--set", "image.tag=1.2.3"]), "localhost/infer-stream:1.2.3-gpu");
    assert_eq!(image(&["--set", "gpu.enabled=true", "--set", "image.tag=1.2.3-gpu"]), "localhost/infer-stream:1.2.3-gpu");
    assert_eq!(image(&["--set", "gpu.enabled=true", "--set", "image.gpuTag=1.2.3-cuda13"]), "localhost/infer-stream:1.2.3-cuda13");
    // The GPU image without GPUs is refused, with the fix.
    let o = helm().args(["template", "rel", &chart(), "--set", "image.tag=1.2.3-gpu"]).output().unwrap();
    let said = out(&o);
    assert!(!o.status.success() && said.contains("image.tag 1.2.3-gpu is the GPU image but gpu.enabled is false"), "{said}");
}

#[test]
fn live_persistence_keeps_data_on_a_volume() {
    // Default: an emptyDir (lost when the pod moves), said by the chart's notes.
    let docs = render_and_validate(&[]);
    assert!(volumes(&object(&docs, "Deployment")["spec"]["template"]["spec"])["data"].get("emptyDir").is_some());
    assert!(!kinds(&docs).contains("PersistentVolumeClaim"));
    let notes = std::fs::read_to_string(root().join("deploy/helm/infer-stream/templates/NOTES.txt")).unwrap();
    assert!(notes.contains("live.persistence.enabled"), "{notes}");

    // A StatefulSet: a volume per replica from a volumeClaimTemplate.
    let docs = render_and_validate(&[
        "--set",
        "live.kind=StatefulSet",
        "--set",
        "live.replicas=3",
        "--set",
        "live.persistence.enabled=true",
        "--set",
        "live.persistence.size=50Gi",
        "--set",
        "live.persistence.storageClassName=fast-ssd",
    ]);
    let s = object(&docs, "StatefulSet");
    let t = &s["spec"]["volumeClaimTemplates"][0];
    assert_eq!(t["metadata"]["name"], "data");
    assert_eq!(t["spec"]["resources"]["requests"]["storage"], "50Gi");
    assert_eq!(t["spec"]["storageClassName"], "fast-ssd");
    assert!(!volumes(&s["spec"]["template"]["spec"]).contains_key("data"), "no emptyDir hides the claim");
    let m = container(s)["volumeMounts"].as_array().unwrap().iter().find(|m| m["name"] == "data").unwrap().clone();
    assert_eq!(m["mountPath"], "/data");

    // A Deployment of one: one claim, and updates that let go of it first.
    let docs = render_and_validate(&["--set", "live.persistence.enabled=true"]);
    let pvc = object(&docs, "PersistentVolumeClaim");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert_eq!(pvc["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    let d = object(&docs, "Deployment");
    assert_eq!(volumes(&d["spec"]["template"]["spec"])["data"]["persistentVolumeClaim"]["claimName"], pvc["metadata"]["name"]);
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    let docs = render_and_validate(&["--set", "live.persistence.enabled=true", "--set", "live.persistence.existingClaim=cams-data"]);
    assert!(!kinds(&docs).contains("PersistentVolumeClaim"));
    assert_eq!(
        volumes(&object(&docs, "Deployment")["spec"]["template"]["spec"])["data"]["persistentVolumeClaim"]["claimName"],
        "cams-data"
    );

    // What cannot work is refused.
    for (args, want) in [
        (vec!["--set", "live.persistence.enabled=true", "--set", "live.replicas=2"], "live.persistence with a Deployment of 2 replicas"),
        (
            vec!["--set", "live.persistence.enabled=true", "--set", "live.autoscaling.enabled=true"],
            "live.persistence with a Deployment of autoscaled replicas",
        ),
        (
            vec!["--set", "live.persistence.enabled=true", "--set", "live.kind=StatefulSet", "--set", "live.persistence.existingClaim=x"],
            "live.persistence.existingClaim with a StatefulSet",
        ),
    ] {
        let o = helm().args(["template", "rel", &chart()]).args(&args).output().unwrap();
        let said = out(&o);
        assert!(!o.status.success() && said.contains(want), "{args:?}: {said}");
    }
}

#[test]
fn resource_quantities_are_checked_by_the_schema() {
    for (set, at) in [
        ("live.resources.requests.cpu=lots", "at '/live/resources/requests/cpu'"),
        ("live.resources.limits.memory=2 GB", "at '/live/resources/limits/memory'"),
        ("workers.resources.requests.cpu=-1", "at '/workers/resources/requests/cpu'"),
        ("live.persistence.size=big", "at '/live/persistence/size'"),
        ("serve.port=80", "at '/serve/port'"),
    ] {
        let o = helm().args(["template", "rel", &chart(), "--set", set]).output().unwrap();
        let said = out(&o);
        assert!(!o.status.success(), "--set {set} rendered");
        assert!(said.contains("values don't meet the specifications of the schema") && said.contains(at), "--set {set}: {said}");
    }
    // Quantities Kubernetes takes pass.
    let docs = render_and_validate(&[
        "--set-string",
        "live.resources.requests.cpu=500m",
        "--set-string",
        "live.resources.requests.memory=1.5Gi",
        "--set",
        "live.resources.limits.cpu=2",
        "--set-string",
        "live.resources.limits.memory=1e9",
    ]);
    let r = &container(object(&docs, "Deployment"))["resources"];
    assert_eq!((r["requests"]["cpu"].as_str(), r["limits"]["memory"].as_str()), (Some("500m"), Some("1e9")), "{r}");
}
