//! Live RTSP cameras against a real server: GStreamer's RTSP server
//! (tests/support/rtsp_server.py, run with Debian's python3) on a fixed port
//! per test. The server is stopped (SIGTERM), hung (SIGSTOP) and restarted
//! while the real binary runs; the NDJSON events, the summary and the exit
//! code tell what the pipeline made of it. Tests run one at a time so the
//! timings they check are not skewed by each other.

mod util;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use util::{accounting, bin, root};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().expect("run kill");
    assert!(st.success(), "kill -{sig} {pid}");
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The RTSP server, killed when dropped (also when a test fails half-way).
struct Server {
    port: u16,
    args: Vec<String>,
    child: Option<Child>,
}

impl Server {
    fn start(port: u16, auth: Option<(&str, &str)>) -> Self {
        let mut extra = Vec::new();
        if let Some((u, p)) = auth {
            extra = vec!["--user", u, "--password", p];
        }
        Self::start_with(port, &extra)
    }

    /// The server with more arguments (`--audio FILE`, `--user U --password P`).
    fn start_with(port: u16, extra: &[&str]) -> Self {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: stop whatever listens there (the RTSP tests use fixed ports)"
        );
        let mut args = vec![root().join("tests/support/rtsp_server.py").to_string_lossy().into_owned(), port.to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut s = Server { port, args, child: None };
        s.spawn();
        s
    }

