//! The outbox's order and bounds, over a transport that records what it was
//! given and acknowledges only when told (the broker's side is exercised by
//! tests/kafka_sink.rs and tests/mqtt_sink.rs against real brokers).

use super::*;

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<u64>>>);

impl Transport for Recorder {
    fn submit(&mut self, token: u64, _msg: &Arc<Message>) -> Result<(), String> {
        self.0.lock().unwrap().push(token);
        Ok(())
    }
    fn close(&mut self) {}
}

fn msg(stream: &str, i: u32) -> Message {
    Message { topic: "t".into(), key: stream.into(), body: i.to_string().into_bytes(), id: format!("r/{stream}/{i}") }
}

fn limits(buffer: usize) -> Limits {
    Limits { buffer_messages: buffer, spool_max_bytes: 1 << 20, flush_timeout: Duration::from_millis(100), stall_timeout: None }
}

#[test]
fn past_the_memory_bound_messages_spool_and_go_out_in_order() {
    let d = tempfile::tempdir().unwrap();
    let rec = Recorder::default();
    let (tx, rx) = crossbeam_channel::unbounded();
    let stats = Arc::new(Delivery::default());
    let mut ob = Outbox::open("k", rec.clone(), rx, &d.path().join("k.spool"), limits(3), stats.clone()).unwrap();
    for i in 0..8 {
        ob.push(msg("a", i)).unwrap();
    }
    // Three in memory, five on disk.
    assert_eq!(*rec.0.lock().unwrap(), [0, 1, 2]);
    assert_eq!(stats.spooled.load(Ordering::Relaxed), 5);
    assert!(stats.spool_bytes.load(Ordering::Relaxed) > 0);
    assert_eq!(ob.pending(Some("a")), 8);
    // Acknowledgements make room: the spool is sent next, in order, before anything new.
    for t in 0..3 {
        tx.send(Note::Acked(t)).unwrap();
    }
    ob.push(msg("a", 8)).unwrap();
    assert_eq!(*rec.0.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
    for t in 3..9 {
        tx.send(Note::Acked(t)).unwrap();
        ob.pump();
    }
    assert_eq!(*rec.0.lock().unwrap(), (0..9).collect::<Vec<_>>());
    assert!(ob.flush(Some("a")).is_ok());
    assert_eq!(stats.delivered.load(Ordering::Relaxed), 9);
    assert_eq!(stats.spool_bytes.load(Ordering::Relaxed), 0);
}

#[test]
fn what_is_undelivered_at_close_is_replayed_first_at_the_next_open() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("k.spool");
    let (tx, rx) = crossbeam_channel::unbounded();
    let stats = Arc::new(Delivery::default());
    let mut ob = Outbox::open("k", Recorder::default(), rx, &path, limits(2), stats.clone()).unwrap();
    for i in 0..5 {
        ob.push(msg(if i % 2 == 0 { "a" } else { "b" }, i)).unwrap();
    }
    tx.send(Note::Acked(1)).unwrap();
    let t0 = Instant::now();
    assert!(ob.flush(Some("a")).is_err(), "nothing of `a` was acknowledged");
    assert!(t0.elapsed() >= Duration::from_millis(100));
    // A second wait without any acknowledgement meanwhile does not wait again.
    let t1 = Instant::now();
    assert!(ob.flush(None).is_err());
    assert!(t1.elapsed() < Duration::from_millis(100));
    assert_eq!(stats.spooled.load(Ordering::Relaxed), 3, "two in memory, three on disk");
    assert_eq!(ob.close().unwrap(), 4);
    assert_eq!(stats.left_in_spool.load(Ordering::Relaxed), 4);
    // The one still in memory (token 0) went to the spool at exit: every message left there was spooled, once.
    assert_eq!(stats.spooled.load(Ordering::Relaxed), 4, "what was left in the spool at exit counts as spooled");
    drop(ob);

    let rec = Recorder::default();
    let (_tx, rx) = crossbeam_channel::unbounded();
    let mut ob = Outbox::open("k", rec.clone(), rx, &path, limits(10), Arc::new(Delivery::default())).unwrap();
    assert_eq!(ob.pending(Some("a")), 3);
    assert_eq!(ob.pending(Some("b")), 1);
    ob.push(msg("a", 5)).unwrap();
    // 0, 2, 3, 4 from the earlier run (1 was delivered), then the new one.
    assert_eq!(*rec.0.lock().unwrap(), [0, 2, 3, 4, 5]);
}

