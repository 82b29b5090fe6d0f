//! Real message brokers for the integration tests, started on loopback on a
//! free port and stopped when dropped: Tansu (Kafka protocol, from
//! scripts/fetch-brokers.sh) and mosquitto (MQTT, from apt).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::root;

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Wait until something accepts TCP connections on `port`.
pub fn wait_for_port(port: u16, within: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A broker process on `port`, restartable on the same port.
pub struct Broker {
    pub port: u16,
    cmd: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
}

impl Broker {
    fn spawn(port: u16, cmd: Vec<String>, log: PathBuf) -> Broker {
        let mut b = Broker { port, cmd, child: None, log };
        b.start();
        b
    }

    /// Start it (again) on the same port; panics when it does not come up.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(&self.cmd[0])
            .args(&self.cmd[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", self.cmd[0]));
        self.child = Some(child);
        assert!(wait_for_port(self.port, Duration::from_secs(15)), "{} did not listen on {}: {}", self.cmd[0], self.port, self.log_text());
    }

    /// Kill it (SIGKILL) and wait until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `host:port` for clients.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Tansu binary unpacked by scripts/fetch-brokers.sh.
pub fn tansu_bin() -> PathBuf {
    let p = root().join(".deps/tansu/tansu");
    assert!(p.exists(), "{} is missing: run scripts/setup.sh (scripts/fetch-brokers.sh)", p.display());
    p
}

/// A Kafka-protocol broker (Tansu) with `storage` as its engine
/// (`memory://tansu/`: topics are auto-created, lost when it stops).
pub fn tansu(dir: &Path, storage: &str) -> Broker {
    tansu_at(dir, storage, free_port())
}

/// [`tansu`] on a given port (a broker that comes up where a client already waits).
pub fn tansu_at(dir: &Path, storage: &str, port: u16) -> Broker {
    let url = format!("tcp://127.0.0.1:{port}");
    let cmd = vec![
        tansu_bin().display().to_string(),
        "broker".into(),
        "--listener-url".into(),
        url.clone(),
        "--advertised-listener-url".into(),
        url,
        "--storage-engine".into(),
        storage.into(),
    ];
    Broker::spawn(port, cmd, dir.join(format!("tansu-{port}.log")))
}

/// A mosquitto MQTT broker, anonymous, on loopback.
pub fn mosquitto(dir: &Path) -> Broker {
    let port = free_port();
    let conf = dir.join(format!("mosquitto-{port}.conf"));
    std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")).unwrap();
    let cmd = vec!["/usr/sbin/mosquitto".into(), "-c".into(), conf.display().to_string()];
    Broker::spawn(port, cmd, dir.join(format!("mosquitto-{port}.log")))
}

impl Broker {
    /// Stop it with SIGTERM (a clean shutdown: mosquitto saves its persistence) and wait until it is gone.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let _ = c.wait();
        }
    }
}

/// A mosquitto broker that keeps persistent sessions and their queued QoS 1
/// messages across a clean restart ([`Broker::stop`], then [`Broker::start`]).
pub fn mosquitto_persistent(dir: &Path) -> Broker {
    let port = free_port();
    let conf = dir.join(format!("mosquitto-{port}.conf"));
    let data = dir.join(format!("mosquitto-{port}-data/"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        &conf,
        format!(
            // `user root`: started as root, mosquitto would switch to its own user, which cannot write here.
            "listener {port} 127.0.0.1\nallow_anonymous true\nuser root\npersistence true\npersistence_location {}\n\
             max_queued_messages 100000\nlog_dest stderr\n",
            data.display()
        ),
    )
    .unwrap();
    let cmd = vec!["/usr/sbin/mosquitto".into(), "-c".into(), conf.display().to_string()];
    Broker::spawn(port, cmd, dir.join(format!("mosquitto-{port}.log")))
}

/// TLS in front of a plain TCP service (Debian's stunnel4): accepts TLS on
/// `port` with `certs`' server certificate and passes the bytes on
/// to `127.0.0.1:to`. With `client_ca`, a client certificate signed by that
/// CA is required (mutual TLS). The way a broker is often exposed over TLS.
pub fn stunnel(dir: &Path, certs: &Path, port: u16, to: u16, client_ca: bool) -> Broker {
    let conf = dir.join(format!("stunnel-{port}.conf"));
    let verify = if client_ca { format!("CAfile = {}\nverify = 2\n", certs.join("ca.crt").display()) } else { String::new() };
    std::fs::write(
        &conf,
        format!(
            "foreground = yes\npid =\n[tls]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{to}\ncert = {}\nkey = {}\n{verify}",
            certs.join("server.crt").display(),
            certs.join("server.key").display()
        ),
    )
    .unwrap();
    assert!(Path::new("/usr/bin/stunnel4").exists(), "stunnel4 is missing: run scripts/setup.sh (scripts/install-deps.sh)");
    let cmd = vec!["/usr/bin/stunnel4".into(), conf.display().to_string()];
    Broker::spawn(port, cmd, dir.join(format!("stunnel-{port}.log")))
}

/// A Kafka-protocol broker (Tansu, in memory) listening on its own free port
/// and advertising `advertised` to clients (the port of a TLS front such as
/// [`stunnel`]).
pub fn tansu_advertising(dir: &Path, advertised: u16) -> Broker {
    let port = free_port();
    let cmd = vec![
        tansu_bin().display().to_string(),
        "broker".into(),
        "--listener-url".into(),
        format!("tcp://127.0.0.1:{port}"),
        "--advertised-listener-url".into(),
        format!("tcp://127.0.0.1:{advertised}"),
        "--storage-engine".into(),
        "memory://tansu/".into(),
    ];
    Broker::spawn(port, cmd, dir.join(format!("tansu-{port}.log")))
}

/// A mosquitto that takes only `user`/`password` (no anonymous clients): a
/// TLS listener (the returned broker's port; `certs`' server certificate) and
/// a plain one on loopback, `plain`, for the test's own subscriber.
pub fn mosquitto_secure(dir: &Path, certs: &Path, user: &str, password: &str) -> (Broker, u16) {
    let port = free_port();
    let plain = free_port();
    let pw = dir.join(format!("mosquitto-{port}.passwd"));
    std::fs::write(&pw, "").unwrap();
    let st = Command::new("/usr/bin/mosquitto_passwd").args(["-b"]).arg(&pw).args([user, password]).status().unwrap();
    assert!(st.success(), "mosquitto_passwd");
    let conf = dir.join(format!("mosquitto-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            // `user root`: started as root, mosquitto would switch to its own user, which cannot read here.
            "per_listener_settings false\nallow_anonymous false\npassword_file {}\nuser root\npersistence false\nlog_dest stderr\n\
             listener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nlistener {plain} 127.0.0.1\n",
            pw.display(),
            certs.join("ca.crt").display(),
            certs.join("server.crt").display(),
            certs.join("server.key").display()
        ),
    )
    .unwrap();
    let cmd = vec!["/usr/sbin/mosquitto".into(), "-c".into(), conf.display().to_string()];
    (Broker::spawn(port, cmd, dir.join(format!("mosquitto-{port}.log"))), plain)
}

/// `NAME: delivered D, retried R, spooled S, ...`: a bus sink's line in the run's summary.
pub fn delivery_line<'a>(err: &'a str, sink: &str) -> &'a str {
    err.lines().find(|l| l.starts_with(&format!("{sink}: delivered "))).unwrap_or_else(|| panic!("no delivery line for {sink}:\n{err}"))
}

/// One figure of a [`delivery_line`]: `delivered`, `retried`, `spooled`, ...,
/// or `undelivered` (what was left in the spool at exit; 0 when the line says none).
pub fn figure(line: &str, what: &str) -> u64 {
    if what == "undelivered" {
        return line
            .split("; ")
            .find_map(|s| s.strip_suffix(" undelivered, kept in the spool for the next run"))
            .map_or(0, |n| n.parse().unwrap());
    }
    let at = line.find(&format!("{what} ")).unwrap_or_else(|| panic!("no `{what}` in {line}")) + what.len() + 1;
    line[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}