    /// Start the server process; returns when it accepts connections.
    fn spawn(&mut self) -> Instant {
        assert!(self.child.is_none());
        let child = Command::new("/usr/bin/python3")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tests/support/rtsp_server.py with /usr/bin/python3 (scripts/install-deps.sh installs its packages)");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("RTSP server on port {} exited at start ({st}): is gir1.2-gst-rtsp-server-1.0 installed?", self.port);
            }
            if TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_millis(200)).is_ok() {
                return Instant::now();
            }
            assert!(Instant::now() < until, "RTSP server on port {} not ready in 15 s", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// The camera goes away: SIGTERM, and wait until the process is gone.
    fn terminate(&mut self) {
        let mut child = self.child.take().expect("server running");
        signal(child.id(), "TERM");
        if wait_timeout(&mut child, Duration::from_secs(5)).is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGKILL also ends a stopped (SIGSTOP) process.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A running `infer-stream run`, its output in files; killed when dropped.
struct Run {
    child: Option<Child>,
    dir: tempfile::TempDir,
    ndjson: PathBuf,
}

const SOURCE: &str = r#"
[sources.cam]
kind = "rtsp"
uri = "${RTSP_URL}"
watchdog_ms = 1000
connect_timeout_ms = 1000
backoff_initial_ms = 100
backoff_max_ms = 300
"#;

const NDJSON_SINK: &str = r#"
[sinks.out]
kind = "ndjson"
inputs = ["cam"]
path = "out.ndjson"
"#;

impl Run {
    fn start(toml: &str, url: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, toml).unwrap();
        let child = bin()
            .arg("run")
            .arg(&p)
            .args(extra)
            .env("RTSP_URL", url)
            .env("INFER_STREAM_TEST_OUT", dir.path())
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .expect("run infer-stream");
        let ndjson = dir.path().join("out.ndjson");
        Run { child: Some(child), dir, ndjson }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("stderr")).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.path("stdout")).unwrap_or_default()
    }

    /// The NDJSON lines written so far (a partial last line is left for later).
    fn lines(&self) -> Vec<Value> {
        read_lines(&self.ndjson)
    }

    /// Poll the output until `done` holds; fails with the log after `limit` or when the run ends.
    fn wait_for(&mut self, what: &str, limit: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let until = Instant::now() + limit;
        loop {
            let lines = self.lines();
            if done(&lines) {
                return lines;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("infer-stream ended ({st}) while waiting for {what}:\n{}", self.stderr());
            }
            assert!(Instant::now() < until, "no {what} within {limit:?}; {} lines so far:\n{}", lines.len(), self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for the process to end by itself; its exit code.
    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let mut child = self.child.take().unwrap();
        match wait_timeout(&mut child, limit) {
            Some(st) => st.code(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("infer-stream did not exit within {limit:?}:\n{}", self.stderr());
            }
        }
    }

    /// Ctrl-C: drain and exit; its exit code.
    fn interrupt(&mut self) -> Option<i32> {
        signal(self.child.as_ref().unwrap().id(), "INT");
        self.wait_exit(Duration::from_secs(15))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn read_lines(p: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    complete.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", p.display()))).collect()
}

fn is_frame(v: &Value) -> bool {
    v.get("seq").is_some()
}

fn events<'a>(lines: &'a [Value], name: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["event"] == name).collect()
}

fn frames(lines: &[Value]) -> usize {
    lines.iter().filter(|v| is_frame(v)).count()
}

/// Frames after the `n`-th (1-based) event named `name`.
fn frames_after(lines: &[Value], name: &str, n: usize) -> usize {
    let Some(i) = lines.iter().enumerate().filter(|(_, v)| v["event"] == name).nth(n - 1).map(|(i, _)| i) else { return 0 };
    frames(&lines[i + 1..])
}

/// Frame lines: seq and pts strictly increasing; every frame has a pts.
fn check_order(lines: &[Value]) {
    let f: Vec<&Value> = lines.iter().filter(|v| is_frame(v)).collect();
    for w in f.windows(2) {
        assert_eq!(w[1]["seq"].as_u64().unwrap(), w[0]["seq"].as_u64().unwrap() + 1, "{} then {}", w[0], w[1]);
        assert!(w[1]["pts"].as_f64().unwrap() > w[0]["pts"].as_f64().unwrap(), "pts went back: {} then {}", w[0], w[1]);
    }
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// The camera goes away for 5 s and comes back on the same port: the pipeline
/// survives, frames flow again within 2 s of the server's return, one gap is
/// recorded, and Ctrl-C ends the run with every frame accounted for.
#[test]
fn camera_gone_for_five_seconds_then_back() {
    let _serial = serial();
    let mut server = Server::start(18554, None);
    let mut run = Run::start(&format!("{SOURCE}{NDJSON_SINK}"), "rtsp://127.0.0.1:18554/cam", &[]);
    run.wait_for("10 frames", Duration::from_secs(20), |l| frames(l) >= 10);

    server.terminate();
    let lines = run.wait_for("a lost event", Duration::from_secs(5), |l| !events(l, "lost").is_empty());
    let before = frames(&lines);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(frames(&run.lines()), before, "frames while the camera was away");

    let back = server.spawn();
    run.wait_for("a frame after the reconnection", Duration::from_secs(10), |l| frames_after(l, "reconnected", 1) >= 1);
    let took = back.elapsed();
    eprintln!("frames again {took:?} after the server accepted connections again");
    assert!(took < Duration::from_secs(2), "frames flowed again {took:?} after the server was back");
    run.wait_for("10 more frames", Duration::from_secs(10), |l| frames_after(l, "reconnected", 1) >= 10);

    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    let lines = run.lines();
    let (lost, back) = (events(&lines, "lost"), events(&lines, "reconnected"));
    assert_eq!((lost.len(), back.len()), (1, 1), "one gap expected:\n{lines:?}");
    assert_eq!(lost[0]["stream"], "cam");
    assert!(lost[0]["reason"].as_str().unwrap().len() > 3, "{}", lost[0]);
    let gap = back[0]["gap_ms"].as_u64().unwrap();
    assert!((5000..9000).contains(&gap), "gap {gap} ms for a 5 s outage");
    assert!(back[0]["attempts"].as_u64().unwrap() >= 2, "{}", back[0]);
    assert!(back[0]["at_ms"].as_u64().unwrap() > lost[0]["at_ms"].as_u64().unwrap());
    check_order(&lines);
    // The timestamps show the gap too.
    let pts = |i: usize| lines[i]["pts"].as_f64().unwrap();
    let at = lines.iter().position(|v| v["event"] == "lost").unwrap();
    let last_before = (0..at).rev().find(|&i| is_frame(&lines[i])).unwrap();
    let first_after = (at..lines.len()).find(|&i| is_frame(&lines[i])).unwrap();
    assert!(pts(first_after) - pts(last_before) > 4.5, "pts {} then {}", pts(last_before), pts(first_after));

    let (decoded, processed, _dropped, failed) = accounting(&err);
    assert_eq!(failed, 0);
    assert_eq!(processed as usize, frames(&lines), "{err}");
    assert!(decoded >= processed);
    assert!(err.contains("cam: stream lost 1×, reconnected 1×"), "{err}");
    assert!(!err.contains("panic"), "{err}");
}

/// The camera stays away while the source retries over 30 times in a row
/// (fast backoff): it keeps trying, and recovers when the camera returns.
#[test]
fn survives_thirty_failed_reconnects_in_a_row() {
    let _serial = serial();
    let mut server = Server::start(18555, None);
    let toml = format!("{}\n{NDJSON_SINK}", SOURCE.replace("backoff_initial_ms = 100", "backoff_initial_ms = 10").replace("= 300", "= 40"));
    let mut run = Run::start(&toml, "rtsp://127.0.0.1:18555/cam", &[]);
    run.wait_for("5 frames", Duration::from_secs(20), |l| frames(l) >= 5);
    server.terminate();
    // Failed attempts are logged at 1, 2, 4, ... 32.
    let until = Instant::now() + Duration::from_secs(15);
    while !run.stderr().contains("reconnect attempt 32 failed") {
        assert!(Instant::now() < until, "no 32nd failed attempt:\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    server.spawn();
    let lines = run.wait_for("frames after the reconnection", Duration::from_secs(10), |l| frames_after(l, "reconnected", 1) >= 5);
    let back = events(&lines, "reconnected");
    assert!(back[0]["attempts"].as_u64().unwrap() > 32, "{}", back[0]);
    assert_eq!(events(&lines, "lost").len(), 1);
    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    accounting(&err);
    check_order(&run.lines());
}

/// A hung camera (SIGSTOP: the socket stays open, nothing arrives) is caught by
/// the watchdog, and the stream recovers once the camera runs again.
#[test]
fn hung_camera_is_caught_by_the_watchdog() {
    let _serial = serial();
    let server = Server::start(18556, None);
    let mut run = Run::start(&format!("{SOURCE}{NDJSON_SINK}"), "rtsp://127.0.0.1:18556/cam", &[]);
    run.wait_for("5 frames", Duration::from_secs(20), |l| frames(l) >= 5);
    signal(server.pid(), "STOP");
    let stopped = Instant::now();
    let lines = run.wait_for("a lost event", Duration::from_secs(5), |l| !events(l, "lost").is_empty());
    let noticed = stopped.elapsed();
    eprintln!("hung camera noticed after {noticed:?}");
    let lost = events(&lines, "lost")[0].clone();
    assert!(lost["reason"].as_str().unwrap().contains("watchdog"), "{lost}");
    assert!(noticed >= Duration::from_millis(900) && noticed < Duration::from_secs(4), "noticed after {noticed:?} (watchdog 1000 ms)");
    // Hung for a while longer: attempts time out (connect_timeout_ms) rather than block.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(events(&run.lines(), "reconnected").is_empty());
    signal(server.pid(), "CONT");
    let lines = run.wait_for("frames after the camera resumed", Duration::from_secs(10), |l| frames_after(l, "reconnected", 1) >= 5);
    assert_eq!(events(&lines, "lost").len(), 1, "{lines:?}");
    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    accounting(&err);
    check_order(&run.lines());
}

/// With a password in the URL (written in the file), the password appears
/// nowhere: stdout (NDJSON here), stderr (log, progress, summary, errors), the
/// metrics endpoint, the trace and the report; the masked URL is what shows.
#[test]
fn password_is_never_shown() {
    let _serial = serial();
    const PASSWORD: &str = "Xq7-pw-9f3Kz";
    let mut server = Server::start(18557, Some(("admin", PASSWORD)));
    let url = format!("rtsp://admin:{PASSWORD}@127.0.0.1:18557/cam");
    let toml = format!("{}[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"-\"\n", SOURCE.replace("${RTSP_URL}", &url));
    let out = tempfile::tempdir().unwrap();
    let (trace, report) = (out.path().join("trace.json"), out.path().join("report.json"));
    let mut run = Run::start(
        &toml,
        "unused",
        &[
            "--metrics-addr",
            "127.0.0.1:18567",
            "--progress",
            "always",
            "--trace",
            trace.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
    );
    let stdout_frames = |run: &Run| run.stdout().lines().filter(|l| l.contains("\"seq\"")).count();
    let until = Instant::now() + Duration::from_secs(20);
    while stdout_frames(&run) < 5 {
        assert!(Instant::now() < until, "no frames on stdout:\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    // A loss and a reconnection, so those messages are printed too.
    server.terminate();
    std::thread::sleep(Duration::from_millis(500));
    server.spawn();
    let until = Instant::now() + Duration::from_secs(10);
    while !run.stdout().contains("\"reconnected\"") {
        assert!(Instant::now() < until, "no reconnection:\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = http_get(18567, "/metrics");
    assert!(metrics.contains("infer_stream_stream_reconnects_total{pipeline=\"p\",stream=\"cam\"} 1"), "{metrics}");
    let code = run.interrupt();
    let (out, err) = (run.stdout(), run.stderr());
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("rtsp://admin:***@127.0.0.1:18557/cam"), "the masked URL should be shown:\n{err}");
    let trace = std::fs::read_to_string(&trace).unwrap();
    let report = std::fs::read_to_string(&report).unwrap();
    assert!(report.contains("\"reconnects\": 1"), "{report}");
    for (what, text) in [("stdout", &out), ("stderr", &err), ("metrics", &metrics), ("trace", &trace), ("report", &report)] {
        assert!(!text.contains(PASSWORD), "the password shows in {what}:\n{text}");
    }

    // A wrong password: a clear error before anything runs, the attempted password masked too.
    let wrong = "rtsp://admin:Wr0ngPass-77@127.0.0.1:18557/cam";
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("wrong.toml");
    std::fs::write(&p, format!("{SOURCE}{NDJSON_SINK}").replace("${RTSP_URL}", wrong)).unwrap();
    let o = bin().arg("run").arg(&p).output().expect("run infer-stream");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("source `cam`") && err.contains("401") && err.contains("rtsp://admin:***@127.0.0.1:18557/cam"), "{err}");
    assert!(!err.contains("Wr0ngPass-77"), "the password shows in the error:\n{err}");
}

/// `max_retries = 3` and a camera that does not come back: the run gives up
/// with an error naming the stream, exits 1, and the results so far are written.
#[test]
fn gives_up_after_max_retries() {
    let _serial = serial();
    let mut server = Server::start(18558, None);
    let toml = format!("{SOURCE}max_retries = 3\n{NDJSON_SINK}");
    let mut run = Run::start(&toml, "rtsp://127.0.0.1:18558/cam", &[]);
    run.wait_for("5 frames", Duration::from_secs(20), |l| frames(l) >= 5);
    server.terminate();
    let code = run.wait_exit(Duration::from_secs(15));
    let err = run.stderr();
    assert_eq!(code, Some(1), "{err}");
    let msg = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line:\n{err}"));
    assert!(msg.contains("source `cam`") && msg.contains("3 reconnect attempt(s)") && msg.contains("max_retries = 3"), "{msg}");
    let lines = run.lines();
    assert_eq!(events(&lines, "lost").len(), 1);
    assert!(events(&lines, "reconnected").is_empty());
    let (_, processed, _, _) = accounting(&err);
    assert_eq!(processed as usize, frames(&lines), "every frame decoded before the loss is in the file");
    assert!(processed >= 5);
}

/// A camera that is down when the run starts: without `wait_at_start` the run
/// stops before anything runs (exit 2, saying how to wait instead); with it,
/// the run starts with the stream lost, and frames flow once the camera is up,
/// with one lost/reconnected pair around the wait.
#[test]
fn waits_for_a_camera_that_is_down_at_start() {
    let _serial = serial();
    let url = "rtsp://127.0.0.1:18559/cam";
    let mut run = Run::start(&format!("{SOURCE}{NDJSON_SINK}"), url, &[]);
    let code = run.wait_exit(Duration::from_secs(15));
    let err = run.stderr();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("source `cam`") && err.contains("wait_at_start = true"), "{err}");

    let mut run = Run::start(&format!("{SOURCE}wait_at_start = true\n{NDJSON_SINK}"), url, &[]);
    let lines = run.wait_for("a lost event", Duration::from_secs(15), |l| !events(l, "lost").is_empty());
    let reason = events(&lines, "lost")[0]["reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with("not reachable at start"), "{reason}");
    // Still running and still trying while the camera stays away.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(frames(&run.lines()), 0);
    let _server = Server::start(18559, None);
    run.wait_for("10 frames", Duration::from_secs(20), |l| frames(l) >= 10);
    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("camera not reachable at start"), "{err}");
    let lines = run.lines();
    let (lost, back) = (events(&lines, "lost"), events(&lines, "reconnected"));
    assert_eq!((lost.len(), back.len()), (1, 1), "one wait expected:\n{lines:?}");
    assert!(back[0]["gap_ms"].as_u64().unwrap() >= 2000, "{}", back[0]);
    let first_frame = lines.iter().position(is_frame).unwrap();
    let at = |name: &str| lines.iter().position(|v| v["event"] == name).unwrap();
    assert!(at("lost") < at("reconnected") && at("reconnected") < first_frame, "{lines:?}");
    check_order(&lines);
    let (_, processed, _, failed) = accounting(&err);
    assert_eq!((processed as usize, failed), (frames(&lines), 0), "{err}");
}

/// Audio from an RTSP stream: the speech sample served as Opus in real time,
/// decoded, resampled to 16 kHz and run through the VAD; the stream's end
/// (RTCP BYE) ends the run cleanly, every window is accounted for, and the
/// speech segments fall where the ground truth puts them.
#[test]
fn audio_from_an_rtsp_stream() {
    let _serial = serial();
    let wav = root().join("samples/speech-short.wav");
    let _server = Server::start_with(18560, &["--audio", wav.to_str().unwrap()]);
    let model = root().join("models/silero/silero_vad.onnx");
    let toml = format!(
        r#"
[sources.mic]
kind = "audio"
uri = "${{RTSP_URL}}"
sample_rate = 16000
window = 512

[stages.vad]
kind = "vad"
inputs = ["mic"]
model = "{}"
min_silence_ms = 300

[sinks.out]
kind = "ndjson"
inputs = ["vad"]
path = "out.ndjson"
"#,
        model.display()
    );
    let mut run = Run::start(&toml, "rtsp://127.0.0.1:18560/cam", &[]);
    let code = run.wait_exit(Duration::from_secs(40));
    let err = run.stderr();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("opus 48000 Hz"), "{err}");
    let lines = run.lines();
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(root().join("samples/speech-short.truth.json")).unwrap()).unwrap();
    let duration = truth["duration"].as_f64().unwrap();
    let windows = (duration * 16000.0 / 512.0) as usize;
    assert!(frames(&lines).abs_diff(windows) <= 3, "{} windows for {duration} s of audio", frames(&lines));
    let (decoded, processed, _, failed) = accounting(&err);
    assert_eq!((decoded, processed as usize, failed), (processed, frames(&lines), 0), "{err}");
    // Window times follow the stream: 32 ms apart, from 0.
    let pts: Vec<f64> = lines.iter().filter(|v| is_frame(v)).map(|v| v["pts"].as_f64().unwrap()).collect();
    assert!(pts[0].abs() < 0.05, "first window at {}", pts[0]);
    assert!(pts.windows(2).all(|w| (w[1] - w[0] - 0.032).abs() < 0.002), "windows not 32 ms apart");
    let found: Vec<(f64, f64)> = lines
        .iter()
        .filter_map(|v| v["results"]["vad"]["ended"].as_array())
        .flatten()
        .map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap()))
        .collect();
    let want: Vec<(f64, f64)> =
        truth["segments"].as_array().unwrap().iter().map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap())).collect();
    assert_eq!(found.len(), want.len(), "found {found:?}, want {want:?}");
    for (f, w) in found.iter().zip(&want) {
        assert!((f.0 - w.0).abs() < 0.25 && (f.1 - w.1).abs() < 0.25, "segment {f:?} vs truth {w:?}");
    }
}

