//! A real Prometheus server (Debian's `prometheus`) scraping a target every
//! second, for the metrics and monitoring tests; and [`Reaped`], a child
//! process killed and reaped when the test ends, passed or panicked.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::brokers::free_port;
use super::get;

/// Kills and reaps a child process when the test ends, passed or panicked.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running Prometheus server scraping `target` every second.
pub struct Prometheus {
    pub addr: SocketAddr,
    pub log: PathBuf,
    _child: Reaped,
}

impl Prometheus {
    /// Start one in `dir` scraping `target`, with `rules` (a rule file) loaded
    /// and evaluated every second when given; panics with its log when it does not come up.
    pub fn start(dir: &Path, target: SocketAddr, rules: Option<&Path>) -> Prometheus {
        let found = Command::new("prometheus").arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(found, "`prometheus` is not installed: run scripts/setup.sh (it installs Debian's prometheus package)");
        let config = dir.join("prometheus.yml");
        let rules = rules.map_or(String::new(), |r| format!("  evaluation_interval: 1s\nrule_files:\n  - {}\n", r.display()));
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n{rules}scrape_configs:\n  - job_name: infer-stream\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let log = dir.join("prometheus.log");
        // The port is free when picked; another process may take it before Prometheus does: try again.
        for _ in 0..3 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
                .arg(format!("--web.listen-address={addr}"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start prometheus");
            let mut child = Reaped(child);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(30) {
                if child.0.try_wait().unwrap().is_some() {
                    break;
                }
                if get(addr, "/-/ready").is_some_and(|(s, _)| s == 200) {
                    return Prometheus { addr, log, _child: child };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("prometheus did not start:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    }

    /// The series an instant query returns (`None` when Prometheus did not
    /// answer); panics when it rejects the query.
    pub fn series(&self, promql: &str) -> Option<Vec<serde_json::Value>> {
        let q: String = promql
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let (status, body) = get(self.addr, &format!("/api/v1/query?query={q}"))?;
        assert_eq!(status, 200, "Prometheus rejects `{promql}`: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        Some(v["data"]["result"].as_array().unwrap().clone())
    }
}