#[test]
fn a_full_spool_drops_new_messages_and_counts_them() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = crossbeam_channel::unbounded();
    let stats = Arc::new(Delivery::default());
    let l = Limits { buffer_messages: 1, spool_max_bytes: 64, flush_timeout: Duration::ZERO, stall_timeout: None };
    let mut ob = Outbox::open("k", Recorder::default(), rx, &d.path().join("k.spool"), l, stats.clone()).unwrap();
    for i in 0..10 {
        ob.push(msg("a", i)).unwrap();
    }
    let (spooled, dropped) = (stats.spooled.load(Ordering::Relaxed), stats.dropped.load(Ordering::Relaxed));
    assert!(spooled >= 1 && dropped >= 1, "spooled {spooled}, dropped {dropped}");
    assert_eq!(1 + spooled + dropped, 10);
    assert!(stats.spool_bytes.load(Ordering::Relaxed) <= 64);
}

#[test]
fn settings_are_checked_before_the_run_at_their_keys() {
    let errors = |sink: &str| -> Vec<String> {
        let src = format!("[sources.cam]\nkind = \"testsrc\"\n[sinks.bus]\ninputs = [\"cam\"]\n{sink}");
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src).unwrap();
        match crate::graph::check(&cfg) {
            Ok(_) => Vec::new(),
            Err(d) => d.0.iter().map(|d| format!("{}:{} {}", d.line, d.column, d.message)).collect(),
        }
    };
    let kafka = "kind = \"kafka\"\nbrokers = \"127.0.0.1:9\"\n";
    assert_eq!(errors(&format!("{kafka}topic = \"r-{{stream}}\"\n")), Vec::<String>::new());
    assert_eq!(errors(&format!("{kafka}topic = \"r\"\nacks = \"1\"\n")), ["5:8 sink `bus`: the idempotent producer needs acks = \"all\""]);
    assert_eq!(errors(&format!("{kafka}topic = \"r\"\nacks = \"1\"\nidempotent = false\n")), Vec::<String>::new());
    assert_eq!(errors(&format!("{kafka}topic = \"a b\"\n")), ["7:9 sink `bus`: `a b` is not a Kafka topic name"]);
    assert_eq!(errors("kind = \"mqtt\"\nbroker = \"127.0.0.1:1883\"\n"), Vec::<String>::new());
    assert_eq!(
        errors("kind = \"mqtt\"\nbroker = \"http://h:1\"\n"),
        ["6:10 sink `bus`: broker `http://h:1`: unknown scheme `http://` (mqtt:// or mqtts://)"]
    );
    assert_eq!(
        errors("kind = \"mqtt\"\nbroker = \"h:1\"\nprefix = \"a/#\"\n"),
        ["7:10 sink `bus`: an MQTT topic prefix cannot hold `+` or `#`"]
    );
}

/// Takes messages, acknowledges none, and can be started again.
#[derive(Clone, Default)]
struct Stuck {
    given: Arc<Mutex<Vec<u64>>>,
    restarts: Arc<Mutex<u32>>,
}

impl Transport for Stuck {
    fn submit(&mut self, token: u64, _msg: &Arc<Message>) -> Result<(), String> {
        self.given.lock().unwrap().push(token);
        Ok(())
    }
    fn close(&mut self) {}
    fn restart(&mut self) -> Result<bool, String> {
        *self.restarts.lock().unwrap() += 1;
        Ok(true)
    }
}

#[test]
fn a_connected_client_that_acknowledges_nothing_is_started_again_and_sent_everything_in_order() {
    let d = tempfile::tempdir().unwrap();
    let t = Stuck::default();
    let (tx, rx) = crossbeam_channel::unbounded();
    let stats = Arc::new(Delivery::default());
    let mut l = limits(10);
    l.stall_timeout = Some(Duration::from_millis(50));
    let mut ob = Outbox::open("k", t.clone(), rx, &d.path().join("k.spool"), l, stats.clone()).unwrap();
    for i in 0..4 {
        ob.push(msg("a", i)).unwrap();
    }
    tx.send(Note::Acked(0)).unwrap();
    // Not connected (as far as the client says): a broker away is waited for, not a reason to restart.
    std::thread::sleep(Duration::from_millis(80));
    ob.pump();
    assert_eq!(*t.restarts.lock().unwrap(), 0);
    // Connected, and still nothing acknowledged for the stall timeout.
    tx.send(Note::Link(true)).unwrap();
    ob.pump();
    assert_eq!(*t.restarts.lock().unwrap(), 0, "the wait starts when the connection is up");
    std::thread::sleep(Duration::from_millis(80));
    ob.pump();
    assert_eq!(*t.restarts.lock().unwrap(), 1);
    assert_eq!(*t.given.lock().unwrap(), [0, 1, 2, 3, 1, 2, 3], "what was in flight, again, in order");
    assert_eq!(stats.retried.load(Ordering::Relaxed), 3);
    // The new client delivers: nothing more is restarted.
    for tok in 1..4 {
        tx.send(Note::Acked(tok)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(80));
    ob.pump();
    assert_eq!(*t.restarts.lock().unwrap(), 1);
    assert_eq!(ob.pending(None), 0);
    assert_eq!(stats.delivered.load(Ordering::Relaxed), 4);
}
