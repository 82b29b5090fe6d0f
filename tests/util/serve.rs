//! `infer-stream serve` for the tests: the server on a pipeline written into
//! a temporary folder, the RTSP test camera (tests/support/rtsp_server.py),
//! curl and plain HTTP requests, and the process's resources from /proc.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::root;

/// One serving test at a time: they share two CPU cores with the camera.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The RTSP test camera on a fixed port, killed when dropped.
pub struct Camera(pub Child);

impl Camera {
    pub fn start(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    /// A camera that requires basic authentication with `user` and `password`.
    pub fn with_credentials(port: u16, user: &str, password: &str) -> Self {
        Self::start_with(port, &["--user", user, "--password", password])
    }

    fn start_with(port: u16, args: &[&str]) -> Self {
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok(), "port {port} is taken: stop whatever listens there");
        let child = Command::new("/usr/bin/python3")
            .arg(root().join("tests/support/rtsp_server.py"))
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tests/support/rtsp_server.py with /usr/bin/python3 (scripts/install-deps.sh installs its packages)");
        let until = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < until, "RTSP server on port {port} not ready in 15 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        Camera(child)
    }
}

impl Drop for Camera {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `infer-stream serve` on a pipeline written into a temporary folder; stopped (SIGTERM) when dropped.
pub struct Serve {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub child: Option<Child>,
    pub scheme: &'static str,
}

impl Serve {
    /// `pipeline`: the file's text, `{dir}` replaced by the folder.
    pub fn start(pipeline: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, pipeline, extra)
    }

    pub fn start_in(dir: tempfile::TempDir, pipeline: &str, extra: &[&str]) -> Self {
        let port = free_port();
        let text = pipeline.replace("{dir}", &dir.path().to_string_lossy()).replace("{root}", &root().to_string_lossy());
        let scheme = if text.contains("tls =") { "https" } else { "http" };
        let file = dir.path().join("serve.toml");
        std::fs::write(&file, text).unwrap();
        let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
        let child = super::bin()
            .arg("serve")
            .arg(&file)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run infer-stream serve");
        let mut s = Serve { dir, port, child: Some(child), scheme };
        let until = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("serve exited at start ({st}):\n{}", s.log());
            }
            assert!(Instant::now() < until, "serve not listening in 30 s:\n{}", s.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://127.0.0.1:{}{path}", self.scheme, self.port)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGTERM; the exit code once it has drained.
    pub fn stop(&mut self) -> Option<i32> {
        terminate(self.child.take()?)
    }
}

/// SIGTERM to `child`; its exit code once it has drained (`None`: killed after 20 s).
pub fn terminate(mut child: Child) -> Option<i32> {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A curl request: (status, body). `args` come before the URL.
pub fn curl(url: &str, args: &[&str]) -> (u16, String) {
    let o = Command::new("curl")
        .args(["-s", "-S", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl (scripts/install-deps.sh installs it)");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

pub fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

pub fn add(s: &Serve, body: Value) -> (u16, Value) {
    let (code, b) = curl(&s.url("/v1/streams"), &["-X", "POST", "-H", "content-type: application/json", "-d", &body.to_string()]);
    (code, json_of(&b))
}

/// A plain HTTP/1.1 GET without a client process (for polling often): (status, body).
pub fn get(port: u16, path: &str) -> (u16, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

pub fn stream_status(port: u16, id: &str) -> Value {
    let (code, body) = get(port, &format!("/v1/streams/{id}"));
    assert_eq!(code, 200, "GET /v1/streams/{id}: {body}");
    json_of(&body)
}

pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (threads, open file descriptors, resident KiB) of a process, from /proc.
pub fn resources(pid: u32) -> (usize, usize, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.split_whitespace().next().unwrap().parse::<u64>().unwrap()).unwrap()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    (field("Threads:") as usize, fds, field("VmRSS:"))
}

pub fn ndjson(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: a line that is not whole JSON ({e}): {l}", p.display())))
        .collect()
}
