//! The security of `infer-stream serve`'s API, with real clients against the
//! real server: what an added stream may open (the templates' `schemes`,
//! `hosts` and `roots`), credentials in query strings masked in replies and
//! the log, one role per token, the bearer scheme in any case, JSON 405s, and
//! a gRPC message over the limit (curl and the grpcio client of
//! scripts/fetch-grpc-client.sh).

mod util;

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::root;
use util::served::{Served, curl};

/// One serving test at a time: they share the CPU cores.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn add(s: &Served, token: Option<&str>, body: Value) -> (u16, Value) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut args = vec!["-X", "POST", "-H", "content-type: application/json", "-d"];
    let body = body.to_string();
    args.push(&body);
    if let Some(a) = &auth {
        args.extend(["-H", a.as_str()]);
    }
    let r = curl(&s.url("/v1/streams"), &args);
    (r.code, r.json())
}

/// A short clip made by FFmpeg.
fn clip(path: &std::path::Path) {
    let made = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=96x64:rate=10", "-t", "1", "-c:v", "libx264", "-pix_fmt", "yuv420p"])
        .arg(path)
        .status()
        .expect("run ffmpeg");
    assert!(made.success());
}

const TEMPLATES: &str = r#"
[pipeline]
name = "rules"

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri", "required"]
uri = "rtsp://127.0.0.1:9/cam"
required = false
wait_at_start = true

[sources.lan]
kind = "rtsp"
dynamic = true
allow = ["uri"]
uri = "rtsp://127.0.0.1:9/cam"
hosts = ["127.0.0.1", "169.254.7.0/24"]
wait_at_start = true

[sources.clips]
kind = "file"
dynamic = true
allow = ["uri"]
uri = "media/clip.mp4"
roots = ["media"]

[sinks.out]
kind = "null"
inputs = ["cams", "lan", "clips"]
"#;

