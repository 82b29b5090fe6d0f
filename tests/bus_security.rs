//! The bus sinks' TLS and credentials against real brokers started here:
//! Kafka over TLS with a client certificate (Tansu behind stunnel, which
//! checks the certificate), MQTT over TLS with a user and password (mosquitto
//! with a password file). A wrong CA, a missing client certificate or a wrong
//! password is refused loudly and loses nothing (it waits in the spool, and
//! goes out once the settings are right); the password, given by `${ENV}`,
//! never appears in anything the process prints or writes.

mod util;

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use rumqttc::{Client, Event, MqttOptions, Packet, QoS};
use util::brokers::{mosquitto_secure, stunnel, tansu_advertising};
use util::certs::certificates;
use util::*;

const SECRET: &str = "pw-7Qx2-never-shown";

fn run(p: &Path, out: &Path, env: &[(&str, &str)]) -> Output {
    require_assets();
    let report = out.join("report.json");
    let mut c = bin();
    c.args(["run", p.to_str().unwrap(), "--progress", "never", "--report", report.to_str().unwrap()])
        .env("INFER_STREAM_TEST_OUT", out)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// One figure of the `bus` sink's line in the summary.
fn figure(err: &str, what: &str) -> u64 {
    util::brokers::figure(util::brokers::delivery_line(err, "bus"), what)
}

fn testsrc(frames: u64) -> String {
    format!("[sources.cam]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nrate = 50\nframes = {frames}\nrealtime = true\n")
}

/// Nothing the run printed or wrote (stdout, stderr, the report, the spool's
/// neighbours) holds the secret.
fn assert_secret_kept(o: &Output, out: &Path) {
    for (what, text) in [("stdout", String::from_utf8_lossy(&o.stdout)), ("stderr", String::from_utf8_lossy(&o.stderr))] {
        assert!(!text.contains(SECRET), "the password appears in {what}:\n{text}");
    }
    let report = std::fs::read_to_string(out.join("report.json")).unwrap();
    assert!(!report.contains(SECRET), "the password appears in the report");
}

/// Every message of `topic` (one partition) over TLS with the client certificate.
fn consume_tls(broker: &str, certs: &Path, topic: &str, want: usize) -> Vec<serde_json::Value> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "test")
        .set("enable.auto.commit", "false")
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", certs.join("ca.crt").display().to_string())
        .set("ssl.certificate.location", certs.join("client.crt").display().to_string())
        .set("ssl.key.location", certs.join("client.key").display().to_string())
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    let mut last = Instant::now();
    while t0.elapsed() < Duration::from_secs(30) && (got.len() < want || last.elapsed() < Duration::from_millis(1500)) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            got.push(serde_json::from_slice(m.payload().unwrap()).unwrap());
            last = Instant::now();
        }
    }
    got
}