/// An audio stream over RTSP that hangs (SIGSTOP): Ctrl-C still stops the run
/// at once (exit 130, every window written); left alone, the silent stream
/// ends the run after the 10 s read timeout with an error naming it (exit 1),
/// not as if it had ended by itself.
#[test]
fn hung_audio_stream_is_stopped_and_times_out() {
    let _serial = serial();
    let wav = root().join("samples/speech-eval.wav");
    let server = Server::start_with(18561, &["--audio", wav.to_str().unwrap()]);
    let model = root().join("models/silero/silero_vad.onnx");
    let toml = format!(
        "[sources.mic]\nkind = \"audio\"\nuri = \"${{RTSP_URL}}\"\n\n[stages.vad]\nkind = \"vad\"\ninputs = [\"mic\"]\nmodel = \"{}\"\n{NDJSON_SINK}",
        model.display()
    )
    .replace("inputs = [\"cam\"]", "inputs = [\"vad\"]");
    let url = "rtsp://127.0.0.1:18561/cam";

    let mut run = Run::start(&toml, url, &[]);
    run.wait_for("20 windows", Duration::from_secs(20), |l| frames(l) >= 20);
    signal(server.pid(), "STOP");
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    assert!(t.elapsed() < Duration::from_secs(3), "Ctrl-C took {:?} on a hung stream", t.elapsed());
    let (_, processed, _, _) = accounting(&err);
    assert_eq!(processed as usize, frames(&run.lines()), "{err}");
    signal(server.pid(), "CONT");

    let mut run = Run::start(&toml, url, &[]);
    run.wait_for("20 windows", Duration::from_secs(20), |l| frames(l) >= 20);
    signal(server.pid(), "STOP");
    let code = run.wait_exit(Duration::from_secs(25));
    let err = run.stderr();
    signal(server.pid(), "CONT");
    assert_eq!(code, Some(1), "{err}");
    let msg = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line:\n{err}"));
    assert!(msg.contains("source `mic`") && msg.contains("read error") && msg.contains("rtsp://127.0.0.1:18561/cam"), "{msg}");
    let (_, processed, _, _) = accounting(&err);
    assert_eq!(processed as usize, frames(&run.lines()), "every window before the hang is written");
}