#[test]
fn an_added_stream_opens_only_what_its_templates_rules_allow() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    std::fs::create_dir(&media).unwrap();
    clip(&media.join("clip.mp4"));
    std::fs::write(dir.path().join("private.txt"), "not for the API").unwrap();
    std::os::unix::fs::symlink(dir.path().join("private.txt"), media.join("escape.mp4")).unwrap();
    std::os::unix::fs::symlink("/etc", media.join("etc")).unwrap();
    // A port that would see the server connect if it tried.
    let trap = TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let trap_uri = format!("tcp://{}", trap.local_addr().unwrap());
    let s = Served::start(dir.path(), TEMPLATES, &[]);

    // The file template: no network input, no path outside `media`, and the same words whether or not the file exists.
    let outside = "is not a file under the folders this template allows";
    let refused = [
        ("http://169.254.169.254/latest/meta-data/", "inputs are not allowed: this template opens files"),
        (trap_uri.as_str(), "inputs are not allowed: this template opens files"),
        ("/etc/passwd", outside),
        ("/etc/no-such-file", outside),
        ("../../../../etc/shadow", outside),
        ("../../../../etc/no-such-file", outside),
        ("media/../private.txt", outside),
        ("media/escape.mp4", outside),
        ("media/etc/passwd", outside),
        ("media/etc/no-such-file", outside),
        ("clip.mp4", outside),
        ("concat:/etc/passwd|/etc/passwd", outside),
        ("media/concat:/etc/passwd", "no such file"),
    ];
    for (uri, says) in refused {
        let (code, e) = add(&s, None, json!({ "source": "clips", "id": "f", "uri": uri }));
        assert_eq!(code, 422, "{uri}: {e}");
        let text = e["error"].as_str().unwrap();
        assert!(text.contains(says), "{uri}: {e}");
        // Outside the roots, the reply is the same whether or not the file exists.
        assert!(says != outside || !text.contains("no such file"), "{uri}: {e}");
    }
    // Inside the root: a path relative to the pipeline's folder, opened as resolved.
    let (code, st) = add(&s, None, json!({ "source": "clips", "id": "inside", "uri": "media/clip.mp4" }));
    assert_eq!(code, 201, "{st}");
    assert_eq!(st["uri"], media.canonicalize().unwrap().join("clip.mp4").to_string_lossy().as_ref(), "{st}");
    let (code, e) = add(&s, None, json!({ "source": "clips", "id": "f", "uri": "media/missing.mp4" }));
    assert_eq!(code, 422, "{e}");
    assert!(e["error"].as_str().unwrap().contains("no such file"), "{e}");

    // The rtsp template: link-local and metadata addresses, in any spelling, are refused.
    for uri in [
        "rtsp://169.254.169.254/latest/meta-data/",
        "rtsp://u:p@169.254.169.254:8554/x",
        "rtsp://2852039166/x",
        "rtsp://[fe80::1]/x",
        "rtsp://[::ffff:169.254.169.254]/x",
        "rtsp://[fd00:ec2::254]/x",
        "rtsp://metadata.google.internal/computeMetadata/v1/",
    ] {
        let (code, e) = add(&s, None, json!({ "source": "cams", "id": "c", "uri": uri }));
        assert_eq!(code, 422, "{uri}: {e}");
        assert!(e["error"].as_str().unwrap().contains("refused unless the template's `hosts` names them"), "{uri}: {e}");
    }
    let (code, e) = add(&s, None, json!({ "source": "cams", "id": "c", "uri": trap_uri }));
    assert_eq!(code, 422, "{e}");
    assert!(e["error"].as_str().unwrap().contains("is not an RTSP address"), "{e}");
    // `hosts` narrows, and may name a link-local range on purpose.
    let (code, e) = add(&s, None, json!({ "source": "lan", "id": "c", "uri": "rtsp://10.1.2.3/x" }));
    assert_eq!(code, 422, "{e}");
    assert!(e["error"].as_str().unwrap().contains("is not one this template allows"), "{e}");
    let (code, st) = add(&s, None, json!({ "source": "lan", "id": "listed", "uri": "rtsp://169.254.7.9:9/x" }));
    assert_eq!(code, 201, "{st}");
    let (code, st) = add(&s, None, json!({ "source": "cams", "id": "loopback", "uri": "rtsp://127.0.0.1:9/cam" }));
    assert_eq!(code, 201, "{st}");

    // Only the three accepted streams exist, and nothing knocked on the trap port.
    let all = curl(&s.url("/v1/streams"), &[]).json();
    let mut ids: Vec<&str> = all["streams"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["inside", "listed", "loopback"], "{all}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(trap.accept().is_err(), "the server connected to {trap_uri}");
}

#[test]
fn a_bad_rule_in_a_template_stops_serve_at_start_with_where_it_is() {
    let cases = [
        ("hosts = [\"10.0.0.0/40\"]", "a range's prefix is 0 to 32"),
        ("schemes = [\"http\"]", "an rtsp source opens rtsp:// and rtsps:// only"),
        ("roots = [\"media\"]", "unknown field `roots`"),
    ];
    for (line, says) in cases {
        let pipeline = format!(
            "[sources.cams]\nkind = \"rtsp\"\ndynamic = true\nuri = \"rtsp://127.0.0.1:9/x\"\n{line}\n\n[sinks.out]\nkind = \"null\"\ninputs = [\"cams\"]\n"
        );
        let (code, err) = refused_at_start(&pipeline, &["--listen", "127.0.0.1:0"], &[]);
        assert_eq!(code, Some(2), "{line}: {err}");
        assert!(err.contains(says) && err.contains("serve.toml:5:"), "{line}: {err}");
    }
}

