//! `infer-stream serve` for the integration tests (one server per test, no camera): started on a pipeline
//! written into a folder, on a free loopback port, stderr kept as its log, and
//! stopped (SIGTERM, then killed) when dropped; with curl as the client.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::bin;

pub use super::serve::free_port;

pub struct Served {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    log: PathBuf,
}

impl Served {
    /// Write `toml` to `dir/serve.toml` and serve it; `env`: variables for the process.
    pub fn start(dir: &Path, toml: &str, env: &[(&str, &str)]) -> Served {
        let file = dir.join("serve.toml");
        std::fs::write(&file, toml).unwrap();
        let port = free_port();
        let log = dir.join("serve.log");
        let child = bin()
            .args(["serve", file.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run infer-stream serve");
        let mut s = Served { child: Some(child), port, dir: dir.to_path_buf(), log };
        let until = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("serve exited at start ({st}):\n{}", s.log());
            }
            assert!(Instant::now() < until, "serve not listening in 60 s:\n{}", s.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Its standard error so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM; the exit code once it has drained (`None`: killed after 20 s).
    pub fn stop(&mut self) -> Option<i32> {
        super::serve::terminate(self.child.take()?)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What curl got: status, response head (lower case) and body.
pub struct Reply {
    pub code: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// curl `url` with `args` before it.
pub fn curl(url: &str, args: &[&str]) -> Reply {
    let dir = tempfile::tempdir().unwrap();
    let (h, b) = (dir.path().join("h"), dir.path().join("b"));
    let o = Command::new("curl")
        .args(["-s", "-S", "--max-time", "30", "-D", h.to_str().unwrap(), "-o", b.to_str().unwrap(), "-w", "%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl (scripts/install-deps.sh installs it)");
    Reply {
        code: String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0),
        head: std::fs::read_to_string(&h).unwrap_or_default().to_ascii_lowercase(),
        body: std::fs::read_to_string(&b).unwrap_or_default(),
    }
}