/// `media = "audio"` on an `rtsp` source: the stream's audio in timed windows,
/// through the VAD, surviving the server going away for 3 s like a camera:
/// one lost/reconnected pair, window times always increasing, the gap in them
/// as long as the outage, every window accounted for.
#[test]
fn audio_stream_reconnects_like_a_camera() {
    let _serial = serial();
    let wav = root().join("samples/speech-eval.wav");
    let mut server = Server::start_with(18562, &["--audio", wav.to_str().unwrap()]);
    let model = root().join("models/silero/silero_vad.onnx");
    let toml = format!(
        "{SOURCE}media = \"audio\"\nsample_rate = 16000\nwindow = 512\n\n[stages.vad]\nkind = \"vad\"\ninputs = [\"cam\"]\nmodel = \"{}\"\n{NDJSON_SINK}",
        model.display()
    )
    .replace("inputs = [\"cam\"]\npath", "inputs = [\"vad\"]\npath");
    let mut run = Run::start(&toml, "rtsp://127.0.0.1:18562/cam", &[]);
    run.wait_for("30 windows", Duration::from_secs(20), |l| frames(l) >= 30);
    server.terminate();
    run.wait_for("a lost event", Duration::from_secs(5), |l| !events(l, "lost").is_empty());
    std::thread::sleep(Duration::from_secs(3));
    server.spawn();
    run.wait_for("30 windows after the reconnection", Duration::from_secs(15), |l| frames_after(l, "reconnected", 1) >= 30);
    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("audio: opus 48000 Hz"), "{err}");
    let lines = run.lines();
    assert_eq!((events(&lines, "lost").len(), events(&lines, "reconnected").len()), (1, 1), "{lines:?}");
    check_order(&lines);
    let at = lines.iter().position(|v| v["event"] == "lost").unwrap();
    let pts: Vec<(usize, f64)> =
        lines.iter().enumerate().filter(|(_, v)| is_frame(v)).map(|(i, v)| (i, v["pts"].as_f64().unwrap())).collect();
    assert!(pts[0].1.abs() < 1e-9, "first window at {}", pts[0].1);
    for w in pts.windows(2) {
        let step = w[1].1 - w[0].1;
        if w[0].0 < at && w[1].0 > at {
            assert!(step > 2.5, "a gap of {step:.3} s for a 3 s outage");
        } else {
            assert!((step - 0.032).abs() < 1e-6, "windows {step} s apart at {}", w[0].1);
        }
    }
    assert!(lines.iter().filter(|v| is_frame(v)).all(|v| v["results"]["vad"]["probability"].is_number()), "every window through the VAD");
    let (_, processed, _, failed) = accounting(&err);
    assert_eq!((processed as usize, failed), (frames(&lines), 0), "{err}");
    assert!(err.contains("cam: stream lost 1×, reconnected 1×"), "{err}");
}