#[test]
fn a_password_in_a_query_string_is_in_no_reply_and_no_log_line() {
    let _g = serial();
    const VIEWER: &str = "viewer-token-0123456789";
    const OPERATOR: &str = "operator-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let pipeline = format!(
        r#"
[pipeline]
api = {{ tokens = [{{ role = "viewer", token = "{VIEWER}" }}, {{ role = "operator", token = "{OPERATOR}" }}] }}

[sources.cams]
kind = "rtsp"
dynamic = true
allow = ["uri", "required"]
uri = "rtsp://127.0.0.1:9/cam"
wait_at_start = true
connect_timeout_ms = 300
backoff_initial_ms = 100
backoff_max_ms = 200

[sinks.out]
kind = "null"
inputs = ["cams"]
"#
    );
    let mut s = Served::start(dir.path(), &pipeline, &[]);
    let uri = "rtsp://127.0.0.1:9/cam?user=admin&password=Q5ecret-pw&token=T0ken-secret&channel=1";
    let (code, st) = add(&s, Some(OPERATOR), json!({ "source": "cams", "id": "door", "uri": uri, "required": false }));
    assert_eq!(code, 201, "{st}");
    assert_eq!(st["uri"], "rtsp://127.0.0.1:9/cam?user=admin&password=***&token=***&channel=1", "{st}");
    // A refused one quotes the uri masked too.
    let (code, e) = add(&s, Some(OPERATOR), json!({ "source": "cams", "id": "meta", "uri": "rtsp://169.254.169.254/x?pwd=Q5ecret-pw" }));
    assert_eq!(code, 422, "{e}");
    assert!(e["error"].as_str().unwrap().contains("pwd=***"), "{e}");
    // The camera is down: its status says why, a few times over.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let r = curl(&s.url("/v1/streams/door"), &["-H", &format!("Authorization: Bearer {VIEWER}")]);
        assert_eq!(r.code, 200, "{}", r.body);
        if r.json()["last_error"].is_string() {
            break;
        }
        assert!(Instant::now() < until, "no last_error: {}", r.body);
        std::thread::sleep(Duration::from_millis(100));
    }
    for path in ["/v1/streams", "/v1/streams/door", "/v1/pipeline", "/readyz?verbose", "/metrics"] {
        let r = curl(&s.url(path), &["-H", &format!("Authorization: Bearer {VIEWER}")]);
        assert_eq!(r.code, 200, "{path}: {}", r.body);
        assert!(!r.body.contains("Q5ecret") && !r.body.contains("T0ken-secret"), "a secret in {path}: {}", r.body);
    }
    let r = curl(&s.url("/v1/streams"), &["-H", &format!("Authorization: Bearer {VIEWER}")]);
    assert!(r.body.contains("password=***"), "{}", r.body);
    // Removed, stopped: the log and the summary hold no secret either.
    let r = curl(&s.url("/v1/streams/door"), &["-X", "DELETE", "-H", &format!("Authorization: Bearer {OPERATOR}")]);
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(!r.body.contains("Q5ecret"), "{}", r.body);
    s.stop();
    let log = s.log();
    assert!(log.contains("password=***"), "the stream's uri is logged, masked:\n{log}");
    assert!(!log.contains("Q5ecret") && !log.contains("T0ken-secret"), "a secret in the log:\n{log}");
}

#[test]
fn the_bearer_scheme_in_any_case_and_json_405s() {
    let _g = serial();
    const VIEWER: &str = "viewer-token-0123456789";
    const OPERATOR: &str = "operator-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let pipeline = format!(
        "[pipeline]\napi = {{ tokens = [{{ role = \"viewer\", token = \"{VIEWER}\" }}, {{ role = \"operator\", token = \"{OPERATOR}\" }}] }}\n\n[sources.cams]\nkind = \"rtsp\"\ndynamic = true\nuri = \"rtsp://127.0.0.1:9/x\"\n\n[sinks.out]\nkind = \"null\"\ninputs = [\"cams\"]\n"
    );
    let s = Served::start(dir.path(), &pipeline, &[]);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let r = curl(&s.url("/v1/streams"), &["-H", &format!("Authorization: {scheme} {VIEWER}")]);
        assert_eq!(r.code, 200, "{scheme}: {}", r.body);
    }
    let r = curl(&s.url("/v1/streams"), &["-H", &format!("Authorization: Basic {VIEWER}")]);
    assert_eq!(r.code, 401, "{}", r.body);
    // A method a route does not have: 405 with the JSON error and `Allow`.
    // (A viewer's PUT is refused for its role first: 403.)
    let r = curl(&s.url("/v1/streams"), &["-X", "PUT", "-H", &format!("Authorization: bearer {OPERATOR}")]);
    assert_eq!(r.code, 405, "{}", r.body);
    let e = r.json();
    assert_eq!(e["status"], 405, "{e}");
    assert!(e["error"].as_str().unwrap().contains("PUT is not a method of /v1/streams"), "{e}");
    let allow = r.head.lines().find(|l| l.starts_with("allow:")).unwrap_or_default();
    assert!(allow.contains("get") && allow.contains("post") && !allow.contains("put"), "{}", r.head);
}

