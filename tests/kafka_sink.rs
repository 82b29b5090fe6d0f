//! The Kafka sink against a real Kafka-protocol broker (Tansu, started here):
//! messages equal the frames and validate against docs/messages.schema.json;
//! a broker killed mid-run and restarted loses nothing; SIGTERM while the
//! broker is down exits within the flush deadline and the next run delivers
//! the spool before anything new.

mod util;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers as _;
use rdkafka::{Message, Offset, TopicPartitionList};
use util::brokers::{Broker, delivery_line, figure, free_port, tansu};
use util::*;

/// Every message of `topic` from the start, read until none came for `quiet`
/// (at most `within`): (partition, value as JSON).
fn consume(broker: &str, topic: &str, want: usize, quiet: Duration, within: Duration) -> Vec<(i32, serde_json::Value)> {
    consume_with_headers(broker, topic, want, quiet, within).into_iter().map(|(p, v, _)| (p, v)).collect()
}

/// A consumed message's headers, by name (values as text).
type Headers = std::collections::BTreeMap<String, String>;

/// [`consume`], with each message's headers.
fn consume_with_headers(
    broker: &str,
    topic: &str,
    want: usize,
    quiet: Duration,
    within: Duration,
) -> Vec<(i32, serde_json::Value, Headers)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "test")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .unwrap();
    let t0 = Instant::now();
    // The topic exists once the sink wrote to it (auto-created): assign all its partitions from the start.
    let parts = loop {
        if let Ok(md) = c.fetch_metadata(Some(topic), Duration::from_secs(2))
            && let Some(t) = md.topics().iter().find(|t| t.name() == topic)
            && !t.partitions().is_empty()
        {
            break t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>();
        }
        if t0.elapsed() >= within {
            let md = c.fetch_metadata(None, Duration::from_secs(2));
            let seen: Vec<String> = md
                .iter()
                .flat_map(|m| m.topics().iter().map(|t| format!("{} {:?} {}", t.name(), t.error(), t.partitions().len())))
                .collect();
            panic!("topic {topic} never appeared; the broker has {seen:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut tpl = TopicPartitionList::new();
    for p in &parts {
        tpl.add_partition_offset(topic, *p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let mut last = Instant::now();
    while t0.elapsed() < within && (got.len() < want || last.elapsed() < quiet) {
        if got.len() >= want && last.elapsed() >= quiet {
            break;
        }
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let v: serde_json::Value = serde_json::from_slice(m.payload().expect("a value")).expect("JSON");
                assert_eq!(m.key(), v["stream"].as_str().map(str::as_bytes), "the key is the stream");
                let headers: Headers = m
                    .headers()
                    .map(|h| {
                        h.iter().map(|h| (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())).collect()
                    })
                    .unwrap_or_default();
                got.push((m.partition(), v, headers));
                last = Instant::now();
            }
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
    }
    got
}

/// The schema validator for docs/messages.schema.json.
fn validator() -> impl Fn(&serde_json::Value) {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("docs/messages.schema.json")).unwrap()).unwrap();
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource("messages.schema.json", schema).unwrap();
    let idx = compiler.compile("messages.schema.json", &mut schemas).unwrap();
    move |v| {
        if let Err(e) = schemas.validate(v, idx) {
            panic!("{v} does not match docs/messages.schema.json:\n{e:#}");
        }
    }
}

fn kafka_sink(broker: &str, topic: &str, spool: &Path, extra: &str) -> String {
    format!(
        "[sinks.bus]\nkind = \"kafka\"\ninputs = [\"cam\"]\nbrokers = \"{broker}\"\ntopic = \"{topic}\"\nspool_dir = \"{}\"\n{extra}",
        spool.display()
    )
}

/// A live-paced test pattern, `frames` frames at `rate`.
fn testsrc(frames: u64, rate: u32) -> String {
    format!("[sources.cam]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nrate = {rate}\nframes = {frames}\nrealtime = true\n")
}

fn spawn(p: &Path, out: &Path) -> Child {
    require_assets();
    bin()
        .args(["run", p.to_str().unwrap(), "--progress", "never"])
        .env("INFER_STREAM_TEST_OUT", out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(c: Child) -> (Option<i32>, String) {
    let o = c.wait_with_output().unwrap();
    (o.status.code(), stderr(&o))
}

fn signal(c: &Child, sig: &str) {
    assert!(Command::new("kill").args([sig, &c.id().to_string()]).status().unwrap().success());
}

/// Frames' seq numbers per stream must never go down (at least once: a repeat
/// goes back only to resend what followed it, in order). Returns the distinct
/// seqs seen and the count of duplicates.
fn seqs_in_order(msgs: &[(i32, serde_json::Value)], stream: &str) -> (Vec<u64>, usize) {
    let seqs: Vec<u64> = msgs.iter().filter(|(_, v)| v["stream"] == stream).filter_map(|(_, v)| v["seq"].as_u64()).collect();
    let mut distinct: Vec<u64> = seqs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    // Order: after removing repeats of what was already seen, the first sightings increase.
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<u64> = seqs.iter().copied().filter(|s| seen.insert(*s)).collect();
    assert!(firsts.windows(2).all(|w| w[0] < w[1]), "stream {stream} out of order: {firsts:?}");
    (distinct, seqs.len() - seen.len())
}

#[test]
fn messages_equal_the_frames_in_order_and_match_the_schema() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let broker = tansu(dir.path(), "memory://tansu/");
    // The text-detection pipeline (pipelines/text-detection.toml) on the eval clip, the
    // same results twice: as NDJSON and through Kafka.
    let r = root();
    let text = format!(
        "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\nmax_frames = 12\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 640\nheight = 384\nresize = \"letterbox\"\ncolor = \"bgr\"\n\
         mean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\npad_value = 0\n\
         [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\nproviders = [\"cpu\"]\n\
         [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\nthreshold = 0.3\nbox_threshold = 0.5\nunclip_ratio = 1.6\n\
         [sinks.bus]\nkind = \"kafka\"\ninputs = [\"boxes\"]\nbrokers = \"{}\"\ntopic = \"results-{{stream}}\"\nspool_dir = \"{}\"\n\
         [sinks.file]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{}\"\n",
        r.join("samples/eval-720p.mp4").display(),
        r.join("models/ppocr/ch_PP-OCRv4_det_infer.onnx").display(),
        broker.addr(),
        dir.path().join("spool").display(),
        dir.path().join("r.ndjson").display()
    );
    let p = dir.path().join("k.toml");
    std::fs::write(&p, &text).unwrap();
    let o = bin().args(["run", p.to_str().unwrap(), "--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{text}\n{err}");
    let lines = read_ndjson(&dir.path().join("r.ndjson"));
    let (_, processed, _, _) = accounting(&err);
    assert_eq!(lines.len() as u64, processed);
    assert_eq!(processed, 12);
    let line = delivery_line(&err, "bus");
    assert_eq!(figure(line, "delivered"), 12, "{line}");
    assert_eq!(figure(line, "spooled"), 0, "{line}");

    let got = consume_with_headers(&broker.addr(), "results-cam", lines.len(), Duration::from_millis(1500), Duration::from_secs(30));
    // Each message is the frame's line with the run's id added (the same in every message and its headers).
    let run = got[0].1["run"].as_str().expect("a run id").to_string();
    assert!(err.contains(&format!(", run {run})")), "the start line names the run:\n{err}");
    let mut values: Vec<serde_json::Value> = Vec::new();
    for (_, v, h) in &got {
        assert_eq!(v["run"], run.as_str(), "{v}");
        assert_eq!(h.get("run"), Some(&run), "{h:?}");
        assert_eq!(h.get("id"), Some(&format!("{run}/cam/{}", v["seq"])), "{h:?}");
        let mut v = v.clone();
        v.as_object_mut().unwrap().shift_remove("run");
        values.push(v);
    }
    let want: Vec<&serde_json::Value> = lines.iter().collect();
    assert_eq!(values.iter().collect::<Vec<_>>(), want, "the messages are the frames, in order");
    let values: Vec<&serde_json::Value> = got.iter().map(|(_, v, _)| v).collect();
    let check = validator();
    for v in &values {
        check(v);
        assert_eq!(v["schema"], 1);
    }
    assert!(values.iter().any(|v| v["results"]["boxes"]["text_boxes"].as_array().is_some_and(|b| !b.is_empty())), "text was found");
}

#[test]
fn a_broker_killed_mid_run_and_restarted_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = tansu(dir.path(), "memory://tansu/");
    create_topic(&broker, "live");
    let frames = 300;
    // The producer's defaults (idempotent, acks = all, 5 requests in flight).
    // Tansu in memory also forgets producer ids with its restart and refuses
    // the producer's sequence from then on: the stall check makes a new one.
    let text = testsrc(frames, 20)
        + &kafka_sink(
            &broker.addr(),
            "live",
            &dir.path().join("spool"),
            "buffer_messages = 40\nflush_timeout_ms = 20000\nstall_timeout_ms = 2000\nqueue = { when_full = \"block\" }\n",
        );
    let p = dir.path().join("live.toml");
    std::fs::write(&p, &text).unwrap();
    let child = spawn(&p, dir.path());

    // Before the kill: everything the broker stored is read back (it keeps
    // nothing across its own restart here), with the pipeline frozen so that
    // nothing new is stored meanwhile. The sink is the one that must not lose.
    std::thread::sleep(Duration::from_secs(3));
    signal(&child, "-STOP");
    let before = consume(&broker.addr(), "live", 1, Duration::from_millis(1500), Duration::from_secs(20));
    assert!(!before.is_empty(), "nothing was delivered before the kill");
    broker.kill();
    signal(&child, "-CONT");
    std::thread::sleep(Duration::from_secs(10));
    // Tansu in memory forgets its topics with its restart and takes (then drops)
    // messages for a topic it does not know: the topic is made again, with the
    // pipeline frozen, before the sink can reach it, as a durable broker would have it.
    signal(&child, "-STOP");
    broker.start();
    create_topic(&broker, "live");
    signal(&child, "-CONT");
    let (code, err) = finish(child);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("the broker is unreachable"), "said loudly:\n{err}");
    assert!(err.contains("the broker is reachable again"), "said loudly:\n{err}");
    assert!(err.contains("acknowledged nothing for 2000 ms: the client was started again"), "the stuck producer was made again:\n{err}");
    let line = delivery_line(&err, "bus");
    assert!(figure(line, "spooled") > 0, "10 s at 20 fps is more than the 40 messages of memory: {line}");
    assert!(figure(line, "delivered") >= frames - before.len() as u64, "{line}");
    assert!(!line.contains("undelivered"), "{line}");

    let after = consume(&broker.addr(), "live", 1, Duration::from_millis(1500), Duration::from_secs(30));
    let mut all = before.clone();
    all.extend(after.iter().cloned());
    let (b, _) = seqs_in_order(&before, "cam");
    let (a, dups_after) = seqs_in_order(&after, "cam");
    // Each broker instance saw its messages in order; together they have every frame.
    let mut every: Vec<u64> = b.iter().chain(&a).copied().collect();
    every.sort_unstable();
    let dups_across = every.len();
    every.dedup();
    let dups_across = dups_across - every.len();
    assert_eq!(every, (0..frames).collect::<Vec<_>>(), "a frame is missing");
    // After the restart: first what was unacknowledged when the broker died (from its oldest), then the rest in order.
    assert!(a.first().is_some_and(|&s| s <= *b.last().unwrap() + 1), "the restarted broker starts where the first left off: {a:?}");
    eprintln!(
        "before the kill {} messages, after {}; duplicates: {} across the restart, {} within the second broker",
        before.len(),
        after.len(),
        dups_across,
        dups_after
    );
}

#[test]
fn sigterm_while_the_broker_is_down_exits_in_time_and_the_next_run_sends_the_spool_first() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let spool = dir.path().join("spool");
    let flush_ms = 1500;
    let text = testsrc(100_000, 20) + &kafka_sink(&addr, "late", &spool, &format!("buffer_messages = 10\nflush_timeout_ms = {flush_ms}\n"));
    let p = dir.path().join("late.toml");
    std::fs::write(&p, &text).unwrap();
    let child = spawn(&p, dir.path());
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    signal(&child, "-TERM");
    let (code, err) = finish(child);
    let took = t0.elapsed();
    assert_eq!(code, Some(143), "{err}");
    assert!(took < Duration::from_millis(flush_ms + 1000), "exited {took:?} after SIGTERM (flush_timeout_ms = {flush_ms})\n{err}");
    let line = delivery_line(&err, "bus");
    let left = figure(line, "undelivered");
    let (decoded, _, _, _) = accounting(&err);
    assert_eq!(left, decoded, "every frame's message waits in the spool: {line}");
    assert!(figure(line, "spooled") > 0 && figure(line, "delivered") == 0, "{line}");

    // The broker comes up on that port; a second run writes 5 new frames.
    let broker = tansu_on(dir.path(), port);
    create_topic(&broker, "late");
    let text = testsrc(5, 50) + &kafka_sink(&addr, "late", &spool, "");
    std::fs::write(&p, &text).unwrap();
    let (code, err) = finish(spawn(&p, dir.path()));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("replaying {left} message(s) left in the spool")), "{err}");
    let line = delivery_line(&err, "bus");
    assert_eq!(figure(line, "retried"), left, "{line}");
    let got = consume(&addr, "late", (left + 5) as usize, Duration::from_millis(1500), Duration::from_secs(30));
    let seqs: Vec<u64> = got.iter().filter_map(|(_, v)| v["seq"].as_u64()).collect();
    let want: Vec<u64> = (0..left).chain(0..5).collect();
    assert_eq!(seqs, want, "the spooled frames first, in order, then the new run's");
}

