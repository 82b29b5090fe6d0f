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

/// A PostgreSQL server (Debian's postgresql 15) for brokers with durable
/// storage: a fresh cluster in a folder owned by `postgres` (the tests run as
/// root, PostgreSQL refuses to), trust authentication on loopback, on a free
/// port. `url()` is `postgres://postgres:postgres@127.0.0.1:PORT/postgres`.
pub struct Postgres {
    pub broker: Broker,
    _dir: tempfile::TempDir,
}

impl Postgres {
    pub fn url(&self) -> String {
        format!("postgres://postgres:postgres@127.0.0.1:{}/postgres", self.broker.port)
    }
}

pub fn postgres() -> Postgres {
    let bin = Path::new("/usr/lib/postgresql/15/bin");
    assert!(bin.join("initdb").exists(), "PostgreSQL 15 is missing: run scripts/setup.sh (scripts/install-deps.sh)");
    let dir = tempfile::tempdir().unwrap();
    let own = |p: &Path| assert!(Command::new("chown").args(["-R", "postgres"]).arg(p).status().unwrap().success());
    own(dir.path());
    let data = dir.path().join("data");
    let st = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin.join("initdb"))
        .args(["-D"])
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "initdb failed");
    let port = free_port();
    let cmd = vec![
        "runuser".into(),
        "-u".into(),
        "postgres".into(),
        "--".into(),
        bin.join("postgres").display().to_string(),
        "-D".into(),
        data.display().to_string(),
        "-p".into(),
        port.to_string(),
        "-k".into(),
        dir.path().display().to_string(),
        "-c".into(),
        "listen_addresses=127.0.0.1".into(),
    ];
    let log = dir.path().join("postgres.log");
    std::fs::File::create(&log).unwrap();
    own(&log);
    Postgres { broker: Broker::spawn(port, cmd, log), _dir: dir }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGTERM reaches postgres through runuser; a SIGKILL would stop runuser alone.
        self.broker.stop();
    }
}