/// `serve` on `toml` that must stop at start: (exit code, stderr).
fn refused_at_start(toml: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(&file, toml.replace("{dir}", &dir.path().to_string_lossy())).unwrap();
    std::fs::write(
        dir.path().join("tokens.txt"),
        "# role token\nviewer shared-token-0123456789\noperator short\nroot root-token-0123456789\nnonsense\n",
    )
    .unwrap();
    let o = util::bin().arg("serve").arg(&file).args(args).envs(env.iter().copied()).output().unwrap();
    (o.status.code(), util::stderr(&o))
}

#[test]
fn a_token_under_two_roles_and_every_bad_tokens_line_stop_serve_at_start() {
    let pipeline = r#"[pipeline]
api = { listen = "127.0.0.1:0", tokens = [{ role = "admin", token = "${ADMIN_TOKEN}" }], tokens_file = "tokens.txt" }

[sources.cams]
kind = "rtsp"
dynamic = true
uri = "rtsp://127.0.0.1:9/x"

[sinks.out]
kind = "null"
inputs = ["cams"]
"#;
    let (code, err) = refused_at_start(pipeline, &[], &[("ADMIN_TOKEN", "shared-token-0123456789")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("tokens.txt line 2: this token is also `api.tokens`"), "{err}");
    assert!(err.contains("serve.toml:2:"), "the `api.tokens` entry is named by line and column: {err}");
    assert!(err.contains("`admin` there, `viewer` here"), "{err}");
    assert!(!err.contains("shared-token-0123456789"), "the token itself is never shown: {err}");
    // Every bad line of the tokens file, not only the first.
    assert!(err.contains("line 3: a token must be at least 16 characters"), "{err}");
    assert!(err.contains("line 4: unknown role `root`"), "{err}");
    assert!(err.contains("line 5: expected `ROLE TOKEN`"), "{err}");
}

#[test]
fn listen_from_the_command_line_without_tokens_names_the_flag() {
    let pipeline = r#"[pipeline]
api = { listen = "127.0.0.1:8080" }

[sources.cams]
kind = "rtsp"
dynamic = true
uri = "rtsp://127.0.0.1:9/x"

[sinks.out]
kind = "null"
inputs = ["cams"]
"#;
    let (code, err) = refused_at_start(pipeline, &["--listen", "0.0.0.0:18099"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`--listen 0.0.0.0:18099`: the API could be reached from other machines"), "{err}");
    assert!(!err.contains("127.0.0.1:8080\" }"), "the file's address is not what chose it: {err}");
}

#[test]
fn a_grpc_picture_over_the_limit_is_resource_exhausted() {
    let _g = serial();
    let python = root().join(".deps/grpc-venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/fetch-grpc-client.sh (scripts/setup.sh does)", python.display());
    let dir = tempfile::tempdir().unwrap();
    let pipeline = r#"
[sources.req]
kind = "request"
max_bytes = 8388608

[sinks.out]
kind = "null"
inputs = ["req"]
"#;
    let s = Served::start(dir.path(), pipeline, &[]);
    // A 9 MB picture (a PNG's signature, then bytes), and one just over `max_bytes` that fits in a message.
    for (name, size) in [("nine.png", 9 << 20), ("over.png", 8388608 + 1000)] {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        bytes.resize(size, 7);
        let pic = dir.path().join(name);
        std::fs::write(&pic, bytes).unwrap();
        let o = Command::new(&python)
            .arg(root().join("tests/support/grpc_client.py"))
            .args([&s.addr(), "infer", pic.to_str().unwrap(), "--source", "req"])
            .output()
            .unwrap();
        assert!(o.status.success(), "grpc client: {}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout);
        let r: Value = serde_json::from_str(out.lines().next().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(r["error"], "RESOURCE_EXHAUSTED", "{name}: {r}");
    }
}