/// The default retry schedule (no backoff keys): a camera gone for 5 s is
/// streaming again within 2 s of its return, timed from the moment the server
/// accepts connections again to the first new frame in the output. (With the
/// backoff alone, the attempt after 5 s came at about 7.5 s.)
#[test]
fn default_schedule_recovers_within_two_seconds() {
    let _serial = serial();
    let mut server = Server::start(18580, None);
    let toml =
        format!("[sources.cam]\nkind = \"rtsp\"\nuri = \"${{RTSP_URL}}\"\nwatchdog_ms = 1000\nconnect_timeout_ms = 1000\n{NDJSON_SINK}");
    let mut run = Run::start(&toml, "rtsp://127.0.0.1:18580/cam", &[]);
    run.wait_for("10 frames", Duration::from_secs(20), |l| frames(l) >= 10);
    server.terminate();
    run.wait_for("a lost event", Duration::from_secs(5), |l| !events(l, "lost").is_empty());
    std::thread::sleep(Duration::from_secs(5));
    let back = server.spawn();
    run.wait_for("a frame after the reconnection", Duration::from_secs(40), |l| frames_after(l, "reconnected", 1) >= 1);
    let took = back.elapsed();
    eprintln!("frames again {took:?} after the server accepted connections again");
    assert!(took < Duration::from_secs(2), "frames flowed again {took:?} after the server was back");
    let code = run.interrupt();
    let err = run.stderr();
    assert_eq!(code, Some(130), "{err}");
    let lines = run.lines();
    assert_eq!((events(&lines, "lost").len(), events(&lines, "reconnected").len()), (1, 1), "{lines:?}");
    check_order(&lines);
    assert!(err.contains("probe every 250 ms"), "the schedule is described:\n{err}");
}