/// The identity of a frame's message (docs/messages.md): (run, stream, seq),
/// checked against the Kafka headers `run` and `id`.
fn identity(v: &serde_json::Value, h: &Headers) -> (String, String, u64) {
    let run = v["run"].as_str().unwrap_or_else(|| panic!("a message without its run: {v}")).to_string();
    let stream = v["stream"].as_str().unwrap().to_string();
    let seq = v["seq"].as_u64().unwrap_or_else(|| panic!("not a frame: {v}"));
    assert_eq!(h.get("run"), Some(&run), "the header `run` is the body's: {v} {h:?}");
    assert_eq!(h.get("id"), Some(&format!("{run}/{stream}/{seq}")), "the header `id`: {v} {h:?}");
    (run, stream, seq)
}

/// Run 1 is cut off from the broker mid-run (messages spool) and stopped while
/// it is still away (messages left in the spool); run 2 replays them, then sends
/// its own. A consumer reading the topic throughout, de-duplicating with the
/// documented rule, has every frame of both runs exactly once; the rule seq
/// restarts broke (the last seq per stream) would have thrown run 2 away.
#[test]
fn every_frame_of_two_runs_once_across_an_outage_a_stop_and_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = tansu(dir.path(), "memory://tansu/");
    let addr = broker.addr();
    create_topic(&broker, "ids");
    let spool = dir.path().join("spool");
    let p = dir.path().join("ids.toml");
    let text = testsrc(100_000, 20) + &kafka_sink(&addr, "ids", &spool, "buffer_messages = 20\nflush_timeout_ms = 1500\n");
    std::fs::write(&p, &text).unwrap();
    let child = spawn(&p, dir.path());
    std::thread::sleep(Duration::from_secs(3));
    // What the broker holds before the outage (Tansu in memory keeps nothing across
    // its restart), read with the pipeline frozen so that nothing is stored meanwhile.
    signal(&child, "-STOP");
    let before = consume_with_headers(&addr, "ids", 1, Duration::from_millis(1500), Duration::from_secs(20));
    assert!(!before.is_empty(), "nothing was delivered before the outage");
    broker.kill();
    signal(&child, "-CONT");
    std::thread::sleep(Duration::from_secs(3));
    signal(&child, "-TERM");
    let (code, err) = finish(child);
    assert_eq!(code, Some(143), "{err}");
    let line = delivery_line(&err, "bus");
    let left = figure(line, "undelivered");
    // The live source drops frames at the sink's queue while the pipeline is frozen:
    // every frame the sink took is delivered or kept.
    let (_, decoded1, _, _) = accounting(&err);
    assert!(left > 20, "more than the 20 messages of memory wait: {line}");
    assert_eq!(figure(line, "delivered") + left, decoded1, "every frame the sink took delivered or kept: {line}\n{err}");
    // Everything left at exit was spooled, and counted so (a message spooled during the
    // outage and delivered later is counted too, once).
    let spooled = figure(line, "spooled");
    assert!(
        spooled >= left && spooled <= left + figure(line, "delivered"),
        "the spooled figure counts what was left in the spool at exit: {line}"
    );
    // The outage is handled (spooled, said once as a warning): librdkafka's lines about it are not errors.
    assert!(err.contains("the broker is unreachable"), "{err}");
    assert!(err.lines().any(|l| l.contains(" INFO ") && l.contains("librdkafka:")), "librdkafka's reconnect lines, at INFO:\n{err}");
    assert!(!err.lines().any(|l| l.contains("ERROR") && l.contains("librdkafka")), "a handled outage logged as an error:\n{err}");

    // The broker is back (empty); run 2 sends 30 frames after what run 1 left.
    broker.start();
    create_topic(&broker, "ids");
    let frames2 = 30;
    std::fs::write(&p, testsrc(frames2, 50) + &kafka_sink(&addr, "ids", &spool, "")).unwrap();
    let (code, err) = finish(spawn(&p, dir.path()));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("replaying {left} message(s) left in the spool")), "{err}");
    let line = delivery_line(&err, "bus");
    assert_eq!((figure(line, "retried"), figure(line, "spooled")), (left, 0), "{line}");
    let after = consume_with_headers(&addr, "ids", (left + frames2) as usize, Duration::from_millis(1500), Duration::from_secs(30));

    let all: Vec<(String, String, u64)> = before.iter().chain(&after).map(|(_, v, h)| identity(v, h)).collect();
    let run1 = all[0].0.clone();
    let run2 = all.last().unwrap().0.clone();
    assert_ne!(run1, run2, "each run has its own id");
    assert!(after[..left as usize].iter().all(|(_, v, _)| v["run"] == run1.as_str()), "the replayed messages keep run 1's id");
    // The documented rule: keep the set of identities delivered.
    let mut seen = std::collections::HashSet::new();
    let kept: Vec<&(String, String, u64)> = all.iter().filter(|id| seen.insert((*id).clone())).collect();
    let mut got: Vec<(String, String, u64)> = kept.iter().map(|id| (*id).clone()).collect();
    got.sort_by_key(|(r, _, s)| (*r != run1, *s));
    assert!(got.iter().all(|(r, st, _)| (*r == run1 || *r == run2) && st == "cam"), "only the two runs' frames: {got:?}");
    // Run 1: every frame its sink took (the frozen live source dropped some before the sink), once each.
    let seqs1: Vec<u64> = got.iter().filter(|(r, _, _)| *r == run1).map(|(_, _, s)| *s).collect();
    assert_eq!(seqs1.len() as u64, decoded1, "every frame of run 1's sink, once: {seqs1:?}");
    // Run 2: every frame, in order of seq, once.
    let seqs2: Vec<u64> = got.iter().filter(|(r, _, _)| *r == run2).map(|(_, _, s)| *s).collect();
    assert_eq!(seqs2, (0..frames2).collect::<Vec<_>>(), "every frame of run 2, once");
    let want = got.clone();
    // Its shortcut: the highest seq per (run, stream) keeps the same frames.
    let mut last: std::collections::HashMap<(String, String), u64> = std::collections::HashMap::new();
    let by_last = all
        .iter()
        .filter(|(r, st, s)| {
            let k = (r.clone(), st.clone());
            let new = last.get(&k).is_none_or(|l| s > l);
            if new {
                last.insert(k, *s);
            }
            new
        })
        .count();
    assert_eq!(by_last, want.len(), "the highest seq per (run, stream) keeps every frame once");
    // The rule the seq restart broke: the last seq per stream alone loses run 2's frames.
    let mut last: Option<u64> = None;
    let by_stream = all
        .iter()
        .filter(|(_, _, s)| {
            let new = last.is_none_or(|l| *s > l);
            if new {
                last = Some(*s);
            }
            new
        })
        .count();
    assert!(by_stream < want.len(), "the old rule keeps {by_stream} of {}", want.len());
    eprintln!("run 1: {decoded1} frames, {left} left in the spool; {} messages before the outage, {} after", before.len(), after.len());
}

/// A topic of one partition on `broker` (`tansu topic create`).
fn create_topic(broker: &Broker, name: &str) {
    let st = Command::new(util::brokers::tansu_bin())
        .args(["topic", "create", name, "--partitions", "1", "--broker", &format!("tcp://{}", broker.addr())])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "tansu topic create {name}");
}

/// Tansu on a given port (in memory).
fn tansu_on(dir: &Path, port: u16) -> Broker {
    util::brokers::tansu_at(dir, "memory://tansu/", port)
}