#[test]
fn kafka_over_tls_with_a_client_certificate_and_a_wrong_ca_refused_loudly_losing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    certificates(&certs);
    // stunnel's port is what clients reach; the broker advertises it (its own port is plain TCP on loopback).
    let tls_port = util::brokers::free_port();
    let broker = tansu_advertising(dir.path(), tls_port);
    let _front = stunnel(dir.path(), &certs, tls_port, broker.port, true);
    let sink = |ca: &str, client_cert: bool| {
        let client =
            if client_cert { format!(", cert = \"{0}/client.crt\", key = \"{0}/client.key\"", certs.display()) } else { String::new() };
        format!(
            "[sinks.bus]\nkind = \"kafka\"\ninputs = [\"cam\"]\nbrokers = \"127.0.0.1:{tls_port}\"\ntopic = \"secure\"\n\
             spool_dir = \"{}\"\nflush_timeout_ms = 2000\ntls = {{ ca = \"{}/{ca}\"{client} }}\n",
            dir.path().join("spool").display(),
            certs.display()
        )
    };
    let p = dir.path().join("tls.toml");

    // The broker's CA and a client certificate: delivered over TLS.
    std::fs::write(&p, testsrc(30) + &sink("ca.crt", true)).unwrap();
    let o = run(&p, dir.path(), &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(figure(&err, "delivered"), 30, "{err}");
    assert!(err.contains("Kafka to 127.0.0.1:"), "{err}");

    // A CA that did not sign the broker's certificate: refused, said, kept.
    std::fs::write(&p, testsrc(20) + &sink("other-ca.crt", true)).unwrap();
    let o = run(&p, dir.path(), &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "a broker it cannot reach does not fail the run:\n{err}");
    assert!(err.contains("certificate verify failed"), "the reason is said:\n{err}");
    assert!(err.contains("the broker is unreachable"), "{err}");
    assert_eq!((figure(&err, "delivered"), figure(&err, "undelivered")), (0, 20), "{err}");

    // No client certificate, where the broker's side asks for one: refused too.
    std::fs::write(&p, testsrc(10) + &sink("ca.crt", false)).unwrap();
    let o = run(&p, dir.path(), &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(figure(&err, "delivered"), 0, "{err}");
    assert_eq!(figure(&err, "undelivered"), 30, "the 20 waiting, and these 10:\n{err}");

    // Right again: the 30 waiting go first, then 5 new.
    std::fs::write(&p, testsrc(5) + &sink("ca.crt", true)).unwrap();
    let o = run(&p, dir.path(), &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!((figure(&err, "delivered"), figure(&err, "retried")), (35, 30), "{err}");
    let got = consume_tls(&format!("127.0.0.1:{tls_port}"), &certs, "secure", 65);
    let seqs: Vec<u64> = got.iter().filter_map(|v| v["seq"].as_u64()).collect();
    let want: Vec<u64> = (0..30).chain(0..20).chain(0..10).chain(0..5).collect();
    assert_eq!(seqs, want, "every run's frames, in order, none lost");
}

#[test]
fn a_kafka_sasl_password_from_the_environment_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    // A broker that asks for SASL and knows no user: the sink is refused, loudly.
    let port = util::brokers::free_port();
    let cmd = [
        "broker",
        "--listener-url",
        &format!("tcp://127.0.0.1:{port}"),
        "--advertised-listener-url",
        &format!("tcp://127.0.0.1:{port}"),
        "--storage-engine",
        "memory://tansu/",
        "--authentication",
    ]
    .map(String::from);
    let mut broker =
        std::process::Command::new(util::brokers::tansu_bin()).args(&cmd).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    assert!(util::brokers::wait_for_port(port, Duration::from_secs(15)));
    let p = dir.path().join("sasl.toml");
    let text = testsrc(10)
        + &format!(
            "[sinks.bus]\nkind = \"kafka\"\ninputs = [\"cam\"]\nbrokers = \"127.0.0.1:{port}\"\ntopic = \"t\"\nspool_dir = \"{}\"\n\
             flush_timeout_ms = 1500\nsasl = {{ mechanism = \"SCRAM-SHA-512\", username = \"alice\", password = \"${{KAFKA_PW}}\" }}\n\
             client = {{ \"debug\" = \"security,broker,conf\" }}\n",
            dir.path().join("spool").display()
        );
    std::fs::write(&p, &text).unwrap();
    let o = run(&p, dir.path(), &[("KAFKA_PW", SECRET)]);
    let _ = broker.kill();
    let _ = broker.wait();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!((figure(&err, "delivered"), figure(&err, "undelivered")), (0, 10), "refused, kept:\n{err}");
    assert!(err.contains("SASL authentication error"), "the refusal is said:\n{err}");
    assert_secret_kept(&o, dir.path());
    // `validate` and `--dry-run`-like views print the settings: masked there too.
    let v = bin().args(["validate", p.to_str().unwrap()]).env("KAFKA_PW", SECRET).output().unwrap();
    assert!(v.status.success(), "{}", stderr(&v));
    let all = format!("{}{}", String::from_utf8_lossy(&v.stdout), stderr(&v));
    assert!(!all.contains(SECRET), "{all}");
}

type Got = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

fn subscribe(port: u16, user: &str, password: &str) -> (Client, Got) {
    let mut o = MqttOptions::new("watcher", "127.0.0.1", port);
    o.set_credentials(user, password).set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(o, 100);
    client.subscribe("site/#", QoS::AtLeastOnce).unwrap();
    let got: Got = Arc::default();
    let g = got.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for ev in conn.iter() {
            match ev {
                Ok(Event::Incoming(Packet::Publish(p))) => g.lock().unwrap().push((p.topic.clone(), p.payload.to_vec())),
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = tx.send(());
                }
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("subscribed");
    (client, got)
}

#[test]
fn mqtt_over_tls_with_a_password_and_a_wrong_one_refused_loudly_losing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    certificates(&certs);
    let (broker, plain) = mosquitto_secure(dir.path(), &certs, "cam-writer", SECRET);
    let (_sub, got) = subscribe(plain, "cam-writer", SECRET);
    let p = dir.path().join("mqtt.toml");
    let text = |frames: u64| {
        testsrc(frames)
            + &format!(
                "[sinks.bus]\nkind = \"mqtt\"\ninputs = [\"cam\"]\nbroker = \"mqtts://127.0.0.1:{}\"\nprefix = \"site\"\n\
                 username = \"cam-writer\"\npassword = \"${{MQTT_PW}}\"\ntls = {{ ca = \"{}\" }}\nspool_dir = \"{}\"\nflush_timeout_ms = 2000\n",
                broker.port,
                certs.join("ca.crt").display(),
                dir.path().join("spool").display()
            )
    };
    let results = |got: &Got| -> Vec<u64> {
        got.lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == "site/cam/results")
            .map(|(_, b)| serde_json::from_slice::<serde_json::Value>(b).unwrap()["seq"].as_u64().unwrap())
            .collect()
    };

    // A wrong password: refused, said, kept in the spool; neither password printed.
    std::fs::write(&p, text(20)).unwrap();
    let o = run(&p, dir.path(), &[("MQTT_PW", "wrong-pw-also-secret")]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!((figure(&err, "delivered"), figure(&err, "undelivered")), (0, 20), "{err}");
    let lower = err.to_lowercase();
    assert!(lower.contains("not authorized") || lower.contains("bad user name or password") || lower.contains("refused"), "said:\n{err}");
    assert!(!err.contains("wrong-pw-also-secret"), "{err}");
    assert_secret_kept(&o, dir.path());
    assert!(results(&got).is_empty());

    // The right password over TLS: what waited first, then the new frames.
    std::fs::write(&p, text(10)).unwrap();
    let o = run(&p, dir.path(), &[("MQTT_PW", SECRET)]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_secret_kept(&o, dir.path());
    assert!(figure(&err, "delivered") >= 30, "{err}");
    let t0 = Instant::now();
    while results(&got).len() < 30 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let want: Vec<u64> = (0..20).chain(0..10).collect();
    assert_eq!(results(&got), want, "every frame, in order, none lost");
}