/// Reconnecting to a camera that refuses connections: our own warnings say so,
/// and FFmpeg's raw log lines (`[tcp @ 0x…] Connection to tcp://… failed`)
/// do not repeat them at the default log level; with `-v` (debug) they do.
#[test]
fn ffmpeg_log_lines_stay_below_the_default_level() {
    let _serial = serial();
    for (verbose, shown) in [(false, false), (true, true)] {
        let mut server = Server::start(18581, None);
        let mut run = Run::start(&format!("{SOURCE}{NDJSON_SINK}"), "rtsp://127.0.0.1:18581/cam", if verbose { &["-v"] } else { &[] });
        run.wait_for("5 frames", Duration::from_secs(20), |l| frames(l) >= 5);
        server.terminate();
        let until = Instant::now() + Duration::from_secs(10);
        while !run.stderr().contains("reconnect attempt 2 failed") {
            assert!(Instant::now() < until, "no failed attempts:\n{}", run.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
        server.spawn();
        run.wait_for("frames after the reconnection", Duration::from_secs(10), |l| frames_after(l, "reconnected", 1) >= 1);
        let code = run.interrupt();
        let err = run.stderr();
        assert_eq!(code, Some(130), "{err}");
        assert!(err.contains("stream lost") && err.contains("Connection refused"), "our own warnings:\n{err}");
        assert_eq!(err.contains("[tcp @"), shown, "verbose {verbose}:\n{err}");
    }
}

/// `/readyz` follows each camera: ready while it streams, `503` naming the
/// stream while it is lost and reconnecting (the `?verbose` view lists every
/// stream's state), ready again once frames flow.
#[test]
fn readyz_is_not_ready_while_a_camera_is_down() {
    let _serial = serial();
    let mut server = Server::start(18582, None);
    let mut run = Run::start(&format!("{SOURCE}{NDJSON_SINK}"), "rtsp://127.0.0.1:18582/cam", &["--metrics-addr", "127.0.0.1:18583"]);
    run.wait_for("5 frames", Duration::from_secs(20), |l| frames(l) >= 5);
    let ready = |path: &str| {
        let r = http_get(18583, path);
        let status = r.split_whitespace().nth(1).unwrap_or("").to_string();
        (status, r.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string()))
    };
    let (status, body) = ready("/readyz");
    assert_eq!((status.as_str(), body.as_str()), ("200", "ready\n"));
    let (status, body) = ready("/readyz?verbose");
    assert_eq!(status, "200");
    assert!(body.starts_with("ready\n") && body.contains("stream `cam`: streaming"), "{body}");

    server.terminate();
    run.wait_for("a lost event", Duration::from_secs(5), |l| !events(l, "lost").is_empty());
    let (status, body) = ready("/readyz");
    assert_eq!(status, "503", "{body}");
    assert!(body.starts_with("not ready: stream `cam` is lost"), "{body}");
    let (status, body) = ready("/readyz?verbose");
    assert_eq!(status, "503", "{body}");
    assert!(body.contains("stream `cam`: lost") && body.contains("reconnecting"), "{body}");

    let back = server.spawn();
    run.wait_for("a frame after the reconnection", Duration::from_secs(10), |l| frames_after(l, "reconnected", 1) >= 1);
    let (status, body) = ready("/readyz");
    assert_eq!((status.as_str(), body.as_str()), ("200", "ready\n"), "{:?} after the camera was back", back.elapsed());
    assert_eq!(run.interrupt(), Some(130), "{}", run.stderr());
}

/// `required = false`: a camera that may come and go; while it is lost
/// `/readyz` stays ready, and the verbose view still shows the loss.
#[test]
fn a_camera_not_required_leaves_readyz_ready() {
    let _serial = serial();
    let mut server = Server::start(18584, None);
    let toml = format!("{SOURCE}required = false\n{NDJSON_SINK}");
    let mut run = Run::start(&toml, "rtsp://127.0.0.1:18584/cam", &["--metrics-addr", "127.0.0.1:18585"]);
    run.wait_for("5 frames", Duration::from_secs(20), |l| frames(l) >= 5);
    server.terminate();
    run.wait_for("a lost event", Duration::from_secs(5), |l| !events(l, "lost").is_empty());
    let plain = http_get(18585, "/readyz");
    assert!(plain.starts_with("HTTP/1.1 200 ") && plain.ends_with("\r\n\r\nready\n"), "{plain}");
    let verbose = http_get(18585, "/readyz?verbose");
    assert!(
        verbose.starts_with("HTTP/1.1 200 ") && verbose.contains("stream `cam`: lost for ") && verbose.contains("(not required)"),
        "{verbose}"
    );
    assert_eq!(run.interrupt(), Some(130), "{}", run.stderr());
}
